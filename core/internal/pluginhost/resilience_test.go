package pluginhost

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk"
	sdkhost "github.com/heraldhq/herald/sdk/host"
)

// TestUnhealthyProviderFailsOverAndBack: provider a reports unhealthy (its
// fail_file exists) while no send reaches it. Its failed health checks
// open its circuit, traffic goes to b, and no probe goes to a while it
// stays unhealthy, however long past the cooldown; once a's health check
// passes, the half-open probe brings traffic back to a.
func TestUnhealthyProviderFailsOverAndBack(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	down := filepath.Join(tmp, "a-down")
	recA, recB := filepath.Join(tmp, "a.jsonl"), filepath.Join(tmp, "b.jsonl")
	const cooldown = 300 * time.Millisecond
	env := startHost(t, []channel.Config{{Name: "TEST", Providers: []channel.Provider{
		{Name: "a", Plugin: "sink", Priority: 1, Config: map[string]any{"record_file": recA, "fail_file": down}},
		{Name: "b", Plugin: "sink", Priority: 2, Config: map[string]any{"record_file": recB}},
	}}}, func(c *Config) {
		c.Breaker = BreakerPolicy{ConsecutiveFailures: 3, Cooldown: cooldown}
		c.HealthInterval = 50 * time.Millisecond
	})
	send := func() string {
		t.Helper()
		batch := deliveries("x", 2)
		results, provider, err := env.h.Send(context.Background(), "TEST", batch)
		if err != nil {
			t.Fatalf("send: %v", err)
		}
		allSent(t, batch, results)
		return provider
	}
	if p := send(); p != "a" {
		t.Fatalf("healthy traffic went to %q, want a", p)
	}

	// a turns unhealthy. Nothing is sent: only its health checks can open
	// its circuit.
	if err := os.WriteFile(down, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var st ProviderStatus
	testenv.Eventually(t, 10*time.Second, func() bool {
		st = statusOf(t, env.h, "TEST", "a")
		return st.State == StateCircuitOpen
	}, "a's failed health checks open its circuit: %+v", &st)
	if !strings.Contains(st.LastError, "health: sink: fail_file exists") {
		t.Errorf("a's last error = %q, want the failed health check", st.LastError)
	}
	onA := len(readRecords(t, recA))
	// Keep sending until a has failed eight more health checks after the
	// two that opened the circuit: at least 8 health intervals (400ms),
	// more than the cooldown. Every send goes to b: no probe goes to a
	// provider whose health checks fail.
	testenv.Eventually(t, 20*time.Second, func() bool {
		if p := send(); p != "b" {
			t.Fatalf("send while a is unhealthy went to %q, want b", p)
		}
		return strings.Contains(env.logs.String(), "failed_checks=10")
	}, "a failed ten health checks")
	if n := len(readRecords(t, recA)); n != onA {
		t.Errorf("a received %d deliveries while its health checks failed, want none", n-onA)
	}
	if st := statusOf(t, env.h, "TEST", "a"); st.State != StateCircuitOpen {
		t.Errorf("a's state = %s while unhealthy, want circuit_open", st.State)
	}

	// a recovers: a passing health check lets the half-open probe through,
	// which closes the circuit.
	if err := os.Remove(down); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return send() == "a" }, "traffic back on a")
	for i := 0; i < 3; i++ {
		if p := send(); p != "a" {
			t.Fatalf("after recovery send %d went to %s", i, p)
		}
	}
	if st := statusOf(t, env.h, "TEST", "a"); st.State != StateServing {
		t.Errorf("a's state = %s, want serving", st.State)
	}
	logs := env.logs.String()
	for _, want := range []string{"provider unhealthy: circuit opened", "plugin reports its provider healthy again"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q", want)
		}
	}
}

