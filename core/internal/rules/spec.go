package rules

import (
	"encoding/json"
	"time"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/directory"
)

// Spec is the declarative form of a rule set: what an operator writes in the
// rules files, after parsing and with defaults applied. New compiles a Spec
// into a RuleSet. Package rulesfile builds a Spec from HCL or YAML files;
// tests and tools may build one directly.
type Spec struct {
	// Channels are the configured channels, sorted by name.
	Channels []channel.Config
	// Events are the rules of each event type, sorted by type.
	Events []EventSpec
	// Defaults are the fallbacks for recipients, groups and channels.
	Defaults DefaultsSpec
}

// Quiet-hours behaviours of an event (and of one of its channels).
const (
	// QuietDrop drops intrusive channels during quiet hours.
	QuietDrop = "drop"
	// QuietDefer keeps intrusive channels but defers them to the end of the window.
	QuietDefer = "defer"
	// QuietIgnore sends regardless of quiet hours.
	QuietIgnore = "ignore"
)

// Severities an event may declare.
const (
	SeverityInfo     = "info"
	SeverityWarning  = "warning"
	SeverityCritical = "critical"
)

// EventSpec is the rule of one event type.
type EventSpec struct {
	// Type is the event type, e.g. RESERVATION_REQUESTED.
	Type string
	// Description is free text for operators.
	Description string
	// Severity is info (default), warning or critical.
	Severity string
	// Shared marks first-to-act notifications.
	Shared bool
	// Audiences say who is reached; a user reached several times is
	// notified once.
	Audiences []AudienceSpec
	// Mandatory channels are always sent (unless unsupported for the user type).
	Mandatory []string
	// Optional channels are sent when the group and the user enable them.
	Optional []string
	// Restrict limits a channel to recipients with one of the roles
	// (channel → roles).
	Restrict map[string][]string
	// QuietHours is drop (default), defer or ignore.
	QuietHours string
	// QuietHoursByChannel overrides QuietHours for single channels.
	QuietHoursByChannel map[string]string
	// Templates are the per-channel message templates.
	Templates map[string]TemplateSpec
	// Escalations make channels wait (channel → escalation): such a
	// channel is sent only when the in-app notification was not read or
	// acted on within the wait.
	Escalations map[string]EscalationSpec
	// Inbox is the in-app inbox row's template (title, body, data).
	Inbox TemplateSpec
	// PayloadSchema is an optional JSON Schema the payload must satisfy.
	PayloadSchema json.RawMessage
	// Posts are the place channels the event is posted to, by channel:
	// one post per event per destination, whoever else it reaches.
	Posts map[string]PostSpec
	// Digest, when set, collects the event's notifications on some
	// channels into one message per recipient, key and window.
	Digest *DigestSpec
	// Throttle, when set, lets at most Limit notifications per Per reach a
	// recipient on each throttled channel.
	Throttle *ThrottleSpec
}

// What a throttle does to what goes over its limit.
const (
	// ThrottleDrop writes it SKIPPED ("throttled: N per W").
	ThrottleDrop = "drop"
	// ThrottleDigest folds it into a digest for the recipient, channel
	// and throttle key that is sent when the throttle's window ends,
	// rendered by the channel's template with .items.
	ThrottleDigest = "digest"
)

// Limits of a throttle.
const (
	MaxThrottleLimit = 10000
	MinThrottlePer   = time.Second
	MaxThrottlePer   = 7 * 24 * time.Hour
)

// ThrottleSpec bounds how many of an event type's notifications reach one
// recipient on a channel per fixed window (per throttle key).
type ThrottleSpec struct {
	// Channels are the channels throttled (empty: every channel of the
	// rule).
	Channels []string
	// Key is a template rendered with .payload and .event; each key has
	// its own count (default: the event type).
	Key string
	// Limit is how many may go out per window.
	Limit int
	// Per is the window's length.
	Per time.Duration
	// Over is what happens to the rest: drop (the default) or digest.
	Over string
}

// Inbox modes of a digest.
const (
	// DigestInboxPerEvent keeps one inbox row per event (the default).
	DigestInboxPerEvent = "per_event"
	// DigestInboxPerDigest keeps one inbox row per recipient and digest
	// window: the collected events write none of their own, and the
	// flush writes one, rendered from the inbox template with .items.
	DigestInboxPerDigest = "per_digest"
)

