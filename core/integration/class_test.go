package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestPluginDeclaredClass: a channel's class comes from what its plugin
// declares. The "ticker" plugin (the sink built to declare best effort)
// serves two channels whose every send fails retryably: LIVE, which the
// rules leave to the plugin, is tried once and FAILED; LIVE_RETRIED, which
// the rules make persistent (best_effort = false), is retried up to its
// max_attempts. The admin explain endpoint says which source won.
func TestPluginDeclaredClass(t *testing.T) {
	e := newEnv(t, "retry")
	sink := filepath.Join(e.pluginDir, "herald-plugin-sink")
	e.pluginDir = filepath.Join(e.dir, "plugins")
	if err := os.MkdirAll(e.pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.pluginDir, "herald-plugin-sink"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-ldflags", "-X main.class=best-effort",
		"-o", filepath.Join(e.pluginDir, "herald-plugin-ticker"), "./core/internal/tools/sinkplugin")
	build.Dir = testenv.RepoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the best-effort sink: %v\n%s", err, out)
	}
	e.writeConfig()
	e.writeRules(fmt.Sprintf(`
defaults {
  time_zone = "UTC"
  retry {
    max_attempts = 3
    initial      = "100ms"
    max          = "200ms"
  }
}
channel "LIVE" {
  providers = [{ plugin = "ticker", config = { record_file = %[1]q, outcome = "retry" } }]
}
channel "LIVE_RETRIED" {
  best_effort = false
  providers   = [{ plugin = "ticker", config = { record_file = %[1]q, outcome = "retry" } }]
}
event "RESERVATION_REQUESTED" {
  audience {
    group = "restaurant:{{ .payload.restaurant_id }}"
  }
  mandatory   = ["LIVE", "LIVE_RETRIED"]
  quiet_hours = "ignore"
  inbox {
    title = "New reservation"
  }
  template "LIVE" {
    body = "{{ .payload.customer_name }}"
  }
  template "LIVE_RETRIED" {
    body = "{{ .payload.customer_name }}"
  }
}
`, e.record))
	e.start()
	ctx := context.Background()
	if _, _, err := e.client().Emit(ctx, reservation("class-1")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE status = 'FAILED'`) == 6
	}, "6 deliveries FAILED (now: %s)", e.statusSummary())
	for _, c := range []struct {
		channel               string
		attempts, maxAttempts int
	}{{"LIVE", 1, 1}, {"LIVE_RETRIED", 3, 3}} {
		if n := e.count(`SELECT count(*) FROM deliveries WHERE channel = $1 AND attempts = $2 AND max_attempts = $3`,
			c.channel, c.attempts, c.maxAttempts); n != 3 {
			t.Errorf("%s: %d of 3 deliveries FAILED after %d of %d attempts (%s)", c.channel, n, c.attempts, c.maxAttempts, e.statusSummary())
		}
	}
	if n := e.count(`SELECT count(*) FROM delivery_attempt_log a JOIN deliveries d ON d.delivery_id = a.delivery_id WHERE d.channel = 'LIVE'`); n != 3 {
		t.Errorf("LIVE: %d attempts logged, want 3 (one per delivery)", n)
	}

	req, err := http.NewRequest(http.MethodGet, e.admin+"/admin/v1/events/"+e.tenant+"/class-1/explain?format=text", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("explain: %s %v\n%s", resp.Status, err, body)
	}
	for _, want := range []string{
		"  LIVE          class best-effort (declared by plugin ticker); not intrusive (a best-effort channel)\n",
		"  LIVE_RETRIED  class persistent (set in rules); intrusive (a persistent channel)\n",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("explain lacks %q:\n%s", want, body)
		}
	}
}