// TestCancelledProbeDoesNotCloseCircuit cancels the half-open probe's
// context while the probe is inside the plugin: the circuit stays open
// (the probe says nothing about the provider), and the next send is the
// probe that decides.
func TestCancelledProbeDoesNotCloseCircuit(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	down, hold := filepath.Join(tmp, "down"), filepath.Join(tmp, "hold")
	env := startHost(t, []channel.Config{sinkChannel("TEST", map[string]any{"fail_file": down, "hold_file": hold})}, func(c *Config) {
		c.Breaker = BreakerPolicy{ConsecutiveFailures: 1, Cooldown: 200 * time.Millisecond}
		c.HealthInterval = time.Hour
	})
	if err := os.WriteFile(down, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	results, _, err := env.h.Send(context.Background(), "TEST", deliveries("a", 1))
	if err != nil || results[0].Outcome != sdk.OutcomeRetryable {
		t.Fatalf("send while down: %+v, %v", results, err)
	}
	if st := statusOf(t, env.h, "TEST", "sink"); st.State != StateCircuitOpen {
		t.Fatalf("state = %s after a failed send, want circuit_open", st.State)
	}
	// The provider is back, but the next send (the probe) will be held in
	// the plugin until its caller gives up.
	if err := os.Remove(down); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Cancel the probe once the plugin holds it.
		end := time.Now().Add(20 * time.Second)
		for time.Now().Before(end) {
			if _, err := os.Stat(hold + ".held"); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	var probeErr error
	testenv.Eventually(t, 20*time.Second, func() bool {
		_, _, probeErr = env.h.Send(ctx, "TEST", deliveries("p", 1))
		return !errors.Is(probeErr, ErrCircuitOpen)
	}, "the cooldown ends and a probe is let through")
	if !errors.Is(probeErr, context.Canceled) {
		t.Fatalf("probe error = %v, want context.Canceled", probeErr)
	}
	if _, err := os.Stat(hold + ".held"); err != nil {
		t.Fatalf("the probe never reached the plugin: %v", err)
	}
	if st := statusOf(t, env.h, "TEST", "sink"); st.State != StateCircuitOpen {
		t.Errorf("state = %s after a cancelled probe, want circuit_open (a cancelled probe must not close the circuit)", st.State)
	}
	// The next send probes at once (no new cooldown) and closes the circuit.
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	batch := deliveries("b", 2)
	results, _, err = env.h.Send(context.Background(), "TEST", batch)
	if err != nil {
		t.Fatalf("the send after the cancelled probe: %v", err)
	}
	allSent(t, batch, results)
	if st := statusOf(t, env.h, "TEST", "sink"); st.State != StateServing {
		t.Errorf("state = %s after a successful probe, want serving", st.State)
	}
}

// countLines counts the lines of s holding every one of subs.
func countLines(s string, subs ...string) int {
	n := 0
	for _, line := range strings.Split(s, "\n") {
		all := true
		for _, sub := range subs {
			all = all && strings.Contains(line, sub)
		}
		if all {
			n++
		}
	}
	return n
}

// TestRestartAfterRejectedSwapRunsLastGoodVersion: a hot swap rejects a
// broken new binary, which stays on disk; then the old version crashes.
// The restart runs the kept copy of the old version, not the rejected
// file; once a good new binary is installed it is swapped in as usual.
func TestRestartAfterRejectedSwapRunsLastGoodVersion(t *testing.T) {
	t.Parallel()
	broken := sinkVariant(t, "version=2.0.0-broken", "brokenHealth=true")
	v2 := sinkVariant(t, "version=2.0.0")
	env := startHost(t, []channel.Config{sinkChannel("TEST", nil)}, func(c *Config) {
		c.WatchInterval = 100 * time.Millisecond
	})
	before := statusOf(t, env.h, "TEST", "sink")
	disk := installPlugin(t, broken, env.dir, "sink")
	testenv.Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(env.logs.String(), "hot swap failed; the old version keeps serving")
	}, "the watcher tried the new binary")

	killPlugin(t, before.PID)
	var after ProviderStatus
	testenv.Eventually(t, 20*time.Second, func() bool {
		after = statusOf(t, env.h, "TEST", "sink")
		return after.State == StateServing && after.PID > 0 && after.PID != before.PID
	}, "the provider serves again after the crash: %+v", &after)
	if after.Version != "1.0.0" || after.SHA256 != before.SHA256 || after.Restarts != 1 {
		t.Errorf("after the crash: %+v, want version 1.0.0 (sha256 %s) restarted once", after, before.SHA256)
	}
	if after.Binary == disk || sha256File(t, after.Binary) != before.SHA256 {
		t.Errorf("restarted from %s, want the kept copy of the good binary", after.Binary)
	}
	for _, want := range []string{"serving the last good version 1.0.0 from its kept copy", "was rejected", "health check failed"} {
		if !strings.Contains(after.LastError, want) {
			t.Errorf("last error %q lacks %q", after.LastError, want)
		}
	}
	batch := deliveries("a", 3)
	results, _, err := env.h.Send(context.Background(), "TEST", batch)
	if err != nil {
		t.Fatal(err)
	}
	allSent(t, batch, results)
	logs := env.logs.String()
	if !strings.Contains(logs, "restarting the last good version from its kept copy") {
		t.Errorf("log does not say the restart ran the kept copy")
	}
	if n := countLines(logs, "sink plugin starting", "binary_version=2.0.0-broken"); n != 1 {
		t.Errorf("the broken binary was started %d times, want once (by the rejected swap)", n)
	}

	// A good new binary replaces the kept copy through a normal hot swap.
	kept := after.Binary
	installPlugin(t, v2, env.dir, "sink")
	testenv.Eventually(t, 20*time.Second, func() bool {
		after = statusOf(t, env.h, "TEST", "sink")
		return after.Version == "2.0.0" && after.Binary == disk
	}, "the new good binary serves from the plugin directory: %+v", &after)
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, err := os.Stat(kept)
		return errors.Is(err, os.ErrNotExist)
	}, "the kept copy of 1.0.0 (%s) is removed once 2.0.0 is the last good version", kept)
}

