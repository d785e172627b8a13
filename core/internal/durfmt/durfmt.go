// Package durfmt writes durations the way Herald's files and messages
// spell them: "2m", "1h30m", "10s", not Go's "2m0s". It is pure and
// imports only the standard library, so that the rules engine and the
// daemon's configuration may share it.
package durfmt

import (
	"strings"
	"time"
)

// Short writes d without zero tails: 10m, 1h30m, 2s, 500ms.
func Short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
