package pluginhost

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk"
	sdkhost "github.com/heraldhq/herald/sdk/host"
)

var (
	variantMu sync.Mutex
	variants  = map[string]string{}
)

// sinkVariant builds herald-plugin-sink with -ldflags -X values (e.g.
// "version=2.0.0") once per test process and returns the binary's path.
func sinkVariant(t *testing.T, vars ...string) string {
	t.Helper()
	if len(vars) == 0 {
		return filepath.Join(testenv.PluginBinaries(t, "sink"), "herald-plugin-sink")
	}
	key := strings.Join(vars, " ")
	variantMu.Lock()
	defer variantMu.Unlock()
	if p, ok := variants[key]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "herald-sink-variant-")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "herald-plugin-sink")
	var ld []string
	for _, v := range vars {
		ld = append(ld, "-X", "main."+v)
	}
	cmd := exec.Command("go", "build", "-ldflags", strings.Join(ld, " "), "-o", bin, "./core/internal/tools/sinkplugin")
	cmd.Dir = testenv.RepoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build sink variant %s: %v: %s", key, err, out)
	}
	variants[key] = bin
	return bin
}

// installPlugin copies src into dir as herald-plugin-<name> atomically
// (write beside, then rename), as an operator's deploy would.
func installPlugin(t *testing.T, src, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, BinaryPrefix+name)
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

type hostEnv struct {
	h    *Host
	dir  string
	logs *testenv.LogBuffer
}

