package sdk

import (
	"encoding/json"
	"slices"
	"time"
)

// Class says whether a channel's deliveries are retried. The zero Class is
// Persistent, the safe reading (a delivery that should have been best
// effort is retried, never lost).
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

// Field types a plugin may declare. CheckConfig turns values into string,
// int, bool, time.Duration, []string and map[string]string respectively; ConfigFields derives
// them from the Go types of a config struct's fields.
const (
	// FieldString is a string (Go type string).
	FieldString FieldType = "string"
	// FieldInt is an integer (Go type int).
	FieldInt FieldType = "int"
	// FieldBool is true or false (Go type bool).
	FieldBool FieldType = "bool"
	// FieldDuration is a duration such as "5s" (Go type time.Duration).
	FieldDuration FieldType = "duration"
	// FieldList is a list of strings (Go type []string).
	FieldList FieldType = "list"
	// FieldMap is a map of names to strings (Go type map[string]string),
	// such as named webhook URLs. A map field has no default. Hosts older
	// than this type refuse a plugin that declares one.
	FieldMap FieldType = "map"
)

// FieldSpec declares one config field of a plugin. Plugins usually derive
// their field specs from a tagged struct with ConfigFields rather than
// writing them by hand.
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
	// Default is the value used when the key is absent ("" for none), in
	// the field's syntax: "587", "true", "10s", "a,b" for a list.
	Default string
	// Enum, when not empty, lists the allowed values.
	Enum []string
	// Description is shown by `herald plugins ls -v` and in docs.
	Description string
}

// AnyChannel is the Description.ChannelType of a plugin that may serve any
// channel (the test sink); the host accepts it for every channel.
const AnyChannel = "*"

// Description is the static description of a plugin, returned by Describe.
type Description struct {
	// ChannelType is the channel this plugin provides, e.g. "EMAIL". The
	// value AnyChannel ("*") means the plugin may serve any channel.
	ChannelType string
	// Provider names the provider implementation, e.g. "smtp".
	Provider string
	// PluginVersion is the plugin's own semantic version.
	PluginVersion string
	// APIVersions lists the protocol versions the plugin speaks. The SDK
	// fills it in with the versions Serve serves; plugins leave it empty.
	APIVersions []int
	// UserTypes lists the recipient user types the channel supports
	// (empty means every type).
	UserTypes []string
	// Class is BestEffort or Persistent.
	Class Class
	// MaxBatch is the largest batch Send accepts (0 means 1).
	MaxBatch int
	// Config declares the plugin's config fields, usually
	// ConfigFields(Config{}) of the plugin's config struct.
	Config []FieldSpec
	// Capabilities lists optional features the plugin supports. The host
	// records them and shows them (herald plugins ls, the admin API's
	// plugin status); it acts on none yet, so a plugin must work without
	// any of them being used.
	Capabilities []string
	// SDKVersion is the version of the SDK the plugin was built with. The
	// SDK fills it in; plugins leave it empty.
	SDKVersion string
}

// Recipient is who a delivery goes to, with the addresses a channel needs.
type Recipient struct {
	// UserID identifies the user within the tenant.
	UserID string
	// UserType is the user's type, e.g. "customer".
	UserType string
	// Email is the user's email address.
	Email string
	// Phone is the user's phone number (E.164).
	Phone string
	// Locale is the user's locale, e.g. "it-IT".
	Locale string
	// TimeZone is the user's IANA time zone.
	TimeZone string
	// DeviceTokens are push tokens registered for the user: the Token of
	// every device in Devices that is not a web push subscription. It is
	// kept for plugins written before Devices; new plugins read Devices.
	DeviceTokens []string
	// Attributes holds further channel addresses (e.g. "slack_user_id").
	Attributes map[string]string
	// Devices are the user's push devices with their kind (and, for web
	// push, the subscription's keys).
	Devices []Device
}

// Attributes the host sets on the Recipient of a post to a place (a place
// channel's one delivery per event per destination, such as a restaurant's
// Slack channel): the place's key (the directory group's, such as
// "restaurant:42") and the destination the group holds for the channel
// (what the plugin posts to: a webhook's name in its config, a channel
// id). A person's Recipient never carries them: the host drops directory
// attributes that start with "herald.".
const (
	AttrPlace       = "herald.place"
	AttrDestination = "herald.destination"
)

