package pluginhost

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk"
)

// TestNewChecksumPinStopsRunningProcess reloads the rules with a checksum
// pin that the serving process's binary does not have, starting from an
// unpinned provider and from one pinned to that binary: the process is
// stopped, the provider shows refused with the mismatch, and sends get
// ErrNoProvider (retryable: the deliveries wait as RETRY).
func TestNewChecksumPinStopsRunningProcess(t *testing.T) {
	t.Parallel()
	good := sha256File(t, sinkVariant(t))
	wrong := strings.Repeat("0f", 32)
	for name, from := range map[string]string{"unpinned": "", "pinned": good} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ch := func(pin string) []channel.Config {
				return []channel.Config{{Name: "PIN", Providers: []channel.Provider{{Plugin: "sink", Checksum: pin}}}}
			}
			env := startHost(t, ch(from), nil)
			before := statusOf(t, env.h, "PIN", "sink")
			if before.State != StateServing || before.SHA256 != good {
				t.Fatalf("before the new pin: %+v", before)
			}
			err := env.h.Reconfigure(ch(wrong))
			if err == nil || !strings.Contains(err.Error(), "does not match the new checksum pin") {
				t.Errorf("Reconfigure = %v, want the running binary refused by the new pin", err)
			}
			st := statusOf(t, env.h, "PIN", "sink")
			if st.State != StateRefused || st.PID != 0 || !strings.Contains(st.LastError, "checksum mismatch") ||
				!strings.Contains(st.LastError, wrong) || !strings.Contains(st.LastError, good) {
				t.Errorf("after the new pin: %+v, want refused for a checksum mismatch naming both sums", st)
			}
			_, _, err = env.h.Send(context.Background(), "PIN", deliveries("p", 2))
			if !errors.Is(err, ErrNoProvider) || !sdk.IsRetryable(err) {
				t.Errorf("send after the new pin: %v, want retryable ErrNoProvider", err)
			}
			testenv.Eventually(t, 10*time.Second, func() bool { return !processAlive(before.PID) },
				"the process the new pin refuses (pid %d) stops", before.PID)
			if logs := env.logs.String(); !strings.Contains(logs, "does not match the new checksum pin") || !strings.Contains(logs, "plugin refused") {
				t.Errorf("log does not say the running plugin was refused:\n%s", logs)
			}
			// Pinning the binary's real checksum brings it back.
			if err := env.h.Reconfigure(ch(good)); err != nil {
				t.Fatal(err)
			}
			batch := deliveries("q", 2)
			results, _, err := env.h.Send(context.Background(), "PIN", batch)
			if err != nil {
				t.Fatal(err)
			}
			allSent(t, batch, results)
		})
	}
}

// TestNewPinOfRunningBinaryKeepsServing pins the checksum the running
// process has while the binary on disk changed to another one: the new
// provider is refused, but the running process is what the pin allows and
// keeps serving.
func TestNewPinOfRunningBinaryKeepsServing(t *testing.T) {
	t.Parallel()
	good := sha256File(t, sinkVariant(t))
	env := startHost(t, []channel.Config{sinkChannel("PIN", nil)}, nil)
	before := statusOf(t, env.h, "PIN", "sink")
	installPlugin(t, sinkVariant(t, "version=3.0.0"), env.dir, "sink")
	err := env.h.Reconfigure([]channel.Config{{Name: "PIN", Providers: []channel.Provider{{Plugin: "sink", Checksum: good}}}})
	if err == nil || !strings.Contains(err.Error(), "old one keeps serving") {
		t.Errorf("Reconfigure = %v, want the old process kept", err)
	}
	if st := statusOf(t, env.h, "PIN", "sink"); st.State != StateServing || st.PID != before.PID {
		t.Errorf("after pinning the running binary: %+v, want pid %d serving", st, before.PID)
	}
}

// TestBrokenBinaryStderrLogged runs a binary that writes to stderr and
// exits 1 before the handshake: what it wrote reaches the host's log under
// the plugin's name, and the provider's last error.
func TestBrokenBinaryStderrLogged(t *testing.T) {
	t.Parallel()
	const text = "sink-broken-build-cannot-start-4711"
	env := startHost(t, []channel.Config{{Name: "BROKEN", Providers: []channel.Provider{{Plugin: "broken"}}}}, func(c *Config) {
		installPlugin(t, sinkVariant(t, "dieAtStart="+text), c.Dir, "broken")
	})
	testenv.Eventually(t, 10*time.Second, func() bool {
		for _, l := range strings.Split(env.logs.String(), "\n") {
			if strings.Contains(l, "plugin wrote to stderr") && strings.Contains(l, "plugin=broken") && strings.Contains(l, text) {
				return true
			}
		}
		return false
	}, "the broken plugin's stderr in the host log with its name")
	if st := statusOf(t, env.h, "BROKEN", "broken"); !strings.Contains(st.LastError, text) {
		t.Errorf("status of the broken plugin = %+v, want its stderr in the last error", st)
	}
}

// TestBundledPluginVersionStamped builds a bundled plugin with -ldflags
// -X main.Version=9.9.9, as make does with the git version, and checks that
// Describe reports it.
func TestBundledPluginVersionStamped(t *testing.T) {
	t.Parallel()
	bin := testenv.PluginVariant(t, "slack", "Version=9.9.9")
	// A Slack Web API that passes the plugin's health check (auth.test).
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true,"user":"herald","team":"test"}`))
	}))
	t.Cleanup(api.Close)
	env := startHost(t, []channel.Config{{Name: "SLACK", Providers: []channel.Provider{{Plugin: "slack",
		Config: map[string]any{"token": "xoxb-test", "api_url": api.URL + "/"}}}}}, func(c *Config) {
		installPlugin(t, bin, c.Dir, "slack")
	})
	d, ok := env.h.Describe("SLACK")
	if !ok || d.PluginVersion != "9.9.9" {
		t.Errorf("Describe = %+v, %v; want PluginVersion 9.9.9\n%+v", d, ok, env.h.Status())
	}
}