// startHost runs a Host over a private plugin directory holding the sink.
func startHost(t *testing.T, channels []channel.Config, tweak func(*Config)) *hostEnv {
	t.Helper()
	dir := t.TempDir()
	installPlugin(t, sinkVariant(t), dir, "sink")
	logs := &testenv.LogBuffer{}
	cfg := Config{
		Dir:            dir,
		Logger:         hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}),
		Channels:       channels,
		HealthInterval: 200 * time.Millisecond,
		WatchInterval:  -1,
		Restart:        channel.RetryPolicy{Initial: 50 * time.Millisecond, Max: time.Second},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = h.Close()
		if t.Failed() {
			t.Logf("host log:\n%s", logs.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	return &hostEnv{h: h, dir: dir, logs: logs}
}

func sinkChannel(name string, cfg map[string]any) channel.Config {
	return channel.Config{Name: name, Providers: []channel.Provider{{Plugin: "sink", Config: cfg}}}
}

func deliveries(prefix string, n int) []sdk.Delivery {
	out := make([]sdk.Delivery, n)
	for i := range out {
		id := fmt.Sprintf("%s-%d", prefix, i)
		out[i] = sdk.Delivery{DeliveryID: id, IdempotencyKey: "idem-" + id, Channel: "TEST", Attempt: 1,
			Recipient: sdk.Recipient{UserID: "u" + strconv.Itoa(i)}, Content: sdk.Content{Body: "hello " + id}}
	}
	return out
}

func statusOf(t *testing.T, h *Host, channel, provider string) ProviderStatus {
	t.Helper()
	for _, s := range h.Status() {
		if s.Channel == channel && s.Provider == provider {
			return s
		}
	}
	t.Fatalf("no status for %s/%s in %+v", channel, provider, h.Status())
	return ProviderStatus{}
}

func readRecords(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("record line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func allSent(t *testing.T, batch []sdk.Delivery, results []sdk.Result) {
	t.Helper()
	if len(results) != len(batch) {
		t.Fatalf("got %d results for %d deliveries", len(results), len(batch))
	}
	for i, r := range results {
		if r.DeliveryID != batch[i].DeliveryID || r.Outcome != sdk.OutcomeSent {
			t.Fatalf("result %d = %+v, want sent for %s", i, r, batch[i].DeliveryID)
		}
	}
}

func TestSendSplitsByMaxBatchAndRecords(t *testing.T) {
	t.Parallel()
	rec := filepath.Join(t.TempDir(), "rec.jsonl")
	env := startHost(t, []channel.Config{sinkChannel("TEST", map[string]any{"record_file": rec, "version": "v1"})}, nil)
	batch := deliveries("a", 250)
	results, provider, err := env.h.Send(context.Background(), "TEST", batch)
	if err != nil {
		t.Fatal(err)
	}
	if provider != "sink" {
		t.Errorf("provider = %q, want sink", provider)
	}
	allSent(t, batch, results)
	recs := readRecords(t, rec)
	if len(recs) != 250 {
		t.Fatalf("record file has %d lines, want 250", len(recs))
	}
	st := statusOf(t, env.h, "TEST", "sink")
	keys := map[string]string{}
	for _, r := range recs {
		keys[r["delivery_id"].(string)] = r["idempotency_key"].(string)
		if int(r["pid"].(float64)) != st.PID {
			t.Errorf("record pid %v, status pid %d", r["pid"], st.PID)
		}
	}
	for _, d := range batch {
		if keys[d.DeliveryID] != d.IdempotencyKey {
			t.Errorf("delivery %s: plugin saw idempotency key %q, want %q", d.DeliveryID, keys[d.DeliveryID], d.IdempotencyKey)
		}
	}
	// Three chunks: 100, 100, 50. The plugin's lines come through its
	// stderr, a moment after the calls returned.
	testenv.Eventually(t, 10*time.Second, func() bool { return strings.Count(env.logs.String(), "sink batch") >= 3 },
		"the plugin logged fewer than 3 batches")
	if n := strings.Count(env.logs.String(), "sink batch"); n != 3 {
		t.Errorf("plugin logged %d batches, want 3", n)
	}
	// Capabilities: what the sink declares in Describe, recorded and shown
	// (the host acts on none).
	want := ProviderStatus{Name: "sink", Version: "1.0.0", Channel: "TEST", Provider: "sink", State: StateServing,
		Binary: filepath.Join(env.dir, "herald-plugin-sink"), Capabilities: []string{"idempotency_key"}}
	got := st
	got.PID, got.StartedAt, got.Uptime, got.SHA256, got.Executable = 0, time.Time{}, 0, "", ""
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if st.PID <= 0 || st.SHA256 != sha256File(t, st.Binary) {
		t.Errorf("status pid %d sha %q", st.PID, st.SHA256)
	}
	assertRunsPrivateCopy(t, st)
	if d, ok := env.h.Describe("TEST"); !ok || d.MaxBatch != 100 || d.ChannelType != sdk.AnyChannel {
		t.Errorf("Describe = %+v, %v", d, ok)
	}
	// Plugin logs come back through the host's logger tagged with the plugin.
	if !strings.Contains(env.logs.String(), "plugin=sink") || !strings.Contains(env.logs.String(), "sink configured") {
		t.Errorf("host log lacks the plugin's own lines tagged plugin=sink:\n%s", env.logs.String())
	}
}

func TestSendErrors(t *testing.T) {
	t.Parallel()
	env := startHost(t, []channel.Config{sinkChannel("TEST", nil)}, nil)
	tests := map[string]struct {
		channel string
		want    error
	}{
		"unknown channel": {channel: "NOPE", want: ErrUnknownChannel},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, _, err := env.h.Send(context.Background(), tc.channel, deliveries("x", 1))
			if !errors.Is(err, tc.want) {
				t.Errorf("error = %v, want %v", err, tc.want)
			}
		})
	}
	results, _, err := env.h.Send(context.Background(), "TEST", nil)
	if err != nil || results != nil {
		t.Errorf("empty batch: %v, %v", results, err)
	}
}

