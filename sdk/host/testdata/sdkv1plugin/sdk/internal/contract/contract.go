// Package contract holds the definitions behind the public types of package
// sdk. They live here, and sdk re-exports them as aliases, so that
// sdk/internal/wire can convert them without an import cycle (sdk imports
// wire for its gRPC server and client). Plugin authors and the core use the
// sdk names; nothing outside sdk imports this package.
package contract

import (
	"encoding/json"
	"time"
)

// Class says whether a channel's deliveries are retried.
type Class int

const (
	// Persistent deliveries are retried until SENT or attempts run out.
	Persistent Class = iota
	// BestEffort deliveries are tried once and never retried.
	BestEffort
)

// String returns "persistent" or "best_effort".
func (c Class) String() string {
	if c == BestEffort {
		return "best_effort"
	}
	return "persistent"
}

// FieldType is the type of one config field a plugin declares.
type FieldType string

// Field types a plugin may declare.
const (
	FieldString   FieldType = "string"
	FieldInt      FieldType = "int"
	FieldBool     FieldType = "bool"
	FieldDuration FieldType = "duration"
	FieldList     FieldType = "list"
)

// FieldSpec declares one config field of a plugin.
type FieldSpec struct {
	// Name is the config key.
	Name string
	// Type is the value's type.
	Type FieldType
	// Required fields must be present.
	Required bool
	// Secret marks a credential. The host never prints or logs its value:
	// CheckConfig's errors do not repeat it, `herald plugins ls` and the
	// admin API show no config, and the daemon replaces the value (8 bytes
	// or longer) with "[redacted]" in every log line and error it passes
	// on, including the plugin's own re-emitted logs. Operators usually
	// give it as env:NAME or file:PATH rather than in the rules file.
	Secret bool
	// Default is the value used when the key is absent ("" for none).
	Default string
	// Enum, when not empty, lists the allowed values.
	Enum []string
	// Description is shown by `herald plugins ls -v` and in docs.
	Description string
}

// Description is the static description of a plugin.
type Description struct {
	// ChannelType is the channel this plugin provides, e.g. "EMAIL". The
	// value "*" (AnyChannel) means the plugin may serve any channel.
	ChannelType string
	// Provider names the provider implementation, e.g. "smtp".
	Provider string
	// PluginVersion is the plugin's own semver.
	PluginVersion string
	// APIVersions lists the protocol versions the plugin speaks.
	APIVersions []int
	// UserTypes lists the recipient user types the channel supports
	// (empty means every type).
	UserTypes []string
	// Class is BestEffort or Persistent.
	Class Class
	// MaxBatch is the largest batch Send accepts (0 means 1).
	MaxBatch int
	// Config declares the plugin's config fields.
	Config []FieldSpec
	// Capabilities lists optional features the plugin supports.
	Capabilities []string
	// SDKVersion is the version of the SDK the plugin was built with. The
	// SDK fills it in; plugins leave it empty.
	SDKVersion string
}

// ConfigureRequest carries the operator's config for one provider.
type ConfigureRequest struct {
	// ProviderName is the name the operator gave this provider instance.
	ProviderName string
	// Config is the provider config, already checked against the FieldSpecs.
	Config map[string]any
	// HostCapabilities lists optional features the host supports.
	HostCapabilities []string
}

// Recipient is who a delivery goes to, with the addresses a channel needs.
type Recipient struct {
	UserID   string
	UserType string
	Email    string
	Phone    string
	Locale   string
	TimeZone string
	// DeviceTokens are push tokens registered for the user.
	DeviceTokens []string
	// Attributes holds further channel addresses (e.g. "slack_user_id").
	Attributes map[string]string
}

// Content is the rendered message for one channel.
type Content struct {
	Subject string
	Title   string
	Body    string
	// HTML is the HTML body, when the channel's template has one.
	HTML string
	// Data is structured data for channels that carry it (push, websocket).
	Data json.RawMessage
}

// Delivery is one message for one recipient on one channel.
type Delivery struct {
	// DeliveryID identifies the delivery; results are keyed by it.
	DeliveryID string
	// IdempotencyKey is stable across retries; pass it to providers that
	// support one.
	IdempotencyKey string
	TenantID       string
	EventID        string
	EventType      string
	NotificationID string
	Channel        string
	Severity       string
	// Attempt is 1 on the first try.
	Attempt   int
	Recipient Recipient
	Content   Content
	CreatedAt time.Time
}

// Outcome is the kind of a Result.
type Outcome int

// Outcome kinds.
const (
	OutcomeSent Outcome = iota
	OutcomeRetryable
	OutcomeRateLimited
	OutcomePermanent
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case OutcomeSent:
		return "sent"
	case OutcomeRetryable:
		return "retryable"
	case OutcomeRateLimited:
		return "rate_limited"
	case OutcomePermanent:
		return "permanent"
	}
	return "unknown"
}

// Result is the outcome of one delivery.
type Result struct {
	DeliveryID string
	Outcome    Outcome
	// ProviderMessageID is set when Outcome is OutcomeSent.
	ProviderMessageID string
	// RetryAfter is the provider's hint for Retryable and RateLimited.
	RetryAfter time.Duration
	// Reason explains a non-sent outcome.
	Reason string
	// Code is a provider error code for Permanent outcomes.
	Code string
	// Unclassified is set when the result was made from a Go error that
	// carried no classification; it then counts as Retryable, the SDK logs
	// it as "unclassified" and plugintest flags it.
	Unclassified bool
}

// HealthReport is a plugin's view of its provider.
type HealthReport struct {
	Healthy bool
	Message string
}
