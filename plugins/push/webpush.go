package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/SherClockHolmes/webpush-go"

	"github.com/heraldhq/herald/plugins/internal/retryafter"
	"github.com/heraldhq/herald/sdk"
)

// Data keys a PUSH template sets to override a provider's defaults for one
// message; the plugin takes them out of the data it forwards.
const (
	OptWebPushTTL     = "webpush_ttl"
	OptWebPushUrgency = "webpush_urgency"
	OptWebPushTopic   = "webpush_topic"
	OptAPNsPushType   = "apns_push_type"
	OptAPNsPriority   = "apns_priority"
	OptAPNsCollapseID = "apns_collapse_id"
	OptAPNsExpiration = "apns_expiration"
	OptAPNsTopic      = "apns_topic"
)

// Permanent codes of the Web Push and APNs providers (besides
// sdk.CodeDeviceGone).
const (
	CodeInvalidOption       = "invalid_option"
	CodePayloadTooLarge     = "payload_too_large"
	CodeInvalidSubscription = "invalid_subscription"
	CodeEndpointRefused     = "endpoint_refused"
)

// errPrivateAddress is why the Web Push client refuses to connect to a
// subscription endpoint: the address is not public.
var errPrivateAddress = errors.New("resolves to a loopback, private, link-local or unspecified address")

// publicOnly is a net.Dialer Control that refuses every address that is
// not a public unicast address.
func publicOnly(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return err
	}
	ip = ip.Unmap()
	if !ip.IsGlobalUnicast() || ip.IsPrivate() || ip.IsLoopback() || ip.IsLinkLocalUnicast() ||
		ip.IsUnspecified() || ip.IsMulticast() || cgnat.Contains(ip) {
		return errPrivateAddress
	}
	return nil
}

// cgnat is the shared address space of RFC 6598, private in practice.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// optionKeys are the data keys that are options, not data.
var optionKeys = []string{OptWebPushTTL, OptWebPushUrgency, OptWebPushTopic, OptAPNsPushType,
	OptAPNsPriority, OptAPNsCollapseID, OptAPNsExpiration, OptAPNsTopic}

// noData reports whether a template's data is absent: empty, or JSON null
// (what an event without data for the channel renders to), so that no
// herald_data key carries a null to the device.
func noData(raw json.RawMessage) bool {
	t := strings.TrimSpace(string(raw))
	return t == "" || t == "null"
}

// splitData returns the content's data object without the option keys,
// and the options as strings (a JSON number's text for numbers). Data that
// is not a JSON object is returned as it is, under DataPayload.
func splitData(raw json.RawMessage) (map[string]json.RawMessage, map[string]string) {
	data, opts := map[string]json.RawMessage{}, map[string]string{}
	if noData(raw) {
		return data, opts
	}
	if err := json.Unmarshal(raw, &data); err != nil || data == nil {
		return map[string]json.RawMessage{DataPayload: raw}, opts
	}
	for _, k := range optionKeys {
		v, ok := data[k]
		if !ok {
			continue
		}
		delete(data, k)
		var s string
		if json.Unmarshal(v, &s) != nil {
			s = string(v)
		}
		opts[k] = s
	}
	return data, opts
}

// heraldFields are the delivery's ids every push payload carries.
func heraldFields(d sdk.Delivery, data map[string]json.RawMessage) {
	put := func(k, v string) {
		if v != "" {
			b, _ := json.Marshal(v)
			data[k] = b
		}
	}
	put(DataIdempotencyKey, idempotencyKey(d))
	put(DataDeliveryID, d.DeliveryID)
	put(DataNotificationID, d.NotificationID)
	put(DataEventType, d.EventType)
	put(DataSeverity, d.Severity)
}

func idempotencyKey(d sdk.Delivery) string {
	if d.IdempotencyKey != "" {
		return d.IdempotencyKey
	}
	return d.DeliveryID
}

// WebPushPayload is the JSON a service worker gets from event.data.json().
type WebPushPayload struct {
	Title string                     `json:"title,omitempty"`
	Body  string                     `json:"body,omitempty"`
	Data  map[string]json.RawMessage `json:"data"`
}