func TestOutcomesAndRateLimitThrottle(t *testing.T) {
	t.Parallel()
	env := startHost(t, []channel.Config{
		sinkChannel("PERM", map[string]any{"outcome": "permanent"}),
		sinkChannel("RETRY", map[string]any{"outcome": "retry"}),
		sinkChannel("SLOW", map[string]any{"outcome": "rate_limited"}),
	}, nil)
	tests := map[string]struct {
		channel string
		want    sdk.Result
	}{
		"permanent":    {channel: "PERM", want: sdk.Permanent("x-0", "sink: told to fail", "SINK_PERMANENT")},
		"retry":        {channel: "RETRY", want: sdk.Retry("x-0", "sink: told to retry", 0)},
		"rate limited": {channel: "SLOW", want: sdk.RateLimited("x-0", "sink: told to rate limit", time.Second)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			results, _, err := env.h.Send(context.Background(), tc.channel, deliveries("x", 1))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]sdk.Result{tc.want}, results); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	// The rate-limited provider is now throttled as a whole.
	_, _, err := env.h.Send(context.Background(), "SLOW", deliveries("y", 1))
	if !sdk.IsRateLimited(err) || sdk.RetryAfter(err) <= 0 || !errors.Is(err, ErrThrottled) {
		t.Fatalf("send while throttled: %v (rate limited %v, retry after %v)", err, sdk.IsRateLimited(err), sdk.RetryAfter(err))
	}
	if st := statusOf(t, env.h, "SLOW", "sink"); st.ThrottledUntil.IsZero() {
		t.Errorf("status shows no throttle: %+v", st)
	}
}

func TestSIGKILLMidBatchRestarts(t *testing.T) {
	t.Parallel()
	rec := filepath.Join(t.TempDir(), "rec.jsonl")
	env := startHost(t, []channel.Config{sinkChannel("TEST", map[string]any{"record_file": rec, "delay": "1s"})}, nil)
	before := statusOf(t, env.h, "TEST", "sink")

	type sendResult struct {
		results []sdk.Result
		err     error
	}
	done := make(chan sendResult, 1)
	go func() {
		r, _, err := env.h.Send(context.Background(), "TEST", deliveries("a", 10))
		done <- sendResult{r, err}
	}()
	// Wait until the batch is inside the plugin, then SIGKILL it.
	p := env.h.channels["TEST"].providers[0]
	testenv.Eventually(t, 5*time.Second, func() bool {
		p.mu.Lock()
		inst := p.inst
		p.mu.Unlock()
		inst.mu.Lock()
		defer inst.mu.Unlock()
		return inst.active > 0
	}, "send in flight")
	killPlugin(t, before.PID)
	var got sendResult
	select {
	case got = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Send did not return after the plugin was killed")
	}
	if !errors.Is(got.err, sdkhost.ErrPluginExited) || !sdk.IsRetryable(got.err) {
		t.Fatalf("Send error = %v, want one wrapping sdkhost.ErrPluginExited", got.err)
	}
	if len(got.results) != 0 {
		t.Errorf("results for a killed batch: %+v", got.results)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		st := statusOf(t, env.h, "TEST", "sink")
		return st.State == StateServing && st.PID != before.PID && st.PID > 0
	}, "plugin restarted: %+v", env.h.Status())
	st := statusOf(t, env.h, "TEST", "sink")
	if st.Restarts != 1 {
		t.Errorf("restarts = %d, want 1", st.Restarts)
	}
	if processAlive(before.PID) {
		t.Errorf("killed plugin pid %d still alive", before.PID)
	}
	// The retried batch goes through the new process exactly once.
	batch := deliveries("a", 10)
	results, _, err := env.h.Send(context.Background(), "TEST", batch)
	if err != nil {
		t.Fatal(err)
	}
	allSent(t, batch, results)
	recs := readRecords(t, rec)
	if len(recs) != 10 {
		t.Fatalf("record file has %d lines, want 10 (nothing recorded by the killed process)", len(recs))
	}
	for _, r := range recs {
		if int(r["pid"].(float64)) != st.PID {
			t.Errorf("record from pid %v, want the restarted pid %d", r["pid"], st.PID)
		}
	}
}

