package pluginhost

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk"
)

// TestUnspecifiedOutcomeIsRetriedAndLogged: a plugin that returns a result
// without an outcome (OUTCOME_UNSPECIFIED on the wire) gets its delivery
// retried, never counted as sent, and the host logs a contract violation.
func TestUnspecifiedOutcomeIsRetriedAndLogged(t *testing.T) {
	t.Parallel()
	env := startHost(t, []channel.Config{sinkChannel("TEST", map[string]any{"outcome": "unspecified"})}, nil)
	results, _, err := env.h.Send(context.Background(), "TEST", deliveries("u", 2))
	if err != nil {
		t.Fatal(err)
	}
	want := []sdk.Result{
		sdk.Retry("u-0", "plugin contract violation: result with outcome unspecified", 0),
		sdk.Retry("u-1", "plugin contract violation: result with outcome unspecified", 0),
	}
	if diff := cmp.Diff(want, results); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	logs := env.logs.String()
	for _, id := range []string{"u-0", "u-1"} {
		if !strings.Contains(logs, `contract violation: delivery \"`+id+`\" has outcome unspecified`) {
			t.Errorf("host log does not report the contract violation of %s:\n%s", id, logs)
		}
	}
}

// TestProtocol1PluginFromOldSDK drops a plugin built from the SDK before v1
// (sdk/host/testdata/sdkv1plugin: protocol version 1, where OUTCOME_SENT is
// 0) into the plugin directory: today's host negotiates protocol 1 with it,
// configures it, checks its health and gets every outcome as the plugin
// meant it.
func TestProtocol1PluginFromOldSDK(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "herald-plugin-oldv1")
	build := exec.Command("go", "build", "-o", bin, "./plugin")
	build.Dir = filepath.Join(testenv.RepoRoot(t), "sdk", "host", "testdata", "sdkv1plugin")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the protocol 1 plugin: %v: %s", err, out)
	}
	if err := os.Chmod(bin, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	logs := &testenv.LogBuffer{}
	h, err := New(Config{Dir: dir, WatchInterval: -1, Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}), Channels: []channel.Config{{
		Name:      "OLDV1",
		Providers: []channel.Provider{{Plugin: "oldv1", Config: map[string]any{"prefix": "old-"}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Start(ctx); err != nil {
		t.Fatalf("start: %v\n%s", err, logs)
	}
	if st := h.Status(); len(st) != 1 || st[0].State != StateServing {
		t.Fatalf("status = %+v\n%s", st, logs)
	}
	if d, ok := h.Describe("OLDV1"); !ok || d.PluginVersion != "0.9.0" || !cmp.Equal(d.APIVersions, []int{1}) {
		t.Errorf("describe = %+v, %v", d, ok)
	}
	batch := []sdk.Delivery{
		{DeliveryID: "s", IdempotencyKey: "k-s", Content: sdk.Content{Body: "hello"}},
		{DeliveryID: "r", IdempotencyKey: "k-r", Content: sdk.Content{Body: "retry"}},
		{DeliveryID: "p", IdempotencyKey: "k-p", Content: sdk.Content{Body: "permanent"}},
	}
	results, provider, err := h.Send(ctx, "OLDV1", batch)
	if err != nil {
		t.Fatal(err)
	}
	if provider != "oldv1" {
		t.Errorf("provider = %q", provider)
	}
	want := []sdk.Result{
		sdk.Sent("s", "old-s/k-s"),
		sdk.Retry("r", "old plugin: told to retry", 2*time.Second),
		sdk.Permanent("p", "old plugin: told to fail", "OLD_PERMANENT"),
	}
	if diff := cmp.Diff(want, results); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	results, _, err = h.Send(ctx, "OLDV1", []sdk.Delivery{{DeliveryID: "t", Content: sdk.Content{Body: "rate"}}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]sdk.Result{sdk.RateLimited("t", "old plugin: told to rate limit", 3*time.Second)}, results); diff != "" {
		t.Errorf("rate limited (-want +got):\n%s", diff)
	}
	if strings.Contains(logs.String(), "contract violation") {
		t.Errorf("a protocol 1 plugin's outcomes were read as contract violations:\n%s", logs)
	}
}
