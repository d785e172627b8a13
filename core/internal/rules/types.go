package rules

import (
	"encoding/json"
	"fmt"
	"strings"
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
	Shared bool `json:"shared"`
	// InboxDigest, set when the rule's digest says inbox = "per_digest",
	// is the digest the recipients' inbox rows are collected into: the
	// event writes no inbox row of its own (unless Err says its key could
	// not be rendered), and the flush writes one per recipient and window.
	InboxDigest *DigestDecision     `json:"inbox_digest,omitempty"`
	Recipients  []RecipientDecision `json:"recipients"`
	// Excluded lists users reached by an audience but not notified
	// (inactive, over max_recipients, unknown), with the reason.
	Excluded []Exclusion `json:"excluded,omitempty"`
	// Warnings name audiences that matched nobody to notify, and why.
	Warnings []string `json:"warnings,omitempty"`
	// Posts are the event's posts to places: one per place channel the
	// rule posts to, whoever else the event reaches.
	Posts []PostDecision `json:"posts,omitempty"`
	// Channels are the channels the event's rule considers, each with
	// its class, intrusiveness and user types and where each came from
	// (explanations only).
	Channels []ChannelClass `json:"channels,omitempty"`
}

// ChannelClass is one channel's class (best-effort or persistent), whether
// quiet hours hold it (intrusive) and the user types it supports, each
// with the source that won: the rules ("set in rules"), the channel's
// plugin ("declared by plugin websocket") or the default's reason.
type ChannelClass struct {
	Channel       string   `json:"channel"`
	Class         string   `json:"class"`
	ClassFrom     string   `json:"class_from"`
	Intrusive     bool     `json:"intrusive"`
	IntrusiveFrom string   `json:"intrusive_from"`
	UserTypes     []string `json:"user_types,omitempty"`
	UserTypesFrom string   `json:"user_types_from"`
}

// String is the class in explain's words: "class best-effort (declared by
// plugin websocket); not intrusive (a best-effort channel)".
func (c ChannelClass) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "class %s (%s); ", c.Class, c.ClassFrom)
	if c.Intrusive {
		fmt.Fprintf(&b, "intrusive (%s)", c.IntrusiveFrom)
	} else {
		fmt.Fprintf(&b, "not intrusive (%s)", c.IntrusiveFrom)
	}
	if len(c.UserTypes) > 0 {
		fmt.Fprintf(&b, "; user types %s (%s)", strings.Join(c.UserTypes, ", "), c.UserTypesFrom)
	}
	return b.String()
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
	// InboxDigestClosesAt is when the recipient's per_digest inbox window
	// would close, for a digest with a schedule: its next occurrence in
	// the recipient's zone (nil otherwise).
	InboxDigestClosesAt *time.Time `json:"inbox_digest_closes_at,omitempty"`
}

// ChannelDecision says why one channel was kept or dropped.
type ChannelDecision struct {
	Channel   string `json:"channel"`
	Mandatory bool   `json:"mandatory"`
	// Deferred channels are kept but wait until DeferUntil (quiet hours).
	Deferred   bool      `json:"deferred,omitempty"`
	DeferUntil time.Time `json:"defer_until,omitzero"`
	// Escalation, when set, makes the channel wait for the in-app
	// notification to be read or acted on (the rule's escalate block).
	Escalation *Escalation `json:"escalation,omitempty"`
	Reason     string      `json:"reason"`
	// Digest, when set, says the channel is collected into a digest
	// instead of being sent alone.
	Digest *DigestDecision `json:"digest,omitempty"`
	// Throttle, when set, says the channel counts against a throttle.
	Throttle *ThrottleDecision `json:"throttle,omitempty"`
}

// PostDecision is one post of an event to a place: the place channel, the
// group whose destination receives it, and the destination's address; or,
// when the place cannot be addressed, Error says why (that post alone
// fails).
type PostDecision struct {
	Channel string `json:"channel"`
	// To is the rendered group key ("restaurant:42"); empty when the to
	// template did not render.
	To string `json:"to,omitempty"`
	// Address is the group's destination for the channel, as the
	// directory holds it; explanations do not show it.
	Address string `json:"-"`
	// Error says why no post can be made (unknown group, no destination
	// for the channel, a to template that failed).
	Error string `json:"error,omitempty"`
}

// String is the post in explain's words: "SLACK: one post to
// restaurant:42's channel".
func (p PostDecision) String() string {
	if p.Error != "" {
		return p.Channel + ": no post: " + p.Error
	}
	return p.Channel + ": one post to " + p.To + "'s channel"
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