// Limits of a digest.
const (
	// MinDigestWindow and MaxDigestWindow bound a digest's window.
	MinDigestWindow = time.Second
	MaxDigestWindow = 7 * 24 * time.Hour
	// MaxDigestItems bounds max_items, and is the cap of a window that
	// sets none: a digest never renders more items than this.
	MaxDigestItems = 1000
)

// DigestSpec collects an event's notifications per recipient, channel and
// key over a window, then sends one message rendered from all of them
// (templates see .items, each with .payload and .event).
type DigestSpec struct {
	// Channels are the channels collected (empty: every channel of the
	// rule).
	Channels []string
	// Key is a template rendered with .payload and .event naming what is
	// collected together, e.g. restaurant:{{ .payload.restaurant_id }}
	// (default: the event type).
	Key string
	// Window is how long a window stays open after its first item (0:
	// until Schedule or MaxItems).
	Window time.Duration
	// Schedule, instead of Window, closes a window at the next
	// occurrence of a wall-clock time after its first item, in the
	// recipient's zone ("daily 08:00", "weekly mon 08:00"; see
	// ParseSchedule).
	Schedule string
	// MaxItems closes a window as soon as it holds this many items (0:
	// MaxDigestItems).
	MaxItems int
	// Inbox is per_event (the in-app inbox keeps one row per event) or
	// per_digest (one row per recipient and window, written when the
	// window is flushed).
	Inbox string
}

// PostSpec addresses one place channel of an event.
type PostSpec struct {
	// To is a Go template rendering the key of the directory group whose
	// destination for the channel receives the post
	// ("restaurant:{{ .payload.restaurant_id }}").
	To string
}

// EscalationSpec makes one channel of an event wait: the delivery is
// written WAITING, due After after the relay wrote the in-app
// notification, and sent then unless one of Unless happened first.
type EscalationSpec struct {
	// After is the wait: positive, at most MaxEscalationWait.
	After time.Duration
	// Unless lists what cancels the wait: UnlessRead (the recipient's
	// in-app notification was read) and UnlessActed (someone acted on the
	// shared notification). Empty: read, and acted too when the event is
	// shared.
	Unless []string
	// UnlessSet says Unless was written (an empty list is then an error).
	UnlessSet bool
}

// What cancels an escalation (EscalationSpec.Unless).
const (
	// UnlessRead cancels it when the recipient's in-app notification was
	// read (for a shared one, read by any sharer: one read is a read for
	// all).
	UnlessRead = "read"
	// UnlessActed cancels it when someone acted on the shared
	// (first-to-act) notification.
	UnlessActed = "acted"
)

// MaxEscalationWait bounds an escalation's after: a notification nobody
// read for a week is not an escalation any more.
const MaxEscalationWait = 7 * 24 * time.Hour

// InboxLabel is what an escalation may not name: the in-app inbox row
// is what it waits on.
const InboxLabel = "inbox"

// AudienceSpec is one audience of an event. Exactly one of Group, User,
// UserType and PayloadPath is set. Group and User are Go templates rendered
// with the event (e.g. "restaurant:{{ .payload.restaurant_id }}").
type AudienceSpec struct {
	// Group is a group key template; its members are reached.
	Group string
	// Roles filters group members by role and orders them for
	// max_recipients (first listed = highest priority). Empty = every role.
	Roles []string
	// GroupsPath is a dotted path to a list in the payload whose items
	// name groups (seed 003: one alert for several groups). Each item is
	// a group key, or, with Group set, the value of .item when Group is
	// rendered once per item ("agency:{{ .item }}"). Roles filter as for
	// Group.
	GroupsPath string
	// User is a user id template.
	User string
	// UserType reaches every user of the type.
	UserType string
	// PayloadPath is a dot path in the payload to a list of user ids.
	PayloadPath string
}

// TemplateSpec is the content of a message in the default language plus
// per-locale overrides. Every text field is a Go template; HTML uses
// html/template.
type TemplateSpec struct {
	TemplateText
	// Locales maps a locale ("it", "pt-br") to its variant; fields left
	// empty in a variant fall back to the default text.
	Locales map[string]TemplateText
}

