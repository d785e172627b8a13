package server_test

import (
	"testing"

	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/server"
)

// TestLiveConfigKeepsAReserve: the live gateway's max_sessions is at most
// three quarters of http.max_conns (and at least 1), so that the rest of
// the connections serve the API and the health checks; with no connection
// cap it is the setting.
func TestLiveConfigKeepsAReserve(t *testing.T) {
	for _, tc := range []struct{ maxConns, sessions, want int }{
		{1024, 512, 512}, {1024, 1000, 768}, {40, 512, 30}, {1, 512, 1}, {0, 5000, 5000},
	} {
		d := config.DefaultDaemon()
		d.HTTP.MaxConns, d.Live.MaxSessions = tc.maxConns, tc.sessions
		if got := server.LiveConfig(d).MaxSessions; got != tc.want {
			t.Errorf("max_conns %d, max_sessions %d: %d sessions, want %d", tc.maxConns, tc.sessions, got, tc.want)
		}
	}
}
