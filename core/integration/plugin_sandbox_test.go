package integration

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestPluginCannotReadDaemonSecrets runs `herald serve` with its database
// URL (password included) in its environment and its admin token in a
// 0600 file, and a plugin that, at every Send, tries to read the daemon's
// /proc/<ppid>/environ and the admin token file and answers Permanent with
// what it could read (stored as the deliveries' last_error). Under the
// sandbox (plugins.sandbox = landlock, the plugin allowed to write its
// record file only) it reads neither; with plugins.sandbox = off, as every
// plugin ran before the sandbox, it reads both (this test runs as root,
// which reads any /proc entry: the non-dumpable daemon keeps only other
// users' processes out, see cli's TestServeHidesEnvironFromSameUser).
func TestPluginCannotReadDaemonSecrets(t *testing.T) {
	if pluginhost.LandlockABI() < 1 {
		t.Skip("this kernel has no Landlock")
	}
	for _, tc := range []struct {
		sandbox string
		want    string
	}{{"landlock", "refused"}, {"off", "ok"}} {
		t.Run(tc.sandbox, func(t *testing.T) {
			e := newPluginEnv(t, testenv.PluginVariant(t, "sink"))
			e.daemonEnv = []string{"HERALD_DATABASE_URL=" + e.db.URL}
			e.sandbox = tc.sandbox
			if err := os.WriteFile(e.record, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			e.sandboxWrite = []string{e.record}
			e.writeConfig()
			e.writeRules(pluginRules(1, channelSpec{name: "EMAIL", providers: []provider{
				{config: map[string]string{"record_file": e.record, "probe": "/proc/PPID/environ," + e.adminTokenFile}},
			}}))
			e.start()
			if _, _, err := e.client().Emit(context.Background(), reservation("probe-"+tc.sandbox)); err != nil {
				t.Fatal(err)
			}
			e.until(30*time.Second, func() bool {
				return e.count(`SELECT count(*) FROM deliveries WHERE channel = 'EMAIL' AND last_error LIKE '%environ=%'`) > 0
			}, func() string { return "an EMAIL delivery with the probe's answer: " + e.statusSummary() })
			var lastErr string
			if err := e.db.Pool.QueryRow(context.Background(),
				`SELECT last_error FROM deliveries WHERE channel = 'EMAIL' AND last_error LIKE '%environ=%' LIMIT 1`).Scan(&lastErr); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(lastErr, "/environ="+tc.want) || !strings.Contains(lastErr, e.adminTokenFile+"="+tc.want) {
				t.Errorf("sandbox %s: the plugin says %q; want the daemon's environ and %s %s", tc.sandbox, lastErr, e.adminTokenFile, tc.want)
			}
		})
	}
}
