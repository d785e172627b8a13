package rules

import (
	"encoding/json"
	"time"

	"github.com/heraldhq/herald/core/internal/directory"
)

// Event is one outbox event as the engine sees it.
type Event struct {
	TenantID      string          `json:"tenant_id"`
	EventID       string          `json:"event_id"`
	Type          string          `json:"type"`
	AggregateType string          `json:"aggregate_type,omitempty"`
	AggregateID   string          `json:"aggregate_id,omitempty"`
	Payload       json.RawMessage `json:"payload"`
	OccurredAt    time.Time       `json:"occurred_at"`
}

// Decision is the engine's answer for one event.
type Decision struct {
	EventID   string `json:"event_id"`
	EventType string `json:"event_type"`
	Severity  string `json:"severity"`
	// Shared marks first-to-act notifications: one action settles it for all.
	Shared     bool                `json:"shared"`
	Recipients []RecipientDecision `json:"recipients"`
	// Excluded lists users reached by an audience but not notified
	// (inactive, over max_recipients, unknown), with the reason.
	Excluded []Exclusion `json:"excluded,omitempty"`
	// Warnings name audiences that matched nobody to notify, and why.
	Warnings []string `json:"warnings,omitempty"`
}

// RecipientDecision is the outcome for one recipient. Exactly one per user.
type RecipientDecision struct {
	Recipient directory.Recipient `json:"recipient"`
	// Role is the role the user was reached with ("" for non-group audiences).
	Role string `json:"role,omitempty"`
	// Via names the audiences that reached the user.
	Via []string `json:"via"`
	// Channels are kept channels (deferred ones included), sorted by name.
	Channels []ChannelDecision `json:"channels"`
	// Dropped are channels considered and dropped, with the reason.
	Dropped []ChannelDecision `json:"dropped"`
	// LocalTime is the decision time on the recipient's clock
	// ("2026-03-10 23:00 Tue Europe/Rome").
	LocalTime string `json:"local_time"`
	// QuietHours is the window that applies to the recipient and whose it
	// is ("22:00–08:00 (the user's own (explicit))"); empty: none.
	QuietHours string `json:"quiet_hours,omitempty"`
}

// ChannelDecision says why one channel was kept or dropped.
type ChannelDecision struct {
	Channel   string `json:"channel"`
	Mandatory bool   `json:"mandatory"`
	// Deferred channels are kept but wait until DeferUntil (quiet hours).
	Deferred   bool      `json:"deferred,omitempty"`
	DeferUntil time.Time `json:"defer_until,omitzero"`
	Reason     string    `json:"reason"`
}

// Exclusion is a user an audience reached but the decision left out.
type Exclusion struct {
	UserID string `json:"user_id"`
	Reason string `json:"reason"`
}

// Rendered is the content of one notification on one channel (or, for
// channel "", the in-app inbox row).
type Rendered struct {
	Subject string          `json:"subject,omitempty"`
	Title   string          `json:"title,omitempty"`
	Body    string          `json:"body,omitempty"`
	HTML    string          `json:"html,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
}
