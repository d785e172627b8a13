package rules

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
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

// Directory is a snapshot of the directory data a decision needs. Its JSON
// form is the DIR.json file `herald rules explain --directory` reads; the
// daemon fills it from the database for the keys Needs returns.
type Directory struct {
	Recipients  []Recipient    `json:"recipients"`
	Groups      []Group        `json:"groups"`
	Members     []Member       `json:"members"`
	Preferences []Preference   `json:"preferences"`
	Settings    []GroupSetting `json:"settings"`
}

// Recipient is one user who can receive notifications.
type Recipient struct {
	UserID   string `json:"user_id"`
	UserType string `json:"user_type"`
	Email    string `json:"email,omitempty"`
	Phone    string `json:"phone,omitempty"`
	Locale   string `json:"locale,omitempty"`
	// TimeZone is an IANA zone name; empty means the defaults' zone.
	TimeZone string `json:"time_zone,omitempty"`
	Active   bool   `json:"active"`
	// QuietHours is the user's own window; nil falls back to group and
	// configured defaults.
	QuietHours   *QuietHours       `json:"quiet_hours,omitempty"`
	DeviceTokens []string          `json:"device_tokens,omitempty"`
	Attributes   map[string]string `json:"attributes,omitempty"`
}

// UnmarshalJSON decodes a recipient; "active" defaults to true when absent,
// as in the recipients table.
func (r *Recipient) UnmarshalJSON(b []byte) error {
	type plain Recipient
	p := plain{Active: true}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*r = Recipient(p)
	return nil
}

// QuietHours is a daily window in the recipient's time zone, "HH:MM" each;
// Start after End means an overnight window (22:00–08:00).
type QuietHours struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// Group is a set of users such as one restaurant's staff. Key is
// "<type>:<id>", e.g. "restaurant:5".
type Group struct {
	Key  string `json:"key"`
	Type string `json:"type"`
	// MaxRecipients caps how many members one event reaches (0 = no cap).
	MaxRecipients int         `json:"max_recipients,omitempty"`
	QuietHours    *QuietHours `json:"quiet_hours,omitempty"`
}

// Member places a user in a group with a role.
type Member struct {
	Group  string `json:"group"`
	UserID string `json:"user_id"`
	Role   string `json:"role"`
}

// Preference is a user's switch for one channel, for every event type
// (EventType "") or for one event type (which wins).
type Preference struct {
	UserID    string `json:"user_id"`
	EventType string `json:"event_type,omitempty"`
	Channel   string `json:"channel"`
	Enabled   bool   `json:"enabled"`
}

// GroupSetting is a group's switch for one channel, for every event type
// (EventType "") or for one event type (which wins). With Roles, an
// enabled setting holds only for members reached with one of those roles
// (seed 001: SMS on for the restaurant's managers only); for the other
// members it reads as disabled.
type GroupSetting struct {
	Group     string   `json:"group"`
	EventType string   `json:"event_type,omitempty"`
	Channel   string   `json:"channel"`
	Enabled   bool     `json:"enabled"`
	Roles     []string `json:"roles,omitempty"`
}

// Needs lists the directory data the decision for one event reads.
type Needs struct {
	// GroupKeys are groups whose members are an audience.
	GroupKeys []string `json:"group_keys,omitempty"`
	// UserIDs are single users (audience "user" and inline recipients).
	UserIDs []string `json:"user_ids,omitempty"`
	// UserTypes are broadcast audiences: every user of the type.
	UserTypes []string `json:"user_types,omitempty"`
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
}

// RecipientDecision is the outcome for one recipient. Exactly one per user.
type RecipientDecision struct {
	Recipient Recipient `json:"recipient"`
	// Role is the role the user was reached with ("" for non-group audiences).
	Role string `json:"role,omitempty"`
	// Via names the audiences that reached the user.
	Via []string `json:"via"`
	// Channels are kept channels (deferred ones included), sorted by name.
	Channels []ChannelDecision `json:"channels"`
	// Dropped are channels considered and dropped, with the reason.
	Dropped []ChannelDecision `json:"dropped"`
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

// RetryPolicy is a channel's declarative retry policy.
type RetryPolicy struct {
	// MaxAttempts counts every try, the first included.
	MaxAttempts int
	Initial     time.Duration
	Max         time.Duration
	Multiplier  float64
	// Jitter is the random fraction (0..1) added to or taken from a delay.
	Jitter float64
}

// Provider is one plugin instance serving a channel.
type Provider struct {
	// Name is unique within the channel; defaults to the plugin name.
	Name string
	// Plugin is the binary's short name: "email" runs herald-plugin-email.
	Plugin string
	// Priority orders failover: lower is tried first.
	Priority int
	// Checksum is the binary's expected SHA-256 (hex), optional.
	Checksum string
	// Config is passed to the plugin's Configure after the host checked it
	// against the plugin's field specs. It may hold secrets (resolved from
	// env: and file: references): never print it; String leaves it out.
	Config map[string]any
}

// String names the provider and lists its config keys, not their values,
// so that a provider printed or logged by mistake shows no secret.
func (p Provider) String() string {
	keys := make([]string, 0, len(p.Config))
	for k := range p.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return fmt.Sprintf("%s (plugin %s, priority %d, config keys [%s])", p.Name, p.Plugin, p.Priority, strings.Join(keys, " "))
}

// ChannelConfig is the configured behaviour of one channel.
type ChannelConfig struct {
	Name       string
	BestEffort bool
	// Intrusive channels are subject to quiet hours (EMAIL, PUSH, SMS by default).
	Intrusive bool
	// UserTypes lists user types the channel supports (empty = all).
	UserTypes []string
	Retry     RetryPolicy
	Providers []Provider
	// Breaker tunes the circuit breaker that fails over between the
	// channel's providers.
	Breaker BreakerConfig
	// TextFormat is the markup the channel's provider reads in text:
	// TextPlain, or TextSlack (Slack mrkdwn), where the values templates
	// interpolate are escaped so that a payload cannot mention <!channel>
	// or forge a link. Empty: TextSlack when a provider's plugin is
	// "slack", TextPlain otherwise.
	TextFormat string
}

// Text formats of a channel.
const (
	TextPlain = "plain"
	TextSlack = "slack"
)

// BreakerConfig is a channel's circuit-breaker tuning. Zero fields take the
// plugin host's defaults.
type BreakerConfig struct {
	// Cooldown is how long an open circuit keeps traffic away from a
	// provider before one probe send is let through (the host's default
	// is 10s).
	Cooldown time.Duration
}