// parseTTL reads a TTL option: whole seconds or a Go duration ("1h").
func parseTTL(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(s); err == nil && n >= 0 {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > MaxWebPushTTL {
		return 0, fmt.Errorf("want whole seconds or a duration between 0s and %s", MaxWebPushTTL)
	}
	return d, nil
}

// topicOf is a Topic header (at most 32 base64url characters) derived from
// the idempotency key: a retried message replaces one the push service
// still holds instead of adding a second.
func topicOf(key string) string {
	sum := sha256.Sum256([]byte(key))
	return base64.RawURLEncoding.EncodeToString(sum[:])[:32]
}

func validTopic(s string) bool {
	return len(s) >= 1 && len(s) <= 32 && strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") == ""
}

// sendWebPush encrypts the message for one subscription (RFC 8291,
// aes128gcm) and posts it to the subscription's endpoint with a VAPID JWT
// (RFC 8292), through webpush-go.
func (s sender) sendWebPush(ctx context.Context, d sdk.Delivery, dev sdk.Device) tokenOutcome {
	cfg := s.cfg
	data, opts := splitData(d.Content.Data)
	heraldFields(d, data)
	title := d.Content.Title
	if title == "" {
		title = d.Content.Subject
	}
	bad := func(key, msg string) tokenOutcome {
		return tokenOutcome{kind: sdk.OutcomePermanent, code: CodeInvalidOption,
			reason: fmt.Sprintf("push: webpush: template data %s=%q: %s", key, opts[key], msg)}
	}
	ttl := cfg.WebPushTTL
	if v, ok := opts[OptWebPushTTL]; ok {
		t, err := parseTTL(v)
		if err != nil {
			return bad(OptWebPushTTL, err.Error())
		}
		ttl = t
	}
	urgency := cfg.WebPushUrgency
	if v, ok := opts[OptWebPushUrgency]; ok {
		if v != "very-low" && v != "low" && v != "normal" && v != "high" {
			return bad(OptWebPushUrgency, "want very-low, low, normal or high")
		}
		urgency = v
	}
	topic := topicOf(idempotencyKey(d))
	if v, ok := opts[OptWebPushTopic]; ok {
		if !validTopic(v) {
			return bad(OptWebPushTopic, "want 1 to 32 characters of the base64url alphabet (A-Z a-z 0-9 - _)")
		}
		topic = v
	}
	payload, err := json.Marshal(WebPushPayload{Title: title, Body: d.Content.Body, Data: data})
	if err != nil {
		return tokenOutcome{kind: sdk.OutcomePermanent, code: "encode", reason: "push: webpush: encode payload: " + err.Error()}
	}
	endpoint := dev.Endpoint
	if endpoint == "" {
		endpoint = dev.Token
	}
	sub := &webpush.Subscription{Endpoint: endpoint, Keys: webpush.Keys{Auth: dev.Auth, P256dh: dev.P256dh}}
	resp, err := webpush.SendNotificationWithContext(ctx, payload, sub, &webpush.Options{
		HTTPClient: s.whc,
		// webpush-go adds "mailto:" to a subject that is not https:.
		Subscriber:      strings.TrimPrefix(cfg.VAPIDSubject, "mailto:"),
		TTL:             int(ttl / time.Second),
		Urgency:         webpush.Urgency(urgency),
		Topic:           topic,
		VAPIDPublicKey:  cfg.VAPIDPublicKey,
		VAPIDPrivateKey: cfg.VAPIDPrivateKey,
	})
	if err != nil {
		switch {
		case errors.Is(err, errPrivateAddress):
			return tokenOutcome{kind: sdk.OutcomePermanent, code: CodeEndpointRefused,
				reason: fmt.Sprintf("push: webpush: endpoint %s: %v (set webpush_private_endpoints to allow it)", endpoint, errPrivateAddress)}
		case errors.Is(err, webpush.ErrMaxPadExceeded):
			return tokenOutcome{kind: sdk.OutcomePermanent, code: CodePayloadTooLarge,
				reason: fmt.Sprintf("push: webpush: payload of %d bytes does not fit one 4096-byte record", len(payload))}
		case ctx.Err() == nil && !isTransport(err):
			// The subscription's keys or endpoint are unusable: retrying
			// cannot help.
			return tokenOutcome{kind: sdk.OutcomePermanent, code: CodeInvalidSubscription, reason: "push: webpush: " + err.Error()}
		}
		return tokenOutcome{kind: sdk.OutcomeRetryable, reason: "push: webpush: post: " + err.Error()}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	reason := fmt.Sprintf("push: webpush %s: %s", resp.Status, strings.TrimSpace(string(raw)))
	code := fmt.Sprintf("http_%d", resp.StatusCode)
	switch {
	case resp.StatusCode/100 == 2:
		id := resp.Header.Get("Location")
		if id == "" {
			id = endpoint
		}
		return tokenOutcome{kind: sdk.OutcomeSent, name: id}
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return tokenOutcome{kind: sdk.OutcomePermanent, gone: true, code: sdk.CodeDeviceGone,
			reason: fmt.Sprintf("push: webpush %s: subscription gone (expired or unsubscribed)", resp.Status)}
	case resp.StatusCode == http.StatusTooManyRequests:
		return tokenOutcome{kind: sdk.OutcomeRateLimited, code: code, reason: reason, retryAfter: retryafter.From(resp.Header, DefaultRateLimitWait)}
	case resp.StatusCode >= 500:
		return tokenOutcome{kind: sdk.OutcomeRetryable, code: code, reason: reason, retryAfter: retryafter.From(resp.Header, 0)}
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		// The push service refused our VAPID credentials: every message
		// fails until the operator fixes them, so the deliveries wait.
		return tokenOutcome{kind: sdk.OutcomeRetryable, code: code, reason: reason}
	case resp.StatusCode == http.StatusRequestEntityTooLarge:
		return tokenOutcome{kind: sdk.OutcomePermanent, code: CodePayloadTooLarge, reason: reason}
	}
	return tokenOutcome{kind: sdk.OutcomePermanent, code: code, reason: reason}
}

// isTransport reports an error from the HTTP round trip (a *url.Error
// from the client), as opposed to one webpush-go returns before sending:
// keys that do not decode, an endpoint URL that does not parse.
func isTransport(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue) && ue.Op != "parse"
}
