package pluginhost

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/channel"
)

// TestDeclared: the host reads each plugin's Describe for its channel's
// class, keeps it while the plugin is replaced, and says when a hot swap
// changes it.
func TestDeclared(t *testing.T) {
	t.Parallel()
	env := startHost(t, []channel.Config{
		{Name: "LIVE", Providers: []channel.Provider{{Plugin: "ticker"}}},
		sinkChannel("STORE", nil),
	}, func(c *Config) {
		// Installed before Start: the host runs it from the start.
		installPlugin(t, sinkVariant(t, "class=best-effort"), c.Dir, "ticker")
	})
	want := map[string]channel.Declared{
		"LIVE":  {Plugin: "ticker", BestEffort: true, UserTypes: []string{}},
		"STORE": {Plugin: "sink", UserTypes: []string{}},
	}
	if diff := cmp.Diff(want, env.h.Declared(), cmpDeclared); diff != "" {
		t.Errorf("Declared (-want +got):\n%s", diff)
	}

	var calls atomic.Int32
	env.h.OnDeclared(func() { calls.Add(1) })
	installPlugin(t, sinkVariant(t), env.dir, "ticker")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := env.h.Reload(ctx, "ticker"); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 {
		t.Errorf("OnDeclared called %d times after the class changed, want 1", calls.Load())
	}
	if d := env.h.Declared()["LIVE"]; d.BestEffort {
		t.Errorf("LIVE after the persistent build: %+v, want persistent", d)
	}
}

// cmpDeclared treats nil and empty user types alike.
var cmpDeclared = cmp.Transformer("userTypes", func(d channel.Declared) channel.Declared {
	if len(d.UserTypes) == 0 {
		d.UserTypes = nil
	}
	return d
})
