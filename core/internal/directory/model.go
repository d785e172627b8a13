package directory

import (
	"crypto/ecdh"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Directory is a snapshot of the directory data a decision needs. Its JSON
// (or YAML, or JSONL) form is the file `herald directory import` and
// `herald rules explain --directory` read, parsed strictly by Parse, whose
// JSON Schema (`herald directory schema`) is derived from these
// definitions: the json tag names a field, a
// `dir:"required"` tag makes it required, and `doc` describes it. The
// daemon fills it from the database for the keys Needs returns.
type Directory struct {
	Recipients  []Recipient    `json:"recipients" doc:"users who can receive notifications"`
	Groups      []Group        `json:"groups" doc:"groups of users, such as one restaurant's staff"`
	Members     []Member       `json:"members" doc:"memberships: a user in a group with a role"`
	Preferences []Preference   `json:"preferences" doc:"users' channel switches"`
	Settings    []GroupSetting `json:"settings" doc:"groups' channel switches"`
}

// Recipient is one user who can receive notifications.
type Recipient struct {
	UserID   string `json:"user_id" dir:"required,id" doc:"the user's id, unique in the directory"`
	UserType string `json:"user_type" dir:"required,name" doc:"the user's type, such as STAFF or CUSTOMER"`
	Email    string `json:"email,omitempty" dir:"email" doc:"e-mail address, such as maria@example.com"`
	Phone    string `json:"phone,omitempty" dir:"e164" doc:"phone number in E.164 form, such as +390600000001"`
	Locale   string `json:"locale,omitempty" dir:"name" doc:"language tag for templates, such as it or en-GB"`
	// TimeZone is an IANA zone name; empty means the defaults' zone.
	TimeZone string `json:"time_zone,omitempty" dir:"zone" doc:"IANA time zone such as Europe/Rome; empty: the rules' default zone"`
	Active   bool   `json:"active" doc:"inactive users are never notified (default true)" default:"true"`
	// QuietHours is the user's own window; nil falls back to group and
	// configured defaults.
	QuietHours   *QuietHours       `json:"quiet_hours,omitempty" doc:"the user's own quiet hours, in their time zone"`
	DeviceTokens []string          `json:"device_tokens,omitempty" dir:"nonempty" doc:"push device tokens of no declared kind (the FCM provider sends to them); prefer devices"`
	Attributes   map[string]string `json:"attributes,omitempty" doc:"free-form attributes templates and plugins read, such as slack_user_id"`
	// Devices are push devices with their kind; a web push subscription
	// carries its keys.
	Devices []Device `json:"devices,omitempty" doc:"push devices with their kind: FCM and APNs tokens, web push subscriptions"`
}

// Device kinds a directory accepts.
const (
	DeviceFCM     = "fcm"
	DeviceAPNs    = "apns"
	DeviceWebPush = "webpush"
)

// Device is one push device of a recipient. FCM and APNs devices have a
// token; a web push subscription has an endpoint and the browser's keys,
// as PushSubscription.toJSON() gives them.
type Device struct {
	Kind     string `json:"kind" dir:"required,name" doc:"the push service: fcm, apns or webpush"`
	Token    string `json:"token,omitempty" doc:"fcm: the registration token; apns: the device token (hex); not for webpush"`
	Endpoint string `json:"endpoint,omitempty" doc:"webpush: the subscription's endpoint, an https URL"`
	P256dh   string `json:"p256dh,omitempty" doc:"webpush: the subscription's keys.p256dh, base64url of an uncompressed P-256 point (65 bytes)"`
	Auth     string `json:"auth,omitempty" doc:"webpush: the subscription's keys.auth, base64url of 16 bytes"`
}

// Address is the device's key in the directory and in a plugin's
// Result.GoneDevices: the token, or a web push subscription's endpoint.
func (d Device) Address() string {
	if d.Kind == DeviceWebPush {
		return d.Endpoint
	}
	return d.Token
}

// DeviceProblem is one problem of a device entry: the field and what is
// wrong with it.
type DeviceProblem struct {
	Field, Msg string
}

// Bounds of device values.
const (
	maxDeviceToken    = 4096
	maxDeviceEndpoint = 2048
)

// CheckDevice returns every problem of a device entry: an unknown kind, a
// token missing or malformed for its kind (APNs tokens are hex), a web
// push endpoint that is not https, p256dh that is not base64url of an
// uncompressed P-256 point, auth that is not base64url of 16 bytes.
func CheckDevice(d Device) []DeviceProblem {
	var probs []DeviceProblem
	bad := func(field, format string, args ...any) {
		probs = append(probs, DeviceProblem{field, fmt.Sprintf(format, args...)})
	}
	notFor := func(field, value string) {
		if value != "" {
			bad(field, "not used by kind %s", d.Kind)
		}
	}
	switch d.Kind {
	case DeviceFCM, DeviceAPNs:
		switch {
		case d.Token == "":
			bad("token", "missing (required for kind %s)", d.Kind)
		case len(d.Token) > maxDeviceToken || strings.IndexFunc(d.Token, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
			bad("token", "want 1-%d bytes without spaces or control characters", maxDeviceToken)
		case d.Kind == DeviceAPNs && !isHex(d.Token):
			bad("token", "want the APNs device token in hex (64 or more hex digits), got %d characters that are not all hex", len(d.Token))
		case d.Kind == DeviceAPNs && len(d.Token) < 64:
			bad("token", "want the APNs device token in hex (64 or more hex digits), got %d", len(d.Token))
		}
		notFor("endpoint", d.Endpoint)
		notFor("p256dh", d.P256dh)
		notFor("auth", d.Auth)
	case DeviceWebPush:
		if d.Token != "" {
			bad("token", "not used by kind webpush (the subscription's endpoint is its address)")
		}
		if msg := checkEndpoint(d.Endpoint); msg != "" {
			bad("endpoint", "%s", msg)
		}
		if d.P256dh == "" {
			bad("p256dh", "missing (required for kind webpush: the subscription's keys.p256dh)")
		} else if b, err := decodeB64URL(d.P256dh); err != nil || len(b) != 65 || b[0] != 4 {
			bad("p256dh", "want base64url of an uncompressed P-256 public key (65 bytes starting 0x04)")
		} else if _, err := ecdh.P256().NewPublicKey(b); err != nil {
			bad("p256dh", "not a point on the P-256 curve")
		}
		if d.Auth == "" {
			bad("auth", "missing (required for kind webpush: the subscription's keys.auth)")
		} else if b, err := decodeB64URL(d.Auth); err != nil || len(b) != 16 {
			bad("auth", "want base64url of 16 bytes")
		}
	default:
		bad("kind", "%q: want fcm, apns or webpush", clipValue(d.Kind))
	}
	return probs
}

func checkEndpoint(s string) string {
	if s == "" {
		return "missing (required for kind webpush: the subscription's endpoint)"
	}
	if len(s) > maxDeviceEndpoint {
		return fmt.Sprintf("longer than %d bytes", maxDeviceEndpoint)
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "" ||
		strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return fmt.Sprintf("%q: want an https URL such as https://fcm.googleapis.com/fcm/send/...", clipValue(s))
	}
	return ""
}

// decodeB64URL decodes base64url with or without padding (browsers send
// it without; some libraries add it).
func decodeB64URL(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func clipValue(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
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
	Start string `json:"start" dir:"required,clock" doc:"start of the window, HH:MM"`
	End   string `json:"end" dir:"required,clock" doc:"end of the window, HH:MM; before start means overnight"`
}

// Group is a set of users such as one restaurant's staff. Key is
// "<type>:<id>", e.g. "restaurant:5".
type Group struct {
	Key  string `json:"key" dir:"required,id" doc:"the group's key, <type>:<id> such as restaurant:5, unique in the directory"`
	Type string `json:"type" dir:"required,name" doc:"the group's type, such as restaurant"`
	// MaxRecipients caps how many members one event reaches (0 = no cap).
	MaxRecipients int         `json:"max_recipients,omitempty" doc:"how many members one event reaches at most (0: no cap)"`
	QuietHours    *QuietHours `json:"quiet_hours,omitempty" doc:"the group's quiet hours, for members without their own"`
	// Destinations are the group's places by channel: the address a place
	// channel's plugin posts to (a Slack webhook's name in the channel's
	// config, a Slack channel id, a Teams room), for the rules' post
	// blocks that name the group. Secrets such as webhook URLs belong in
	// the channel's config (env:NAME), named here.
	Destinations map[string]string `json:"destinations,omitempty" dir:"destinations" doc:"the group's places by channel: channel name to the address its plugin posts to (a webhook's name, a Slack channel id), for rules' post blocks"`
}

// Member places a user in a group with a role.
type Member struct {
	Group  string `json:"group" dir:"required,id,ref=groups" doc:"key of a group declared in groups"`
	UserID string `json:"user_id" dir:"required,id,ref=recipients" doc:"id of a user declared in recipients"`
	Role   string `json:"role" dir:"name" doc:"the user's role in the group, such as MANAGER"`
}

// Preference is a user's switch for one channel, for every event type
// (EventType "") or for one event type (which wins).
type Preference struct {
	UserID    string `json:"user_id" dir:"required,id,ref=recipients" doc:"id of a user declared in recipients"`
	EventType string `json:"event_type,omitempty" dir:"name" doc:"the event type the switch is for; empty: every event type"`
	Channel   string `json:"channel" dir:"required,name" doc:"channel name, such as SMS"`
	Enabled   bool   `json:"enabled" dir:"required" doc:"whether the user wants the channel"`
}

// GroupSetting is a group's switch for one channel, for every event type
// (EventType "") or for one event type (which wins). With Roles, an
// enabled setting holds only for members reached with one of those roles
// (seed 001: SMS on for the restaurant's managers only); for the other
// members it reads as disabled.
type GroupSetting struct {
	Group     string   `json:"group" dir:"required,id,ref=groups" doc:"key of a group declared in groups"`
	EventType string   `json:"event_type,omitempty" dir:"name" doc:"the event type the switch is for; empty: every event type"`
	Channel   string   `json:"channel" dir:"required,name" doc:"channel name, such as SMS"`
	Enabled   bool     `json:"enabled" dir:"required" doc:"whether the group enables the channel"`
	Roles     []string `json:"roles,omitempty" dir:"nonempty" doc:"with enabled: the setting holds only for members reached with one of these roles, such as MANAGER"`
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

// Union returns what n and o need together, each list sorted without
// repeats: one directory snapshot serves the decisions of both.
func (n Needs) Union(o Needs) Needs {
	return Needs{
		GroupKeys: sortedUnique(append(slices.Clone(n.GroupKeys), o.GroupKeys...)),
		UserIDs:   sortedUnique(append(slices.Clone(n.UserIDs), o.UserIDs...)),
		UserTypes: sortedUnique(append(slices.Clone(n.UserTypes), o.UserTypes...)),
	}
}

func sortedUnique(s []string) []string {
	sort.Strings(s)
	return slices.Compact(s)
}

// QuietHoursError is a problem of one end of a quiet-hours window: Field
// is "start" or "end".
type QuietHoursError struct {
	Field string
	Msg   string
}

func (e *QuietHoursError) Error() string { return e.Field + ": " + e.Msg }

// Minutes checks a quiet-hours window (both ends "HH:MM", and different)
// and returns its ends as minutes after local midnight. Its error is a
// *QuietHoursError.
func (qh QuietHours) Minutes() (start, end int, err error) {
	start, err = parseClock(qh.Start)
	if err != nil {
		return 0, 0, &QuietHoursError{Field: "start", Msg: err.Error()}
	}
	end, err = parseClock(qh.End)
	if err != nil {
		return 0, 0, &QuietHoursError{Field: "end", Msg: err.Error()}
	}
	if start == end {
		return 0, 0, &QuietHoursError{Field: "end", Msg: fmt.Sprintf("equals start (%s): the window would be empty", qh.Start)}
	}
	return start, end, nil
}

// parseClock parses "HH:MM" (00:00 to 23:59) into minutes after midnight.
func parseClock(s string) (int, error) {
	hh, mm, ok := strings.Cut(s, ":")
	if !ok || len(hh) != 2 || len(mm) != 2 {
		return 0, fmt.Errorf("bad time %q: want HH:MM", s)
	}
	h, err1 := strconv.Atoi(hh)
	m, err2 := strconv.Atoi(mm)
	if err1 != nil || err2 != nil || h < 0 || h > 23 || m < 0 || m > 59 {
		return 0, fmt.Errorf("bad time %q: want HH:MM between 00:00 and 23:59", s)
	}
	return h*60 + m, nil
}

// UserPreferences is one user's own settings as the API reads and writes
// them in one document: the recipient's locale, time zone and quiet hours,
// and their channel switches (Preference without the user, whom the URL
// names). A write replaces the whole document.
type UserPreferences struct {
	Locale   string `json:"locale,omitempty" dir:"name" doc:"language tag for templates, such as it or en-GB"`
	TimeZone string `json:"time_zone,omitempty" dir:"zone" doc:"IANA time zone such as Europe/Rome; empty: the rules' default zone"`
	// QuietHours nil: none of the user's own.
	QuietHours *QuietHours `json:"quiet_hours,omitempty" doc:"the user's own quiet hours, in their time zone"`
	// Channels are the switches, each (event type, channel) once.
	Channels []ChannelPreference `json:"channels,omitempty" doc:"the user's channel switches, per channel and per event type"`
}

// ChannelPreference is one switch of UserPreferences: a channel, for every
// event type (EventType "") or for one event type (which wins).
type ChannelPreference struct {
	EventType string `json:"event_type,omitempty" dir:"name" doc:"the event type the switch is for; empty: every event type"`
	Channel   string `json:"channel" dir:"required,name" doc:"channel name, such as SMS"`
	Enabled   bool   `json:"enabled" dir:"required" doc:"whether the user wants the channel"`
}

// GroupSettings is one group's channel switches as the API reads and
// writes them in one document (GroupSetting without the group, whom the
// URL names). A write replaces the whole document.
type GroupSettings struct {
	// Channels are the switches, each (event type, channel) once.
	Channels []GroupChannelSetting `json:"channels,omitempty" doc:"the group's channel switches, per channel and per event type"`
}

// GroupChannelSetting is one switch of GroupSettings.
type GroupChannelSetting struct {
	EventType string   `json:"event_type,omitempty" dir:"name" doc:"the event type the switch is for; empty: every event type"`
	Channel   string   `json:"channel" dir:"required,name" doc:"channel name, such as SMS"`
	Enabled   bool     `json:"enabled" dir:"required" doc:"whether the group enables the channel"`
	Roles     []string `json:"roles,omitempty" dir:"nonempty" doc:"with enabled: the setting holds only for members reached with one of these roles, such as MANAGER"`
}