func TestCrashOnceRestartsWithBackoff(t *testing.T) {
	t.Parallel()
	crash := filepath.Join(t.TempDir(), "crash")
	if err := os.WriteFile(crash, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env := startHost(t, []channel.Config{sinkChannel("TEST", map[string]any{"crash_once_file": crash})}, nil)
	_, _, err := env.h.Send(context.Background(), "TEST", deliveries("a", 3))
	if !errors.Is(err, sdkhost.ErrPluginExited) {
		t.Fatalf("Send error = %v, want sdkhost.ErrPluginExited", err)
	}
	// Until the plugin is back, Send keeps saying so (or succeeds once it is).
	var results []sdk.Result
	testenv.Eventually(t, 10*time.Second, func() bool {
		results, _, err = env.h.Send(context.Background(), "TEST", deliveries("a", 3))
		if err != nil && !errors.Is(err, sdkhost.ErrPluginExited) {
			t.Fatalf("Send while restarting: %v, want sdkhost.ErrPluginExited", err)
		}
		return err == nil
	}, "send succeeds after restart")
	allSent(t, deliveries("a", 3), results)
	if st := statusOf(t, env.h, "TEST", "sink"); st.Restarts != 1 || !strings.Contains(st.LastError, "exited") && !strings.Contains(st.LastError, "connection") {
		t.Errorf("status after crash: %+v", st)
	}
}

func TestChecksumPinning(t *testing.T) {
	t.Parallel()
	good := sha256File(t, sinkVariant(t))
	bad := strings.Repeat("ab", 32)
	env := startHost(t, []channel.Config{
		{Name: "PINNED", Providers: []channel.Provider{{Plugin: "sink", Checksum: good}}},
		{Name: "WRONG", Providers: []channel.Provider{{Plugin: "sink", Checksum: bad}}},
	}, nil)
	st := statusOf(t, env.h, "WRONG", "sink")
	if st.State != StateRefused || !strings.Contains(st.LastError, "checksum mismatch") || !strings.Contains(st.LastError, good) {
		t.Errorf("WRONG status = %+v, want refused with a checksum mismatch naming the binary's sum", st)
	}
	if st.PID != 0 {
		t.Errorf("refused plugin has pid %d", st.PID)
	}
	if _, _, err := env.h.Send(context.Background(), "WRONG", deliveries("a", 1)); !errors.Is(err, ErrNoProvider) {
		t.Errorf("send to refused channel: %v, want ErrNoProvider", err)
	}
	if !strings.Contains(env.logs.String(), "plugin refused") {
		t.Errorf("log does not say the plugin was refused")
	}
	batch := deliveries("b", 2)
	results, _, err := env.h.Send(context.Background(), "PINNED", batch)
	if err != nil {
		t.Fatal(err)
	}
	allSent(t, batch, results)
}

func TestRefusedConfig(t *testing.T) {
	t.Parallel()
	env := startHost(t, []channel.Config{
		sinkChannel("BADKEY", map[string]any{"recrod_file": "x"}),
		sinkChannel("BADVAL", map[string]any{"delay": "-1s"}),
		{Name: "MISSING", Providers: []channel.Provider{{Plugin: "nope"}}},
		sinkChannel("OK", nil),
	}, nil)
	tests := map[string]struct {
		channel string
		want    string
	}{
		"unknown key named by the host": {channel: "BADKEY", want: `config field "recrod_file": unknown field`},
		"meaning refused by the plugin": {channel: "BADVAL", want: `config field "delay": must not be negative`},
		"missing binary":                {channel: "MISSING", want: "herald-plugin-nope not found"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			st := env.h.Status()
			var found *ProviderStatus
			for i := range st {
				if st[i].Channel == tc.channel {
					found = &st[i]
				}
			}
			if found == nil || found.State != StateRefused || !strings.Contains(found.LastError, tc.want) {
				t.Errorf("status = %+v, want refused with %q", found, tc.want)
			}
		})
	}
	if _, _, err := env.h.Send(context.Background(), "OK", deliveries("a", 1)); err != nil {
		t.Errorf("the good channel does not work: %v", err)
	}
}

