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
var errPrivateAddress = errors.New("resolves to an address that is not public (loopback, private, link-local, shared, " +
	"documentation, benchmarking, NAT64, multicast, reserved or another special-purpose range)")

// unreachable is the reason a delivery carries when its subscription
// endpoint could not be reached. The transport's own text (connection
// refused, no route, TLS, timeout) goes to the plugin's log only: handed
// to the tenant it would tell which hosts and ports answer (a port-scan
// oracle through subscriptions).
const unreachable = "push: webpush: endpoint unreachable"

// publicOnly is a net.Dialer Control that refuses every address that is
// not a public unicast address (see publicAddr). It runs on the address
// dialled, after DNS, before the connection is made.
func publicOnly(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return err
	}
	if !publicAddr(ip) {
		return errPrivateAddress
	}
	return nil
}

// publicAddr reports whether ip may be dialled for a subscription: an
// IPv4 address outside every special-purpose range, or an IPv6 address in
// the global unicast space 2000::/3 outside every special-purpose range
// (IANA's IPv4 and IPv6 Special-Purpose Address Registries, refused whole,
// the few "globally reachable" entries included: no push service lives
// there). An IPv4-mapped IPv6 address is judged as its IPv4 address.
func publicAddr(ip netip.Addr) bool {
	ip = ip.WithZone("").Unmap()
	if !ip.IsValid() {
		return false
	}
	if ip.Is6() && !globalUnicast6.Contains(ip) {
		return false
	}
	for _, p := range specialPurpose {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// globalUnicast6 is the IPv6 global unicast space; everything outside it
// (::/96 IPv4-compatible, 64:ff9b::/96 NAT64, 100::/64 discard, fc00::/7,
// fe80::/10, fec0::/10, ff00::/8, ...) is refused.
var globalUnicast6 = netip.MustParsePrefix("2000::/3")

// specialPurpose are the special-purpose ranges refused inside IPv4 and
// inside 2000::/3 (the IPv6 ranges outside it are listed too, so that the
// table reads as the registry).
var specialPurpose = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		// IPv4 (RFC 6890 and its updates).
		"0.0.0.0/8",       // "this network"
		"10.0.0.0/8",      // private
		"100.64.0.0/10",   // shared address space (CGNAT)
		"127.0.0.0/8",     // loopback
		"169.254.0.0/16",  // link-local (cloud metadata services)
		"172.16.0.0/12",   // private
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // documentation (TEST-NET-1)
		"192.31.196.0/24", // AS112-v4
		"192.52.193.0/24", // AMT
		"192.88.99.0/24",  // deprecated 6to4 relay anycast
		"192.168.0.0/16",  // private
		"192.175.48.0/24", // direct delegation AS112
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // documentation (TEST-NET-2)
		"203.0.113.0/24",  // documentation (TEST-NET-3)
		"224.0.0.0/4",     // multicast
		"240.0.0.0/4",     // reserved, and 255.255.255.255 broadcast
		// IPv6.
		"::/128",            // unspecified
		"::1/128",           // loopback
		"::/96",             // IPv4-compatible (deprecated)
		"::ffff:0:0/96",     // IPv4-mapped (unmapped above; never dialled as such)
		"64:ff9b::/96",      // NAT64 well-known prefix: reaches IPv4 through a translator
		"64:ff9b:1::/48",    // NAT64 local use
		"100::/64",          // discard-only
		"100:0:0:1::/64",    // dummy prefix
		"2001::/23",         // IETF protocol assignments (Teredo, benchmarking, ORCHID, ...)
		"2001:db8::/32",     // documentation
		"2002::/16",         // 6to4: embeds any IPv4 address, private ones too
		"2620:4f:8000::/48", // direct delegation AS112
		"3fff::/20",         // documentation
		"5f00::/16",         // SRv6 SIDs
		"fc00::/7",          // unique local
		"fe80::/10",         // link-local
		"fec0::/10",         // site-local (deprecated)
		"ff00::/8",          // multicast
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

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
		sdk.Logger().Warn("webpush: endpoint unreachable", "delivery_id", d.DeliveryID, "endpoint", endpoint, "error", err)
		return tokenOutcome{kind: sdk.OutcomeRetryable, reason: unreachable}
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
