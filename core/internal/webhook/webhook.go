// Package webhook is what Herald needs to POST delivery-status events to a
// tenant's webhook: the event kinds, the check of a webhook URL, the
// signing secrets and the Standard Webhooks signature
// (https://www.standardwebhooks.com: headers webhook-id, webhook-timestamp
// and webhook-signature "v1,<base64 HMAC-SHA256 of id.timestamp.body>"),
// and the guard that refuses private and reserved addresses when the HTTP
// client dials (SSRF). It does no I/O of its own but the dial guard's.
package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"
)

// Kinds are the event kinds, in the order the docs list them: a delivery's
// final outcome (its status in lower case) and the inbox's reads and
// actions. The routing key of an event on the status exchange is
// "<tenant>.<kind>".
var Kinds = []string{"delivery.sent", "delivery.failed", "delivery.skipped", "delivery.cancelled", "delivery.digested",
	"notification.read", "notification.acted"}

// MaxURLLen bounds a webhook URL in bytes (migration 0080 checks it too).
const MaxURLLen = 2000

// SecretPrefix starts every signing secret, as Standard Webhooks writes
// them: "whsec_" and the base64 of the key.
const SecretPrefix = "whsec_"

// Tolerance is how far a webhook-timestamp may be from the receiver's
// clock before it should refuse the message as a replay (Verify does).
const Tolerance = 5 * time.Minute

// CheckKinds returns kinds checked and without repeats, or an error naming
// the first bad entry as kinds[i]. An empty list is refused: a webhook
// wants at least one kind.
func CheckKinds(kinds []string) ([]string, error) {
	if len(kinds) == 0 {
		return nil, fmt.Errorf("kinds is empty; list at least one of %s", strings.Join(Kinds, ", "))
	}
	if len(kinds) > len(Kinds) {
		return nil, fmt.Errorf("kinds lists %d entries; there are %d kinds", len(kinds), len(Kinds))
	}
	seen := map[string]bool{}
	out := make([]string, 0, len(kinds))
	for i, k := range kinds {
		if !known(k) {
			return nil, fmt.Errorf("kinds[%d] is %q, not one of %s", i, k, strings.Join(Kinds, ", "))
		}
		if seen[k] {
			return nil, fmt.Errorf("kinds[%d] is %q, listed twice", i, k)
		}
		seen[k] = true
		out = append(out, k)
	}
	return out, nil
}

func known(k string) bool {
	for _, x := range Kinds {
		if x == k {
			return true
		}
	}
	return false
}

// CheckURL checks a webhook URL as a tenant gives it and returns it as
// stored. It must be absolute https with a host, no user info and no
// fragment, at most MaxURLLen bytes of printable UTF-8. http is accepted
// only for a loopback host (localhost, 127.0.0.0/8, ::1) and only when
// allowLoopback (the operator's status_events.webhook_allow_loopback). A
// host written as an IP address must be a public one (AllowedAddr); a
// name is checked again on every dial, against the addresses it resolves
// to (DialControl).
func CheckURL(raw string, allowLoopback bool) (string, error) {
	if raw == "" {
		return "", errors.New("is empty; write https://host/path")
	}
	if len(raw) > MaxURLLen {
		return "", fmt.Errorf("is %d bytes, more than %d", len(raw), MaxURLLen)
	}
	if !utf8.ValidString(raw) {
		return "", errors.New("is not valid UTF-8")
	}
	for _, r := range raw {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return "", fmt.Errorf("holds the character %U", r)
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("is not a URL: %v", errors.Unwrap(err))
	}
	if u.Opaque != "" || u.Host == "" {
		return "", errors.New("has no host; write https://host/path")
	}
	if u.User != nil {
		return "", errors.New("holds user info; put credentials in the path or rely on the signature")
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return "", errors.New("holds a fragment (#...)")
	}
	host := u.Hostname()
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("has port %q, not 1-65535", p)
		}
	}
	loopback := isLoopbackHost(host)
	switch u.Scheme {
	case "https":
	case "http":
		if !loopback {
			return "", errors.New("must be https (http is accepted for a loopback host only)")
		}
		if !allowLoopback {
			return "", errors.New("must be https (http to a loopback host needs the operator's status_events.webhook_allow_loopback)")
		}
	default:
		return "", fmt.Errorf("has scheme %q; write https://host/path", u.Scheme)
	}
	if loopback && !allowLoopback {
		return "", errors.New("names a loopback host, refused unless the operator sets status_events.webhook_allow_loopback")
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		if err := AllowedAddr(a, allowLoopback); err != nil {
			return "", err
		}
	}
	return u.String(), nil
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// reserved are the ranges no webhook may reach besides what netip's
// predicates name: shared address space, benchmarking, documentation,
// IETF protocol assignments, 6to4 relays, NAT64, discard, ORCHIDv2,
// Teredo, multicast, the broadcast and "this network" blocks.
var reserved = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{"0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24",
		"198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4", "255.255.255.255/32",
		"64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/32", "2001:2::/48", "2001:db8::/32", "2001:10::/28",
		"2001:20::/28", "2002::/16", "fc00::/7", "fe80::/10", "ff00::/8"} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// AllowedAddr says whether a webhook may be dialled at a: a public unicast