// traffic sends batches on channel until stop is closed and counts
// deliveries that did not come back SENT.
func traffic(h *Host, channel string, stop <-chan struct{}) (sent, failed *atomic.Int64, errs chan error, done chan struct{}) {
	sent, failed = &atomic.Int64{}, &atomic.Int64{}
	errs = make(chan error, 100)
	done = make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 100000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			batch := deliveries(fmt.Sprintf("t%d", i), 5)
			results, _, err := h.Send(context.Background(), channel, batch)
			if err != nil {
				failed.Add(int64(len(batch)))
				select {
				case errs <- err:
				default:
				}
				continue
			}
			for _, r := range results {
				if r.Outcome == sdk.OutcomeSent {
					sent.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}
	}()
	return sent, failed, errs, done
}

func TestHotSwapBinaryUnderTraffic(t *testing.T) {
	t.Parallel()
	v2 := sinkVariant(t, "version=2.0.0")
	env := startHost(t, []channel.Config{sinkChannel("TEST", map[string]any{"delay": "5ms"})}, func(c *Config) {
		c.WatchInterval = 100 * time.Millisecond
	})
	before := statusOf(t, env.h, "TEST", "sink")
	if before.Version != "1.0.0" {
		t.Fatalf("start version %q", before.Version)
	}
	stop := make(chan struct{})
	sent, failed, errs, done := traffic(env.h, "TEST", stop)
	testenv.Eventually(t, 5*time.Second, func() bool { return sent.Load() > 50 }, "traffic flowing")

	installPlugin(t, v2, env.dir, "sink")
	testenv.Eventually(t, 20*time.Second, func() bool {
		return statusOf(t, env.h, "TEST", "sink").Version == "2.0.0"
	}, "new version serving: %+v", env.h.Status())
	mark := sent.Load()
	testenv.Eventually(t, 5*time.Second, func() bool { return sent.Load() > mark+50 }, "traffic flowing on the new version")
	close(stop)
	<-done

	if n := failed.Load(); n != 0 {
		t.Errorf("%d deliveries failed during the swap; first error: %v", n, <-errs)
	}
	after := statusOf(t, env.h, "TEST", "sink")
	if after.PID == before.PID || after.State != StateServing {
		t.Errorf("after swap: %+v (before pid %d)", after, before.PID)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return !processAlive(before.PID) }, "old plugin pid %d stopped", before.PID)
	logs := env.logs.String()
	for _, want := range []string{"binary_version=1.0.0", "binary_version=2.0.0", "hot swap: traffic switched", "hot swap: old plugin stopped"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	t.Logf("sent %d deliveries, none failed, across the swap", sent.Load())
}

func TestReloadCommandSwaps(t *testing.T) {
	t.Parallel()
	env := startHost(t, []channel.Config{sinkChannel("TEST", nil)}, nil)
	before := statusOf(t, env.h, "TEST", "sink")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := env.h.Reload(ctx, "sink"); err != nil {
		t.Fatal(err)
	}
	after := statusOf(t, env.h, "TEST", "sink")
	if after.PID == before.PID || after.State != StateServing {
		t.Errorf("reload did not swap: before %+v after %+v", before, after)
	}
	if err := env.h.Reload(ctx, "nope"); !errors.Is(err, ErrUnknownPlugin) {
		t.Errorf("reload of unknown plugin: %v", err)
	}
}

