package pluginhost

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/channel"
)

// TestHungProviderOpensCircuit has provider a answer slower than the host's
// send timeout while the caller (like the listener) passes a generous
// deadline of its own: a's timed-out sends count as failures, its circuit
// opens and traffic moves to b.
func TestHungProviderOpensCircuit(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	env := startHost(t, []channel.Config{{Name: "TEST", Providers: []channel.Provider{
		{Name: "b", Plugin: "sink", Priority: 2, Config: map[string]any{"record_file": filepath.Join(tmp, "b.jsonl")}},
		{Name: "a", Plugin: "sink", Priority: 1, Config: map[string]any{"record_file": filepath.Join(tmp, "a.jsonl"), "delay": "5s"}},
	}}}, func(c *Config) {
		c.Breaker = BreakerPolicy{ConsecutiveFailures: 2, Cooldown: time.Hour}
		c.HealthInterval = time.Hour
		c.SendTimeout = 200 * time.Millisecond
	})
	send := func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, provider, err := env.h.Send(ctx, "TEST", deliveries("h", 2))
		return provider, err
	}
	for i := range 2 {
		if p, err := send(); p != "a" || err == nil {
			t.Fatalf("send %d to the hung provider: provider %q, err %v; want a timing out", i, p, err)
		}
	}
	if st := statusOf(t, env.h, "TEST", "a"); st.State != StateCircuitOpen {
		t.Fatalf("a's state = %s after two timed-out sends, want circuit_open", st.State)
	}
	if p, err := send(); p != "b" || err != nil {
		t.Fatalf("send with a's circuit open: provider %q, err %v; want b", p, err)
	}
}
