package live

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestReserveCaps: a session is counted against its user's, its tenant's
// (its own cap when the tenant has one), its client address's and the
// daemon's caps; the first full cap refuses it and counts nothing; an
// unreserved session frees its slot everywhere.
func TestReserveCaps(t *testing.T) {
	cfg := Config{MaxSessionsPerUser: 2, MaxSessions: 10, MaxSessionsPerTenant: 4, MaxSessionsPerIP: 3,
		Tenants: map[string]TenantConfig{"small": {MaxSessions: 1}}}
	h := newHub()
	ok := func(key, tenant, ip string) {
		t.Helper()
		if d := h.reserve(key, tenant, ip, cfg); d != "" {
			t.Fatalf("%s/%s from %s refused: %s", tenant, key, ip, d)
		}
	}
	refused := func(key, tenant, ip, want string) {
		t.Helper()
		if d := h.reserve(key, tenant, ip, cfg); !strings.Contains(d, want) {
			t.Fatalf("%s/%s from %s: %q, want a refusal with %q", tenant, key, ip, d, want)
		}
	}
	ok("a/u1", "a", "10.0.0.1")
	ok("a/u1", "a", "10.0.0.2")
	refused("a/u1", "a", "10.0.0.3", "per user")
	ok("a/u2", "a", "10.0.0.1")
	ok("a/u3", "a", "10.0.0.2")
	refused("a/u4", "a", "10.0.0.4", "for this tenant") // the tenant's 4
	ok("small/u1", "small", "10.0.0.4")
	refused("small/u2", "small", "10.0.0.4", "at most 1 open sessions for this tenant")
	ok("b/u1", "b", "10.0.0.1")
	refused("b/u2", "b", "10.0.0.1", "from one client address") // 10.0.0.1's 3
	ok("b/u2", "b", "10.0.0.5")
	ok("b/u3", "b", "10.0.0.5")
	ok("b/u4", "b", "10.0.0.6")
	ok("c/u1", "c", "10.0.0.6") // the daemon's 10th
	refused("c/u2", "c", "10.0.0.7", "as many sessions as it may")
	h.unreserve("a/u1", "a", "10.0.0.1")
	ok("c/u2", "c", "10.0.0.7")
	if len(h.tenants) != 4 || h.total != 10 {
		t.Fatalf("counts: tenants %v, total %d", h.tenants, h.total)
	}
}

// TestReserveConcurrently: sessions opened at once never pass a cap.
func TestReserveConcurrently(t *testing.T) {
	cfg := Config{MaxSessionsPerUser: 1000, MaxSessions: 1000, MaxSessionsPerTenant: 25}
	h := newHub()
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if h.reserve(fmt.Sprintf("t/u%d", i), "t", "10.0.0.1", cfg) == "" {
				mu.Lock()
				granted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if granted != 25 {
		t.Fatalf("granted %d sessions, want the tenant's 25", granted)
	}
}