// TemplateText is one language's text of a message.
type TemplateText struct {
	Subject string
	Title   string
	Body    string
	HTML    string
	// Data are extra key/value templates, rendered into a JSON object.
	Data map[string]string
}

// DefaultsSpec holds fallbacks used when a recipient, group or channel says
// nothing.
type DefaultsSpec struct {
	// TimeZone is the IANA zone for recipients without one (default UTC).
	TimeZone string
	// Locale is the locale for recipients without one (default "en").
	Locale string
	// QuietHours is the window for recipients whose user, group and
	// user-type defaults give none (nil = no quiet hours).
	QuietHours *directory.QuietHours
	// Retry is the retry policy for channels that do not set their own.
	Retry channel.RetryPolicy
	// UserTypes are per-user-type defaults.
	UserTypes map[string]UserTypeDefaults
}

// UserTypeDefaults are the defaults for the users of one type.
type UserTypeDefaults struct {
	// Enabled lists the optional channels enabled when neither a group
	// setting nor a user preference says otherwise. Only used when
	// EnabledSet; otherwise every channel is enabled by default.
	Enabled    []string
	EnabledSet bool
	// QuietHours is the window for users of this type without their own.
	QuietHours *directory.QuietHours
}

// Field names of the rules schema, as written in HCL and YAML files. Error
// paths (SpecError.Path) use them.
const (
	KeyChannel             = "channel"
	KeyEvent               = "event"
	KeyDefaults            = "defaults"
	KeyProviders           = "providers"
	KeyPlugin              = "plugin"
	KeyName                = "name"
	KeyPriority            = "priority"
	KeyChecksum            = "checksum"
	KeyConfig              = "config"
	KeyBestEffort          = "best_effort"
	KeyTextFormat          = "text_format"
	KeyIntrusive           = "intrusive"
	KeyUserTypes           = "user_types"
	KeyRetry               = "retry"
	KeyBreaker             = "breaker"
	KeyCooldown            = "cooldown"
	KeyMaxAttempts         = "max_attempts"
	KeyInitial             = "initial"
	KeyMax                 = "max"
	KeyMultiplier          = "multiplier"
	KeyJitter              = "jitter"
	KeyDescription         = "description"
	KeySeverity            = "severity"
	KeyShared              = "shared"
	KeyAudience            = "audience"
	KeyGroup               = "group"
	KeyGroupsPath          = "groups_path"
	KeyRoles               = "roles"
	KeyUser                = "user"
	KeyUserType            = "user_type"
	KeyPayloadPath         = "payload_path"
	KeyMandatory           = "mandatory"
	KeyOptional            = "optional"
	KeyRestrict            = "restrict"
	KeyQuietHours          = "quiet_hours"
	KeyQuietHoursByChannel = "quiet_hours_by_channel"
	KeyTemplate            = "template"
	KeyInbox               = "inbox"
	KeyLocale              = "locale"
	KeySubject             = "subject"
	KeyTitle               = "title"
	KeyBody                = "body"
	KeyHTML                = "html"
	KeyData                = "data"
	KeyPayloadSchema       = "payload_schema"
	KeyPayloadSchemaFile   = "payload_schema_file"
	KeyTimeZone            = "time_zone"
	KeyStart               = "start"
	KeyEnd                 = "end"
	KeyEnabled             = "enabled"
	KeyPlace               = "place"
	KeyPost                = "post"
	KeyTo                  = "to"
	KeyEscalate            = "escalate"
	KeyAfter               = "after"
	KeyUnless              = "unless"
	KeyDigest              = "digest"
	KeyChannels            = "channels"
	KeyKey                 = "key"
	KeyWindow              = "window"
	KeyMaxItems            = "max_items"
	KeySchedule            = "schedule"
	KeyThrottle            = "throttle"
	KeyLimit               = "limit"
	KeyPer                 = "per"
	KeyOver                = "over"
)

// Built-in defaults.
const (
	DefaultTimeZone = "UTC"
	DefaultLocale   = "en"
)