// Place reports whether the delivery goes to a place rather than a person
// and, if so, the place's key and the destination to post to. A place has
// no user type, addresses, devices or preferences; its UserID is the
// place's key and its Locale and TimeZone are the rules' defaults.
func (r Recipient) Place() (key, destination string, ok bool) {
	key, ok = r.Attributes[AttrPlace]
	if !ok {
		return "", "", false
	}
	return key, r.Attributes[AttrDestination], true
}

// Device kinds, the push services a Device belongs to.
const (
	// DeviceFCM is a Firebase Cloud Messaging registration token.
	DeviceFCM = "fcm"
	// DeviceAPNs is an Apple Push Notification service device token (hex).
	DeviceAPNs = "apns"
	// DeviceWebPush is a browser's web push subscription (RFC 8030/8291).
	DeviceWebPush = "webpush"
)

// Device is one push device of a recipient.
type Device struct {
	// Kind is DeviceFCM, DeviceAPNs, DeviceWebPush, or "" for a token of
	// no declared kind (the FCM provider sends to those).
	Kind string
	// Token is the device's address: the push token, or for DeviceWebPush
	// the subscription's endpoint URL. Result.GoneDevices names devices by
	// their Token.
	Token string
	// Endpoint is a web push subscription's endpoint URL (https).
	Endpoint string
	// P256dh is a web push subscription's public key: base64url of an
	// uncompressed P-256 point (65 bytes).
	P256dh string
	// Auth is a web push subscription's authentication secret: base64url
	// of 16 bytes.
	Auth string
}

// DevicesOf returns the recipient's devices of the given kinds (every
// device when kinds is empty). A recipient from a host that sends only
// DeviceTokens yields those tokens as devices of kind "".
func (r Recipient) DevicesOf(kinds ...string) []Device {
	devs := r.Devices
	if len(devs) == 0 {
		for _, t := range r.DeviceTokens {
			devs = append(devs, Device{Token: t})
		}
	}
	var out []Device
	for _, d := range devs {
		if len(kinds) == 0 || slices.Contains(kinds, d.Kind) {
			out = append(out, d)
		}
	}
	return out
}

// Content is the rendered message for one channel.
type Content struct {
	// Subject is the message subject (email).
	Subject string
	// Title is the message title (push, inbox).
	Title string
	// Body is the plain-text body.
	Body string
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
	// TenantID is the tenant the delivery belongs to.
	TenantID string
	// EventID is the producer's event id.
	EventID string
	// EventType is the event's type, e.g. "RESERVATION_REQUESTED".
	EventType string
	// NotificationID is the inbox notification the delivery belongs to.
	NotificationID string
	// Channel is the channel name, e.g. "EMAIL".
	Channel string
	// Severity is the event's severity.
	Severity string
	// Attempt is 1 on the first try.
	Attempt int
	// Recipient is who the delivery goes to.
	Recipient Recipient
	// Content is the rendered message.
	Content Content
	// CreatedAt is when the delivery was created.
	CreatedAt time.Time
	// TraceParent and TraceState are the W3C trace context of the host's
	// span for this delivery ("" when it carries no trace). Send's ctx
	// holds the trace of the batch's first delivery; DeliveryContext
	// gives a ctx in this delivery's own trace (SendEach passes it).
	TraceParent, TraceState string
}

// Outcome is the kind of a Result. Its zero value, OutcomeUnspecified,
// breaks the contract: build results with Sent, Retry, RateLimited,
// Permanent or ErrorResult, which always set one.
type Outcome int

