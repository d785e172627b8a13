package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestPluginTrust runs `herald serve` with its database URL (password
// included) in its environment, as HERALD_DATABASE_URL, and one extra
// variable named by plugins.env. The sink plugin runs from the daemon's
// private copy of its binary, not from the plugin directory, and sees the
// extra and allow-listed variables but neither the database URL nor
// anything else of the daemon's environment. Then the plugin directory
// turns group-writable: `herald plugins reload` is refused, naming the
// directory and its mode, and the running version keeps serving; once the
// mode is fixed the reload goes through.
func TestPluginTrust(t *testing.T) {
	e := newPluginEnv(t, testenv.PluginVariant(t, "sink"))
	e.pluginEnv = []string{"SINK_TEST_EXTRA"}
	e.daemonEnv = []string{"HERALD_DATABASE_URL=" + e.db.URL, "SINK_TEST_EXTRA=passed on", "SINK_TEST_UNLISTED=kept back", "TZ=Europe/Rome"}
	e.writeConfig()
	envFile := filepath.Join(e.dir, "plugin.env")
	e.writeRules(pluginRules(5, channelSpec{name: "EMAIL", providers: []provider{
		{config: map[string]string{"record_file": e.record, "env_file": envFile}},
	}}))
	d := e.start()

	st := e.plugin("EMAIL", "sink")
	onDisk := filepath.Join(e.pluginDir, "herald-plugin-sink")
	if st.State != pluginhost.StateServing || st.Binary != onDisk || st.SHA256 != sha256File(t, onDisk) {
		t.Fatalf("EMAIL provider = %+v, want serving %s", st, onDisk)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", st.PID))
	if err != nil {
		t.Fatal(err)
	}
	if exe != st.Executable || strings.HasPrefix(exe, e.pluginDir) || sha256File(t, exe) != st.SHA256 {
		t.Errorf("the plugin process (pid %d) executes %s; want the private copy the admin API names (%s), outside %s, with sha256 %s",
			st.PID, exe, st.Executable, e.pluginDir, st.SHA256)
	}

	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	var environ []string
	if err := json.Unmarshal(b, &environ); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, kv := range environ {
		name, val, _ := strings.Cut(kv, "=")
		seen[name] = val
	}
	if strings.Contains(string(b), e.db.URL) {
		t.Errorf("the plugin's environment holds the database URL")
	}
	for _, name := range []string{"HERALD_DATABASE_URL", "SINK_TEST_UNLISTED", "HERALD_CONFIG", "HERALD_ADMIN_URL"} {
		if _, ok := seen[name]; ok {
			t.Errorf("the plugin sees %s", name)
		}
	}
	for name, want := range map[string]string{"SINK_TEST_EXTRA": "passed on", "TZ": "Europe/Rome", "PATH": os.Getenv("PATH")} {
		if seen[name] != want {
			t.Errorf("the plugin sees %s=%q, want %q", name, seen[name], want)
		}
	}

	// The plugin serves.
	if _, _, err := e.client().Emit(context.Background(), reservation("trust-0")); err != nil {
		t.Fatal(err)
	}
	e.waitAllSent(3, 30*time.Second)

	// A plugin directory others could write is refused; the running
	// version keeps serving.
	if err := os.Chmod(e.pluginDir, 0o775); err != nil {
		t.Fatal(err)
	}
	out, err := e.cli("plugins", "reload", "sink")
	if err == nil {
		t.Fatalf("herald plugins reload succeeded with a group-writable plugin directory:\n%s", out)
	}
	for _, want := range []string{e.pluginDir, "plugin directory is writable by its group", "drwxrwxr-x", "keeps serving", "plugins.insecure_permissions"} {
		if !strings.Contains(out, want) {
			t.Errorf("herald plugins reload output lacks %q:\n%s", want, out)
		}
	}
	if now := e.plugin("EMAIL", "sink"); now.PID != st.PID || now.State != pluginhost.StateServing {
		t.Errorf("after the refused reload: %+v, want pid %d serving", now, st.PID)
	}
	if err := os.Chmod(e.pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := e.cli("plugins", "reload", "sink"); err != nil {
		t.Fatalf("herald plugins reload after the fix: %v\n%s", err, out)
	}
	if now := e.plugin("EMAIL", "sink"); now.PID == st.PID || now.State != pluginhost.StateServing {
		t.Errorf("after the reload: %+v, want a new process serving", now)
	}
	if _, _, err := e.client().Emit(context.Background(), reservation("trust-1")); err != nil {
		t.Fatal(err)
	}
	e.waitAllSent(6, 30*time.Second)
	e.assertExactlyOnce(6)
	if !logHasLine(d.Log(), "hot swap failed", "plugin directory is writable by its group") {
		t.Errorf("herald log does not say why the reload was refused")
	}
}
