package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestRulesExplainAsksThePlugins: with --plugin-dir, rules explain takes
// a channel's class from what its plugin declares, as herald serve does,
// and says so; without it the channel is persistent by default, and a
// note on stderr says how to ask the plugins.
func TestRulesExplainAsksThePlugins(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := map[string]string{
		"rules.hcl": `
channel "LIVE" {
  providers = [{ plugin = "sink" }]
}
event "PING" {
  audience {
    user_type = "STAFF"
  }
  mandatory = ["LIVE"]
  inbox {
    title = "ping"
  }
  template "LIVE" {
    body = "ping"
  }
}
`,
		"event.json":     `{"tenant_id": "t", "event_id": "e-1", "type": "PING", "payload": {}}`,
		"directory.json": `{"recipients": [{"user_id": "u1", "user_type": "STAFF"}]}`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"rules", "explain", "--rules", filepath.Join(dir, "rules.hcl"), "--event", filepath.Join(dir, "event.json"),
		"--directory", filepath.Join(dir, "directory.json"), "--at", "2026-03-10T12:00:00Z"}

	stdout, stderr, code := runHerald(t, append(base, "--plugin-dir", testenv.PluginBinaries(t, "sink"))...)
	if want := "  LIVE  class persistent (declared by plugin sink); intrusive (a persistent channel)\n"; code != 0 || !strings.Contains(stdout, want) || stderr != "" {
		t.Errorf("with --plugin-dir: exit %d, want a line %q in stdout and nothing on stderr; stdout:\n%s\nstderr:\n%s", code, want, stdout, stderr)
	}

	stdout, stderr, code = runHerald(t, append(base, "--plugin-dir", "")...)
	if want := "  LIVE  class persistent (no plugin declared it: persistent by default); intrusive (a persistent channel)\n"; code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("without --plugin-dir: exit %d, want a line %q; stdout:\n%s", code, want, stdout)
	}
	if want := "note: channel LIVE is taken as persistent: the rules do not set best_effort; pass --plugin-dir"; !strings.Contains(stderr, want) {
		t.Errorf("without --plugin-dir: stderr lacks %q:\n%s", want, stderr)
	}
}