// TestRestartSkipsBrokenBinaryInstalledBeforeCrash: with the watcher off, a
// broken binary replaces the running one on disk, then the running one
// crashes. The restart runs the kept copy of the last good version and
// never starts the new file (a changed binary runs only after a reload or
// a hot swap).
func TestRestartSkipsBrokenBinaryInstalledBeforeCrash(t *testing.T) {
	t.Parallel()
	broken := sinkVariant(t, "version=2.0.0-broken", "brokenHealth=true")
	env := startHost(t, []channel.Config{sinkChannel("TEST", nil)}, nil)
	before := statusOf(t, env.h, "TEST", "sink")
	installPlugin(t, broken, env.dir, "sink")
	killPlugin(t, before.PID)
	var after ProviderStatus
	testenv.Eventually(t, 20*time.Second, func() bool {
		after = statusOf(t, env.h, "TEST", "sink")
		return after.State == StateServing && after.PID > 0 && after.PID != before.PID
	}, "the provider serves again after the crash: %+v", &after)
	if after.Version != "1.0.0" || after.SHA256 != before.SHA256 {
		t.Errorf("after the crash: %+v, want version 1.0.0", after)
	}
	logs := env.logs.String()
	if !strings.Contains(logs, "the plugin binary on disk changed; restarting the verified kept copy") {
		t.Errorf("log does not say the restart ran the kept copy instead of the changed binary")
	}
	if n := countLines(logs, "sink plugin starting", "binary_version=2.0.0-broken"); n != 0 {
		t.Errorf("the broken binary was started %d times, want never", n)
	}
	batch := deliveries("a", 2)
	results, _, err := env.h.Send(context.Background(), "TEST", batch)
	if err != nil {
		t.Fatal(err)
	}
	allSent(t, batch, results)
}

// TestRestartWithoutKeptCopyWaitsForGoodBinary: when the kept copy of the
// good version is lost (removed from the host's private directory behind
// its back), a restart after a rejected swap does not run the rejected
// binary: the provider waits (restarting, with the reason in its last
// error) until a new binary is installed.
func TestRestartWithoutKeptCopyWaitsForGoodBinary(t *testing.T) {
	t.Parallel()
	broken := sinkVariant(t, "version=2.0.0-broken", "brokenHealth=true")
	v2 := sinkVariant(t, "version=2.0.0")
	env := startHost(t, []channel.Config{sinkChannel("TEST", nil)}, func(c *Config) {
		c.Restart = channel.RetryPolicy{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}
	})
	before := statusOf(t, env.h, "TEST", "sink")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	installPlugin(t, broken, env.dir, "sink")
	if err := env.h.Reload(ctx, "sink"); err == nil {
		t.Fatal("reload to a broken binary succeeded")
	}
	// The running copy is the kept copy of the good version.
	if err := os.Remove(before.Executable); err != nil {
		t.Fatal(err)
	}
	killPlugin(t, before.PID)
	var st ProviderStatus
	testenv.Eventually(t, 20*time.Second, func() bool {
		st = statusOf(t, env.h, "TEST", "sink")
		return st.State == StateRestarting && strings.Contains(st.LastError, "not restarting") &&
			countLines(env.logs.String(), "plugin not restarted: its binary was rejected") >= 3
	}, "the provider waits without running the rejected binary: %+v", &st)
	if n := countLines(env.logs.String(), "sink plugin starting", "binary_version=2.0.0-broken"); n != 1 {
		t.Errorf("the broken binary was started %d times, want once (by the reload)", n)
	}
	if _, _, err := env.h.Send(context.Background(), "TEST", deliveries("a", 1)); !errors.Is(err, sdkhost.ErrPluginExited) {
		t.Errorf("send while waiting: %v, want sdkhost.ErrPluginExited (retry later)", err)
	}
	installPlugin(t, v2, env.dir, "sink")
	testenv.Eventually(t, 20*time.Second, func() bool {
		st = statusOf(t, env.h, "TEST", "sink")
		return st.State == StateServing && st.Version == "2.0.0"
	}, "the new binary serves: %+v", &st)
}