func TestBrokenNewBinaryRolledBack(t *testing.T) {
	t.Parallel()
	broken := sinkVariant(t, "version=2.0.0-broken", "brokenHealth=true")
	env := startHost(t, []channel.Config{sinkChannel("TEST", nil)}, func(c *Config) {
		c.WatchInterval = 100 * time.Millisecond
	})
	before := statusOf(t, env.h, "TEST", "sink")
	installPlugin(t, broken, env.dir, "sink")
	testenv.Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(env.logs.String(), "hot swap failed; the old version keeps serving")
	}, "the watcher tried the new binary")
	// An explicit reload reports why.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := env.h.Reload(ctx, "sink")
	if err == nil || !strings.Contains(err.Error(), "health check failed") || !strings.Contains(err.Error(), "1.0.0") {
		t.Errorf("reload error = %v, want a failed health check naming the serving version", err)
	}
	after := statusOf(t, env.h, "TEST", "sink")
	if after.PID != before.PID || after.Version != "1.0.0" || after.State != StateServing {
		t.Errorf("old version not kept: before %+v after %+v", before, after)
	}
	batch := deliveries("a", 3)
	results, _, err := env.h.Send(context.Background(), "TEST", batch)
	if err != nil {
		t.Fatal(err)
	}
	allSent(t, batch, results)
	// Only the broken processes were started and stopped: nothing else runs.
	if n := strings.Count(env.logs.String(), "sink plugin starting"); n < 2 {
		t.Errorf("broken binary started %d times", n-1)
	}
}

func TestFailoverAndBack(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	down := filepath.Join(tmp, "a-down")
	recA, recB := filepath.Join(tmp, "a.jsonl"), filepath.Join(tmp, "b.jsonl")
	env := startHost(t, []channel.Config{{Name: "TEST", Providers: []channel.Provider{
		{Name: "b", Plugin: "sink", Priority: 2, Config: map[string]any{"record_file": recB}},
		{Name: "a", Plugin: "sink", Priority: 1, Config: map[string]any{"record_file": recA, "fail_file": down}},
	}}}, func(c *Config) {
		c.Breaker = BreakerPolicy{ConsecutiveFailures: 3, Cooldown: 300 * time.Millisecond}
		c.HealthInterval = time.Hour
	})
	send := func() (string, []sdk.Result) {
		t.Helper()
		results, provider, err := env.h.Send(context.Background(), "TEST", deliveries("x", 2))
		if err != nil {
			t.Fatalf("send: %v", err)
		}
		return provider, results
	}
	if p, _ := send(); p != "a" {
		t.Fatalf("healthy traffic went to %q, want a", p)
	}
	if err := os.WriteFile(down, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		p, results := send()
		if p != "a" || results[0].Outcome != sdk.OutcomeRetryable {
			t.Fatalf("send %d while a is down: %s %+v", i, p, results)
		}
	}
	if st := statusOf(t, env.h, "TEST", "a"); st.State != StateCircuitOpen {
		t.Errorf("a's state = %s, want circuit_open", st.State)
	}
	for i := 0; i < 5; i++ {
		p, results := send()
		if p != "b" || results[0].Outcome != sdk.OutcomeSent {
			t.Fatalf("send %d with a's circuit open: %s %+v", i, p, results)
		}
	}
	// A recovers: after the cooldown one probe goes to a and closes the circuit.
	if err := os.Remove(down); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		p, _ := send()
		return p == "a"
	}, "traffic back on a")
	for i := 0; i < 3; i++ {
		if p, _ := send(); p != "a" {
			t.Fatalf("after recovery send %d went to %s", i, p)
		}
	}
	if st := statusOf(t, env.h, "TEST", "a"); st.State != StateServing {
		t.Errorf("a's state = %s, want serving", st.State)
	}
	if len(readRecords(t, recB)) == 0 {
		t.Errorf("b recorded nothing")
	}
}