// address, or a loopback one when allowLoopback. Private (RFC 1918, ULA),
// link-local, multicast, unspecified and reserved addresses are refused,
// IPv4-mapped IPv6 addresses judged as their IPv4 address.
func AllowedAddr(a netip.Addr, allowLoopback bool) error {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return errors.New("has no valid address")
	case a.IsLoopback():
		if allowLoopback {
			return nil
		}
		return fmt.Errorf("address %s is loopback, refused unless the operator sets status_events.webhook_allow_loopback", a)
	case a.IsPrivate(), a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast(),
		a.IsMulticast(), a.IsUnspecified():
		return fmt.Errorf("address %s is private or reserved, refused", a)
	}
	for _, p := range reserved {
		if p.Contains(a) {
			return fmt.Errorf("address %s is private or reserved (%s), refused", a, p)
		}
	}
	return nil
}

// DialControl is a net.Dialer Control that refuses, at dial time, an
// address AllowedAddr refuses: a name that resolves to a private address
// (DNS rebinding included) is never connected to.
func DialControl(allowLoopback bool) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return fmt.Errorf("webhook: dial %s: %w", address, err)
		}
		a, err := netip.ParseAddr(host)
		if err != nil {
			return fmt.Errorf("webhook: dial %s: not an IP address", address)
		}
		if err := AllowedAddr(a, allowLoopback); err != nil {
			return fmt.Errorf("webhook: dial refused: %w", err)
		}
		return nil
	}
}

// NewSecret returns a new signing secret: SecretPrefix and the base64 of
// 32 random bytes.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// key is the HMAC key of a secret: the bytes its base64 stands for.
func key(secret string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil || len(b) < 24 {
		return nil, errors.New("webhook: secret is not whsec_ and the base64 of at least 24 bytes")
	}
	return b, nil
}

// Sign returns the webhook-signature header for a message: one
// "v1,<base64 HMAC-SHA256(id.timestamp.body)>" per secret, separated by
// spaces (during a rotation's overlap both the new and the previous
// secret sign, and a receiver accepts either).
func Sign(secrets []string, id string, ts time.Time, body []byte) (string, error) {
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		k, err := key(s)
		if err != nil {
			return "", err
		}
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac(k, id, ts.Unix(), body)))
	}
	return strings.Join(sigs, " "), nil
}

func mac(k []byte, id string, ts int64, body []byte) []byte {
	m := hmac.New(sha256.New, k)
	m.Write([]byte(id + "." + strconv.FormatInt(ts, 10) + "."))
	m.Write(body)
	return m.Sum(nil)
}

// ErrSignature is Verify's error for a message no signature of which
// matches the secret, or whose timestamp is outside the tolerance.
var ErrSignature = errors.New("webhook: signature or timestamp refused")

// Verify is what a receiver does with a message: it checks that
// timestamp (the webhook-timestamp header, Unix seconds) is within
// tolerance of now and that one of the signatures of header (the
// webhook-signature header) is secret's over id.timestamp.body.
func Verify(secret, id, timestamp, header string, body []byte, now time.Time, tolerance time.Duration) error {
	k, err := key(secret)
	if err != nil {
		return err
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: webhook-timestamp %q is not Unix seconds", ErrSignature, timestamp)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: webhook-timestamp is %s away from now, more than %s", ErrSignature, d.Round(time.Second), tolerance)
	}
	want := mac(k, id, ts, body)
	for _, sig := range strings.Fields(header) {
		v, b64, ok := strings.Cut(sig, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no v1 signature matches", ErrSignature)
}