// Outcome kinds.
const (
	// OutcomeUnspecified is an outcome nobody set. The host treats it as
	// retryable and logs a contract violation; plugintest flags it.
	OutcomeUnspecified Outcome = iota
	// OutcomeSent means the provider accepted the delivery.
	OutcomeSent
	// OutcomeRetryable means a transient failure: the delivery is retried.
	OutcomeRetryable
	// OutcomeRateLimited means the provider throttled us: the delivery is
	// retried and the host slows the whole provider.
	OutcomeRateLimited
	// OutcomePermanent means retrying cannot help: the delivery is FAILED.
	OutcomePermanent
	// OutcomeSkipped means the plugin did not send by design, and that is
	// not a failure: a live delivery to a user with no open session
	// ("offline"). The delivery is SKIPPED, never retried, and counted
	// apart from failures. A host that does not list
	// HostCapabilitySkipped receives it as Permanent.
	OutcomeSkipped
)

// HostCapabilitySkipped is the host capability (ConfigureRequest.
// HostCapabilities) of a host that records OutcomeSkipped as SKIPPED. The
// SDK sends a skipped result to a host without it as Permanent, with the
// reason as its code, as older hosts expect.
const HostCapabilitySkipped = "outcome_skipped"

// String returns the outcome's name: "unspecified", "sent", "retryable",
// "rate_limited", "permanent" or "skipped".
func (o Outcome) String() string {
	switch o {
	case OutcomeUnspecified:
		return "unspecified"
	case OutcomeSent:
		return "sent"
	case OutcomeRetryable:
		return "retryable"
	case OutcomeRateLimited:
		return "rate_limited"
	case OutcomePermanent:
		return "permanent"
	case OutcomeSkipped:
		return "skipped"
	}
	return "unknown"
}

// Result is the outcome of one delivery.
type Result struct {
	// DeliveryID is the delivery this result is for.
	DeliveryID string
	// Outcome is the result's kind; never leave it unspecified.
	Outcome Outcome
	// ProviderMessageID is the provider's id when Outcome is OutcomeSent.
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
	// GoneDevices lists the Tokens of the recipient's devices that the
	// provider says no longer exist (web push 404/410, APNs 410
	// Unregistered, FCM UNREGISTERED). The host removes them from the
	// directory, so no later delivery tries them again, whatever the
	// Outcome. A delivery whose every device is gone is Permanent with
	// CodeDeviceGone (see Gone).
	GoneDevices []string
}

// CodeDeviceGone is the Permanent code of a delivery whose devices the
// provider said no longer exist.
const CodeDeviceGone = "device_gone"

// Gone reports a delivery that failed because the provider said the given
// devices (their Tokens) no longer exist: Permanent with CodeDeviceGone,
// and GoneDevices so the host removes them from the directory.
func Gone(deliveryID, reason string, tokens ...string) Result {
	r := Permanent(deliveryID, reason, CodeDeviceGone)
	r.GoneDevices = tokens
	return r
}

// Sent reports a delivery accepted by the provider.
func Sent(deliveryID, providerMessageID string) Result {
	return Result{DeliveryID: deliveryID, Outcome: OutcomeSent, ProviderMessageID: providerMessageID}
}

// Retry reports a transient failure; retryAfter may be zero.
func Retry(deliveryID string, reason string, retryAfter time.Duration) Result {
	return Result{DeliveryID: deliveryID, Outcome: OutcomeRetryable, Reason: reason, RetryAfter: retryAfter}
}

// RateLimited reports that the provider throttled us; the host slows the
// whole provider for retryAfter.
func RateLimited(deliveryID string, reason string, retryAfter time.Duration) Result {
	return Result{DeliveryID: deliveryID, Outcome: OutcomeRateLimited, Reason: reason, RetryAfter: retryAfter}
}

// Skipped reports a delivery the plugin did not send by design, which is
// not a failure (a live channel's user with no open session: reason
// "offline"). reason is short: the host records it as the delivery's
// last_error. Use it only when nothing was sent and nothing went wrong;
// a provider's refusal is Permanent.
func Skipped(deliveryID, reason string) Result {
	return Result{DeliveryID: deliveryID, Outcome: OutcomeSkipped, Reason: reason}
}

// Permanent reports a failure that retrying cannot fix; code is the
// provider's error code, if any.
func Permanent(deliveryID, reason, code string) Result {
	return Result{DeliveryID: deliveryID, Outcome: OutcomePermanent, Reason: reason, Code: code}
}
