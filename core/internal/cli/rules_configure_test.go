package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestRulesCheckConfigure runs the real slack plugin binary under `rules
// check --configure`: a webhook URL the plugin refuses is reported naming
// the provider and the field, without the secret URL.
func TestRulesCheckConfigure(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the slack plugin binary")
	}
	t.Parallel()
	binDir := testenv.PluginBinaries(t, "slack")
	dir := t.TempDir()
	write := func(url string) string {
		path := filepath.Join(dir, "rules.hcl")
		rules := `channel "SLACK" {
  best_effort = true
  providers = [{ plugin = "slack", name = "hooks", config = { mode = "webhook", webhooks = { alerts = "` + url + `" } } }]
}
event "SYSTEM_ALERT" {
  audience { user_type = "ADMIN" }
  mandatory = ["SLACK"]
  inbox { title = "t" }
}
`
		if err := os.WriteFile(path, []byte(rules), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	path := write("http://hooks.slack.com/services/T0/B0/sekritpath")
	stdout, stderr, code := runHerald(t, "rules", "check", "--plugin-dir", binDir, "--configure", path)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stdout %q stderr %q", code, stdout, stderr)
	}
	want := path + `: channel "SLACK" provider "hooks" (plugin slack): config field webhooks: webhook "alerts": scheme is http to host "hooks.slack.com": must be https`
	if !strings.Contains(stderr, want) || strings.Contains(stderr, "sekritpath") {
		t.Errorf("stderr = %q, want it to hold %q and not the URL's secret", stderr, want)
	}

	path = write("https://hooks.slack.com/services/T0/B0/sekritpath")
	stdout, stderr, code = runHerald(t, "rules", "check", "--plugin-dir", binDir, "--configure", path)
	if code != 0 || stdout != "ok: 1 file, 1 event type, 1 channel\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want ok", code, stdout, stderr)
	}

	_, stderr, code = runHerald(t, "rules", "check", "--configure", path)
	if code != 2 || !strings.Contains(stderr, "--configure needs --plugin-dir") {
		t.Errorf("--configure without --plugin-dir: exit %d, stderr %q; want 2 naming the flag", code, stderr)
	}
}