// TestChannelBreakerCooldown: a channel's rules set its breaker cooldown,
// shorter than the host's (an hour here): channel START from the start,
// channel RELOAD through a rules reload that keeps its providers running.
func TestChannelBreakerCooldown(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	chanCfg := func(name string, cooldown time.Duration) channel.Config {
		return channel.Config{Name: name, Breaker: channel.Breaker{Cooldown: cooldown}, Providers: []channel.Provider{
			{Name: "a", Plugin: "sink", Priority: 1, Config: map[string]any{"fail_file": filepath.Join(tmp, name+"-down")}},
			{Name: "b", Plugin: "sink", Priority: 2},
		}}
	}
	env := startHost(t, []channel.Config{chanCfg("START", 100*time.Millisecond), chanCfg("RELOAD", 0)}, func(c *Config) {
		c.Breaker = BreakerPolicy{ConsecutiveFailures: 1, Cooldown: time.Hour}
		c.HealthInterval = time.Hour
	})
	send := func(ch string) string {
		t.Helper()
		_, provider, err := env.h.Send(context.Background(), ch, deliveries("x", 1))
		if err != nil {
			t.Fatalf("send on %s: %v", ch, err)
		}
		return provider
	}
	// trip fails one send on ch's provider a, which opens its circuit, and
	// lets a recover.
	trip := func(ch string) {
		t.Helper()
		down := filepath.Join(tmp, ch+"-down")
		if err := os.WriteFile(down, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if p := send(ch); p != "a" {
			t.Fatalf("%s: the failing send went to %s, want a", ch, p)
		}
		if st := statusOf(t, env.h, ch, "a"); st.State != StateCircuitOpen {
			t.Fatalf("%s: a's state = %s, want circuit_open", ch, st.State)
		}
		if err := os.Remove(down); err != nil {
			t.Fatal(err)
		}
		if p := send(ch); p != "b" {
			t.Fatalf("%s: the send right after the circuit opened went to %s, want b", ch, p)
		}
	}
	trip("START")
	testenv.Eventually(t, 10*time.Second, func() bool { return send("START") == "a" }, "START: traffic back on a after the channel's cooldown")

	// RELOAD's a has the host's hour-long cooldown until the rules give
	// the channel one of its own.
	trip("RELOAD")
	pid := statusOf(t, env.h, "RELOAD", "a").PID
	if err := env.h.Reconfigure([]channel.Config{chanCfg("START", 100*time.Millisecond), chanCfg("RELOAD", 100*time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return send("RELOAD") == "a" }, "RELOAD: traffic back on a after the reloaded cooldown")
	if st := statusOf(t, env.h, "RELOAD", "a"); st.PID != pid {
		t.Errorf("RELOAD: a restarted by a cooldown change: pid %d → %d", pid, st.PID)
	}
}

// TestQuietProviderIsUpAfterCooldown: a circuit that opened during an
// outage closes only on a probe send, and a quiet daemon sends none, so
// the provider must count as up (readiness, ProviderStatus.Up) once the
// cooldown has passed and its health checks pass, without any traffic;
// while its health checks fail it stays down. The next send is the probe.
func TestQuietProviderIsUpAfterCooldown(t *testing.T) {
	t.Parallel()
	down := filepath.Join(t.TempDir(), "down")
	env := startHost(t, []channel.Config{sinkChannel("TEST", map[string]any{"fail_file": down})}, func(c *Config) {
		c.Breaker = BreakerPolicy{ConsecutiveFailures: 1, HealthFailures: 1, Cooldown: 300 * time.Millisecond}
		c.HealthInterval = 100 * time.Millisecond
	})
	if err := os.WriteFile(down, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The send fails, or finds the circuit open already when a health
	// check (every 100 ms) saw the outage first: either way the circuit
	// is open after it.
	results, _, err := env.h.Send(context.Background(), "TEST", deliveries("a", 1))
	failed := err == nil && len(results) == 1 && results[0].Outcome == sdk.OutcomeRetryable
	refused := err != nil && strings.Contains(err.Error(), "circuit open")
	if !failed && !refused {
		t.Fatalf("send while down: %+v, %v; want a retryable result or the circuit open", results, err)
	}
	if st := statusOf(t, env.h, "TEST", "sink"); st.State != StateCircuitOpen || st.Up() {
		t.Fatalf("after a failed send: state %s, up %v; want circuit_open, down", st.State, st.Up())
	}
	// Still down after the cooldown while the health checks fail.
	testenv.Eventually(t, 10*time.Second, func() bool {
		return strings.HasPrefix(statusOf(t, env.h, "TEST", "sink").LastError, "health:")
	}, "a health check fails while the provider is down")
	if st := statusOf(t, env.h, "TEST", "sink"); st.Up() {
		t.Fatalf("up while its health checks fail: %+v", st)
	}
	// The outage ends; nothing is sent.
	if err := os.Remove(down); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return statusOf(t, env.h, "TEST", "sink").Up() },
		"up within the cooldown plus a health interval, with no traffic")
	if st := statusOf(t, env.h, "TEST", "sink"); st.State != StateCircuitOpen || !st.ProbeReady {
		t.Fatalf("state %s probe_ready %v; want circuit_open, ready for the probe", st.State, st.ProbeReady)
	}
	// The next send is the probe, and closes the circuit.
	results, _, err = env.h.Send(context.Background(), "TEST", deliveries("b", 1))
	if err != nil || results[0].Outcome != sdk.OutcomeSent {
		t.Fatalf("probe: %+v, %v", results, err)
	}
	if st := statusOf(t, env.h, "TEST", "sink"); st.State != StateServing {
		t.Fatalf("state %s after the probe, want serving", st.State)
	}
}

// TestCrashRestartRunsTheVerifiedKeptCopy: a plugin that crashes is
// restarted from the kept copy of the binary that passed its launch, not
// from whatever is on disk now: a changed binary runs only after a reload
// (or a watched hot swap), as the README says.
func TestCrashRestartRunsTheVerifiedKeptCopy(t *testing.T) {
	t.Parallel()
	env := startHost(t, []channel.Config{sinkChannel("TEST", nil)}, nil) // WatchInterval -1: no hot swap
	first := statusOf(t, env.h, "TEST", "sink")
	if first.Version != "1.0.0" {
		t.Fatalf("first version %q", first.Version)
	}
	installPlugin(t, sinkVariant(t, "version=2.0.0"), env.dir, "sink")
	killPlugin(t, first.PID)
	var st ProviderStatus
	testenv.Eventually(t, 20*time.Second, func() bool {
		st = statusOf(t, env.h, "TEST", "sink")
		return st.State == StateServing && st.PID != 0 && st.PID != first.PID
	}, "the crashed plugin is restarted")
	if st.Version != "1.0.0" || st.SHA256 != first.SHA256 {
		t.Fatalf("restarted version %s (sha256 %s), want the kept 1.0.0 (%s)", st.Version, st.SHA256, first.SHA256)
	}
	if results, _, err := env.h.Send(context.Background(), "TEST", deliveries("a", 1)); err != nil || results[0].Outcome != sdk.OutcomeSent {
		t.Fatalf("send after the restart: %+v, %v", results, err)
	}
	// The reload runs the new binary.
	if err := env.h.Reload(context.Background(), "sink"); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, env.h, "TEST", "sink"); st.Version != "2.0.0" {
		t.Fatalf("after reload: version %s, want 2.0.0", st.Version)
	}
}
