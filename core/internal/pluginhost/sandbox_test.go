package pluginhost

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk"
)

// probeSecrets starts the sink under tweak with a probe of the host's
// /proc/<pid>/environ (PPID: the plugin's parent, this test process) and of
// a secret file only the host's user may read, and returns what the plugin
// says it could read.
func probeSecrets(t *testing.T, tweak func(*Config)) (environ, token string) {
	t.Helper()
	secretFile := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(secretFile, []byte("s3cret-admin-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := startHost(t, []channel.Config{sinkChannel("PROBE", map[string]any{"probe": "/proc/PPID/environ," + secretFile})}, tweak)
	results, _, err := env.h.Send(context.Background(), "PROBE", deliveries("p", 1))
	if err != nil {
		t.Fatal(err)
	}
	r := results[0]
	// The plugin's lines are named after it, not after the sandbox helper.
	// They reach the host's log through the plugin's stderr, a moment after
	// the calls they tell of returned.
	testenv.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(env.logs.String(), "herald-plugin-sink: sink configured")
	}, "the plugin's log lines are not named herald-plugin-sink (the host log follows)")
	if r.Outcome != sdk.OutcomePermanent || r.Code != "SINK_PROBE" {
		t.Fatalf("probe result %+v", r)
	}
	environ, token = "?", "?"
	for _, f := range strings.Fields(r.Reason) {
		p, v, _ := strings.Cut(f, "=")
		switch {
		case strings.HasSuffix(p, "/environ") && p == "/proc/"+strconv.Itoa(os.Getpid())+"/environ":
			environ = v
		case p == secretFile:
			token = v
		}
	}
	return environ, token
}

// TestSandboxKeepsPluginFromDaemonSecrets runs a plugin that tries to read
// the daemon's /proc/<pid>/environ and a secret file of the daemon's user
// (an admin token, mode 0600): unconfined (plugins.sandbox = off, which is
// how every plugin ran before the sandbox) it reads both; confined by
// Landlock it reads neither, and still serves.
func TestSandboxKeepsPluginFromDaemonSecrets(t *testing.T) {
	t.Parallel()
	if LandlockABI() < 1 {
		t.Skip("this kernel has no Landlock")
	}
	t.Run("off", func(t *testing.T) {
		t.Parallel()
		environ, token := probeSecrets(t, func(c *Config) { c.Sandbox = SandboxOff })
		if environ != "ok" || token != "ok" {
			t.Errorf("unconfined plugin: environ %s, token %s; want both read (the exposure the sandbox closes)", environ, token)
		}
	})
	t.Run("landlock", func(t *testing.T) {
		t.Parallel()
		environ, token := probeSecrets(t, func(c *Config) { c.Sandbox = SandboxLandlock })
		if environ != "refused" || token != "refused" {
			t.Errorf("sandboxed plugin: environ %s, token %s; want both refused", environ, token)
		}
	})
}

// TestPluginUserKeepsPluginFromDaemonSecrets runs the probing plugin as
// another user (plugins.user, the daemon being root): file permissions keep
// it from the daemon's /proc entry and its 0600 files, without Landlock.
func TestPluginUserKeepsPluginFromDaemonSecrets(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("plugins.user needs the daemon to run as root")
	}
	if _, err := user.Lookup("nobody"); err != nil {
		t.Skip("no user nobody")
	}
	environ, token := probeSecrets(t, func(c *Config) { c.Sandbox = SandboxOff; c.User = "nobody" })
	if environ != "refused" || token != "refused" {
		t.Errorf("plugin as nobody: environ %s, token %s; want both refused", environ, token)
	}
}

func TestSandboxConfigValidate(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]Config{
		"bad mode":      {Dir: "d", Sandbox: "on"},
		"relative path": {Dir: "d", Sandbox: SandboxAuto, SandboxWrite: []string{"tmp"}},
		"unknown user":  {Dir: "d", User: "no-such-user-herald"},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
	if os.Geteuid() != 0 {
		if err := (&Config{Dir: "d", User: "nobody"}).Validate(); err == nil || !strings.Contains(err.Error(), "root") {
			t.Errorf("plugins.user when not root: %v, want a field error saying it needs root", err)
		}
	}
}