func TestReconfigure(t *testing.T) {
	t.Parallel()
	env := startHost(t, []channel.Config{sinkChannel("KEEP", nil), sinkChannel("DROP", nil), sinkChannel("CHANGE", map[string]any{"version": "one"})}, nil)
	keep := statusOf(t, env.h, "KEEP", "sink")
	drop := statusOf(t, env.h, "DROP", "sink")
	change := statusOf(t, env.h, "CHANGE", "sink")
	err := env.h.Reconfigure([]channel.Config{
		sinkChannel("KEEP", nil),
		sinkChannel("CHANGE", map[string]any{"version": "two"}),
		sinkChannel("ADD", nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := env.h.Channels(); !cmp.Equal(got, []string{"ADD", "CHANGE", "KEEP"}) {
		t.Errorf("channels = %v", got)
	}
	if st := statusOf(t, env.h, "KEEP", "sink"); st.PID != keep.PID {
		t.Errorf("unchanged provider restarted: %d → %d", keep.PID, st.PID)
	}
	if st := statusOf(t, env.h, "CHANGE", "sink"); st.PID == change.PID || st.State != StateServing {
		t.Errorf("changed provider not replaced: %+v", st)
	}
	if st := statusOf(t, env.h, "ADD", "sink"); st.State != StateServing {
		t.Errorf("added provider: %+v", st)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return !processAlive(drop.PID) && !processAlive(change.PID) }, "removed plugins stopped")
	if _, _, err := env.h.Send(context.Background(), "DROP", deliveries("a", 1)); !errors.Is(err, ErrUnknownChannel) {
		t.Errorf("send to removed channel: %v", err)
	}
	// A change that fails keeps the old provider.
	cur := statusOf(t, env.h, "CHANGE", "sink")
	err = env.h.Reconfigure([]channel.Config{sinkChannel("KEEP", nil), sinkChannel("ADD", nil),
		sinkChannel("CHANGE", map[string]any{"outcome": "sometimes"})})
	if err == nil || !strings.Contains(err.Error(), "old one keeps serving") {
		t.Errorf("bad reconfigure error = %v", err)
	}
	if st := statusOf(t, env.h, "CHANGE", "sink"); st.PID != cur.PID || st.State != StateServing {
		t.Errorf("old provider not kept: %+v, was %+v", st, cur)
	}
}

// TestReconfigureDrainsReplacedProvider changes a provider's config while
// a send is inside its plugin: the send completes on the old process, which
// is stopped only afterwards, and the new process takes the next sends.
func TestReconfigureDrainsReplacedProvider(t *testing.T) {
	t.Parallel()
	env := startHost(t, []channel.Config{sinkChannel("TEST", map[string]any{"delay": "500ms", "version": "one"})}, nil)
	old := statusOf(t, env.h, "TEST", "sink")
	type sendResult struct {
		results []sdk.Result
		err     error
	}
	done := make(chan sendResult, 1)
	batch := deliveries("a", 3)
	go func() {
		r, _, err := env.h.Send(context.Background(), "TEST", batch)
		done <- sendResult{r, err}
	}()
	p := env.h.channels["TEST"].providers[0]
	testenv.Eventually(t, 5*time.Second, func() bool {
		p.mu.Lock()
		inst := p.inst
		p.mu.Unlock()
		inst.mu.Lock()
		defer inst.mu.Unlock()
		return inst.active > 0
	}, "send in flight")
	if err := env.h.Reconfigure([]channel.Config{sinkChannel("TEST", map[string]any{"delay": "500ms", "version": "two"})}); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil {
		t.Fatalf("the send in flight during the reconfigure failed: %v", got.err)
	}
	allSent(t, batch, got.results)
	if st := statusOf(t, env.h, "TEST", "sink"); st.PID == old.PID || st.State != StateServing {
		t.Errorf("after reconfigure: %+v (old pid %d)", st, old.PID)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return !processAlive(old.PID) }, "the replaced plugin (pid %d) stops once drained", old.PID)
	next := deliveries("b", 2)
	results, _, err := env.h.Send(context.Background(), "TEST", next)
	if err != nil {
		t.Fatal(err)
	}
	allSent(t, next, results)
}

func TestCloseStopsPlugins(t *testing.T) {
	t.Parallel()
	env := startHost(t, []channel.Config{sinkChannel("A", nil), sinkChannel("B", nil)}, nil)
	var pids []int
	for _, s := range env.h.Status() {
		pids = append(pids, s.PID)
	}
	if err := env.h.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if processAlive(pid) {
			t.Errorf("plugin pid %d alive after Close", pid)
		}
	}
	if _, _, err := env.h.Send(context.Background(), "A", deliveries("a", 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("send after close: %v", err)
	}
}

// killPlugin SIGKILLs the plugin process pid. A pid of 0 (a provider with
// no process) fails the test: kill(0) would kill the test's whole process
// group.
func killPlugin(t *testing.T, pid int) {
	t.Helper()
	if pid <= 0 {
		t.Fatalf("no plugin process to kill (pid %d)", pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// processAlive reports whether pid runs (a zombie counts as gone).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// TestMain doubles as a fake daemon: TestNoOrphanWhenHostKilled runs the
// test binary again with HERALD_TEST_HELPER_HOST set to a plugin directory,
// and the process then hosts the sink, prints the plugin's pid and waits to
// be SIGKILLed.
func TestMain(m *testing.M) {
	SandboxMain()
	if dir := os.Getenv("HERALD_TEST_HELPER_HOST"); dir != "" {
		helperHost(dir)
		return
	}
	os.Exit(m.Run())
}

func helperHost(dir string) {
	h, err := New(Config{Dir: dir, Channels: []channel.Config{sinkChannel("TEST", nil)}, WatchInterval: -1})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Start(ctx); err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Printf("PID %d\n", h.Status()[0].PID)
	// The parent test kills this process long before the minute is up.
	time.Sleep(time.Minute)
	os.Exit(0)
}

func TestNoOrphanWhenHostKilled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	installPlugin(t, sinkVariant(t), dir, "sink")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "HERALD_TEST_HELPER_HOST="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pidCh := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), "PID "); ok {
				pid, _ := strconv.Atoi(s)
				pidCh <- pid
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	var pid int
	select {
	case pid = <-pidCh:
	case <-time.After(30 * time.Second):
		t.Fatal("helper host did not report its plugin's pid")
	}
	if !processAlive(pid) {
		t.Fatalf("plugin pid %d not running under the helper host", pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	testenv.Eventually(t, 10*time.Second, func() bool { return !processAlive(pid) }, "plugin pid %d exits after its host was SIGKILLed", pid)
}

// TestWebhookPluginAddsChannel drops the third-party webhook plugin (its
// own module, built only against sdk) into the plugin directory and
// configures a WEBHOOK channel: deliveries reach a local HTTP receiver,
// signed, with no change to the core.
func TestWebhookPluginAddsChannel(t *testing.T) {
	t.Parallel()
	const secret = "a-long-enough-webhook-secret"
	var mu sync.Mutex
	got := map[string]string{}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m := hmac.New(sha256.New, []byte(secret))
		m.Write(body)
		if r.Header.Get("X-Herald-Signature") != "sha256="+hex.EncodeToString(m.Sum(nil)) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var p struct {
			DeliveryID string `json:"delivery_id"`
			Body       string `json:"body"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got[p.DeliveryID] = p.Body
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()

	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "herald-plugin-webhook"), ".")
	build.Dir = filepath.Join(testenv.RepoRoot(t), "examples", "plugins", "webhook")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build webhook plugin: %v: %s", err, out)
	}
	if err := os.Chmod(filepath.Join(dir, "herald-plugin-webhook"), 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	h, err := New(Config{Dir: dir, WatchInterval: -1, Channels: []channel.Config{{
		Name:      "WEBHOOK",
		Providers: []channel.Provider{{Plugin: "webhook", Config: map[string]any{"url": rcv.URL + "/herald", "secret": secret}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if st := h.Status(); len(st) != 1 || st[0].State != StateServing {
		t.Fatalf("status = %+v", st)
	}
	batch := deliveries("w", 3)
	results, provider, err := h.Send(ctx, "WEBHOOK", batch)
	if err != nil {
		t.Fatal(err)
	}
	if provider != "webhook" {
		t.Errorf("provider = %q", provider)
	}
	allSent(t, batch, results)
	mu.Lock()
	defer mu.Unlock()
	for _, d := range batch {
		if got[d.DeliveryID] != d.Content.Body {
			t.Errorf("receiver got %q for %s, want %q", got[d.DeliveryID], d.DeliveryID, d.Content.Body)
		}
	}
}
