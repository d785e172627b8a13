package config

import (
	"strings"
	"testing"
	"time"
)

// TestLiveAndConnectionCaps: the live session caps (with a tenant's own
// cap in a `tenant "ID"` block of live) and the per-address connection
// settings are read, have their defaults, and are refused naming the key
// when out of range.
func TestLiveAndConnectionCaps(t *testing.T) {
	t.Parallel()
	d, err := LoadDaemon("")
	if err != nil {
		t.Fatal(err)
	}
	if l := d.Live; l.MaxSessions != 512 || l.MaxSessionsPerTenant != 256 || l.MaxSessionsPerIP != 64 || len(l.Tenants) != 0 {
		t.Fatalf("live defaults: %+v", l)
	}
	if h := d.HTTP; h.MaxConnsPerIP != 128 || h.PressureIdleTimeout != 5*time.Second {
		t.Fatalf("http defaults: %+v", h)
	}
	d, err = LoadDaemon(writeFile(t, "herald.hcl", `
http {
  max_conns_per_ip      = 10
  pressure_idle_timeout = "1s"
}
live {
  max_sessions            = 100
  max_sessions_per_tenant = 20
  max_sessions_per_ip     = 0
  tenant "acme" { max_sessions = 50 }
  tenant "beta.example" { max_sessions = 2 }
}
`))
	if err != nil {
		t.Fatal(err)
	}
	l := d.Live
	if l.MaxSessions != 100 || l.MaxSessionsPerTenant != 20 || l.MaxSessionsPerIP != 0 ||
		l.Tenants["acme"].MaxSessions != 50 || l.Tenants["beta.example"].MaxSessions != 2 || len(l.Tenants) != 2 {
		t.Fatalf("live: %+v", l)
	}
	if d.HTTP.MaxConnsPerIP != 10 || d.HTTP.PressureIdleTimeout != time.Second {
		t.Fatalf("http: %+v", d.HTTP)
	}
	for name, tc := range map[string]struct{ body, want string }{
		"tenant cap zero":        {"live {\n  tenant \"acme\" { max_sessions = 0 }\n}", "live.tenant.acme.max_sessions"},
		"tenant cap negative":    {"live {\n  tenant \"acme\" { max_sessions = -1 }\n}", "live.tenant.acme.max_sessions"},
		"tenant id invalid":      {"live {\n  tenant \"no way!\" { max_sessions = 3 }\n}", "live.tenant"},
		"misspelt tenant key":    {"live {\n  tenant \"acme\" { max_session = 3 }\n}", "max_session"},
		"tenant twice":           {"live {\n  tenant \"acme\" { max_sessions = 3 }\n  tenant \"acme\" { max_sessions = 4 }\n}", "live.tenant.acme"},
		"per tenant zero":        {"live { max_sessions_per_tenant = 0 }", "live.max_sessions_per_tenant"},
		"daemon cap zero":        {"live { max_sessions = 0 }", "live.max_sessions"},
		"per ip negative":        {"live { max_sessions_per_ip = -1 }", "live.max_sessions_per_ip"},
		"conns per ip negative":  {"http { max_conns_per_ip = -1 }", "http.max_conns_per_ip"},
		"pressure idle negative": {"http { pressure_idle_timeout = \"-1s\" }", "http.pressure_idle_timeout"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := LoadDaemon(writeFile(t, "herald.hcl", tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}
