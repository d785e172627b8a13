// Package origins reads and writes web origins the way browsers serialise
// them (RFC 6454): scheme://host[:port], the scheme and host in lower
// case, an internationalised host in punycode, an IPv6 host bracketed in
// its shortest form, and no port when it is the scheme's default. A
// tenant's allowed origins are stored in that form, so the Origin header a
// browser sends matches one byte for byte.
package origins

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Limits on a tenant's list.
const (
	// MaxLen bounds an origin in bytes, as written and once normalised.
	MaxLen = 300
	// MaxPerTenant is how many origins one tenant may list (the database
	// enforces it too: migration 0055).
	MaxPerTenant = 50
)

// profile maps an internationalised host to punycode as browsers do
// (UTS #46, transitional processing off, STD3 rules: letters, digits and
// hyphens only).
var profile = idna.New(idna.MapForLookup(), idna.Transitional(false), idna.StrictDomainName(true), idna.BidiRule(), idna.VerifyDNSLength(true))

// dnsName is a host name as Normalize stores it: labels of 1-63 letters,
// digits and hyphens (not first or last), joined by single dots.
var dnsName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)

// Normalize checks s, an origin as a person writes it, and returns it as
// a browser would send it in an Origin header. It refuses, with words
// naming the fault: anything but http and https; http for any host but a
// loopback one (localhost, 127.0.0.0/8, [::1]); a path (even "/"), query,
// fragment or user info; a wildcard; the opaque origin "null"; a port
// outside 1-65535; NUL, control characters and invalid UTF-8; more than
// MaxLen bytes.
func Normalize(s string) (string, error) {
	if s == "" {
		return "", errors.New("is empty; write scheme://host[:port], e.g. https://app.example.com")
	}
	if len(s) > MaxLen {
		return "", fmt.Errorf("is %d bytes, more than %d", len(s), MaxLen)
	}
	if !utf8.ValidString(s) {
		return "", errors.New("is not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return "", fmt.Errorf("holds the character %U; write scheme://host[:port]", r)
		}
	}
	if strings.EqualFold(s, "null") {
		return "", errors.New(`"null" is the origin of sandboxed frames and local files, which any page can take; it cannot be allowed`)
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return "", fmt.Errorf("%q has no scheme; write scheme://host[:port], e.g. https://app.example.com", s)
	}
	scheme = strings.ToLower(scheme)
	if scheme != "https" && scheme != "http" {
		return "", fmt.Errorf("scheme %q: only https (and http for localhost) origins can be allowed", scheme)
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		return "", fmt.Errorf("%q has a path, query or fragment; an origin is scheme://host[:port] only (no trailing /)", s)
	}
	if strings.Contains(rest, "@") {
		return "", fmt.Errorf("%q has user info (user@); an origin is scheme://host[:port] only", s)
	}
	if strings.Contains(rest, "*") {
		return "", fmt.Errorf("%q has a wildcard; list each origin exactly", s)
	}
	host, port, err := splitHostPort(rest)
	if err != nil {
		return "", fmt.Errorf("%q: %v", s, err)
	}
	loopback := false
	switch {
	case strings.HasPrefix(host, "["):
		addr, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
		if err != nil || !addr.Is6() || addr.Zone() != "" || addr.Is4In6() {
			return "", fmt.Errorf("%q: the host %s is not an IPv6 address", s, host)
		}
		host, loopback = "["+addr.String()+"]", addr.IsLoopback()
	default:
		host = strings.TrimSuffix(host, ".")
		if addr, err := netip.ParseAddr(host); err == nil {
			if !addr.Is4() {
				return "", fmt.Errorf("%q: an IPv6 host is written in brackets", s)
			}
			host, loopback = addr.String(), addr.IsLoopback()
			break
		}
		if looksNumeric(host) {
			return "", fmt.Errorf("%q: the host %s is neither a name nor an IPv4 address", s, host)
		}
		ascii, err := profile.ToASCII(host)
		if err == nil && !dnsName.MatchString(ascii) {
			err = errors.New("labels of a-z 0-9 and -, not starting or ending with -, joined by single dots")
		}
		if err != nil || !strings.Contains(ascii, ".") && ascii != "localhost" {
			return "", fmt.Errorf("%q: the host %s is not a domain name (%s)", s, host, reason(err))
		}
		host, loopback = ascii, ascii == "localhost"
	}
	if scheme == "http" && !loopback {
		return "", fmt.Errorf("%q: http is allowed for localhost only (a page served over plain http can be altered on the way); use https", s)
	}
	out := scheme + "://" + host
	if port != "" && !(scheme == "https" && port == "443") && !(scheme == "http" && port == "80") {
		out += ":" + port
	}
	if len(out) > MaxLen {
		return "", fmt.Errorf("is %d bytes once normalised, more than %d", len(out), MaxLen)
	}
	return out, nil
}

// Canonical reports whether the Origin header value h is an origin in the
// form Normalize gives: a browser sends nothing else, so a header that is
// not (mixed case, a trailing slash, "null", user info, ...) is granted
// nothing.
func Canonical(h string) bool {
	n, err := Normalize(h)
	return err == nil && n == h
}

// splitHostPort splits host[:port], checking the port is 1-65535 written
// without a sign or leading zero.
func splitHostPort(s string) (host, port string, err error) {
	host = s
	if i := strings.LastIndexByte(s, ':'); i >= 0 && (!strings.HasPrefix(s, "[") || strings.HasSuffix(s[:i], "]")) {
		host, port = s[:i], s[i+1:]
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || port[0] == '0' || port[0] == '+' {
			return "", "", fmt.Errorf("the port %q is not a number from 1 to 65535", port)
		}
	}
	if host == "" {
		return "", "", errors.New("no host")
	}
	return strings.ToLower(host), port, nil
}

// looksNumeric reports whether host is digits and dots only (an IPv4
// address written wrongly, such as 1.2.3 or 0x7f.1, is not a name).
func looksNumeric(host string) bool {
	if host == "" {
		return false
	}
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	for _, c := range last {
		if c < '0' || c > '9' {
			return strings.HasPrefix(last, "0x")
		}
	}
	return true
}

func reason(err error) string {
	if err == nil {
		return "a name needs a dot, as in app.example.com"
	}
	return err.Error()
}
