// Package retryafter reads HTTP Retry-After headers (RFC 9110 §10.2.3).
package retryafter

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Parse returns the delay a Retry-After value asks for: either whole seconds
// or an HTTP date, measured from now. It returns 0 for an empty, malformed
// or past value.
func Parse(value string, now time.Time) time.Duration {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0
	}
	if secs, err := strconv.Atoi(value); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(value); err == nil {
		if d := t.Sub(now); d > 0 {
			return d.Round(time.Second)
		}
	}
	return 0
}

// From returns Parse of the response's Retry-After header, or def when the
// header gives no usable delay.
func From(h http.Header, def time.Duration) time.Duration {
	if d := Parse(h.Get("Retry-After"), time.Now()); d > 0 {
		return d
	}
	return def
}
