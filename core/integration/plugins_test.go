package integration

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// The tests in this file are the plugin host's "done when" list, run
// against a real `herald serve`: a plugin SIGKILLed mid-batch, a binary
// swapped under traffic, a broken binary rolled back, a checksum that does
// not match, failover between two providers, and a rules reload that
// replaces providers under traffic. Each one checks the database's record
// (deliveries, delivery_attempts) and what the sink plugin received.

// provider is one provider object of a channel block.
type provider struct {
	plugin   string // default "sink"
	name     string
	priority int
	checksum string
	config   map[string]string
}

func (p provider) hcl() string {
	var b strings.Builder
	fmt.Fprintf(&b, "{ plugin = %q", cmp.Or(p.plugin, "sink"))
	if p.name != "" {
		fmt.Fprintf(&b, ", name = %q", p.name)
	}
	if p.priority != 0 {
		fmt.Fprintf(&b, ", priority = %d", p.priority)
	}
	if p.checksum != "" {
		fmt.Fprintf(&b, ", checksum = %q", p.checksum)
	}
	keys := make([]string, 0, len(p.config))
	for k := range p.config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var kv []string
	for _, k := range keys {
		kv = append(kv, fmt.Sprintf("%s = %q", k, p.config[k]))
	}
	fmt.Fprintf(&b, ", config = { %s } }", strings.Join(kv, ", "))
	return b.String()
}

// channelSpec is one channel and its providers.
type channelSpec struct {
	name      string
	providers []provider
	// bestEffort channels are tried once: any failed attempt is FAILED.
	bestEffort bool
}

// pluginRules is a rules file whose RESERVATION_REQUESTED sends every
// channel to restaurant 5's three staff members. Persistent channels have
// up to maxAttempts attempts 200ms–1s apart.
func pluginRules(maxAttempts int, channels ...channelSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, `
defaults {
  time_zone = "UTC"
  retry {
    max_attempts = %d
    initial      = "200ms"
    max          = "1s"
  }
}
`, maxAttempts)
	var names []string
	for _, ch := range channels {
		var ps []string
		for _, p := range ch.providers {
			ps = append(ps, p.hcl())
		}
		fmt.Fprintf(&b, "\nchannel %q {\n  best_effort = %t\n  providers = [\n    %s,\n  ]\n}\n", ch.name, ch.bestEffort, strings.Join(ps, ",\n    "))
		names = append(names, strconv.Quote(ch.name))
	}
	fmt.Fprintf(&b, `
event "RESERVATION_REQUESTED" {
  shared = true
  audience {
    group = "restaurant:{{ .payload.restaurant_id }}"
    roles = ["MANAGER", "CHEF", "WAITER"]
  }
  mandatory   = [%s]
  quiet_hours = "ignore"
  inbox {
    title = "New reservation"
    body  = "{{ .payload.customer_name }}, {{ .payload.pax }} people"
  }
}
`, strings.Join(names, ", "))
	return b.String()
}

// newPluginEnv is an env whose daemon runs its plugins from a private
// directory holding sinkBin as herald-plugin-sink, so that a test may
// replace the binary under the running daemon.
func newPluginEnv(t *testing.T, sinkBin string) *env {
	t.Helper()
	e := newEnv(t, "sent")
	e.pluginDir = filepath.Join(e.dir, "plugins")
	if err := os.MkdirAll(e.pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.InstallPlugin(t, sinkBin, e.pluginDir, "sink")
	e.writeConfig()
	return e
}

// sinkRecord is one line of the sink's record file (the sink plugin's
// Record type).
type sinkRecord struct {
	DeliveryID    string `json:"delivery_id"`
	EventID       string `json:"event_id"`
	Channel       string `json:"channel"`
	Attempt       int    `json:"attempt"`
	PID           int    `json:"pid"`
	Provider      string `json:"provider"`
	Version       string `json:"version"`
	BinaryVersion string `json:"binary_version"`
	Outcome       string `json:"outcome"`
	TokenSHA256   string `json:"token_sha256"`
}

// records reads the sink's record file in the order it was written.
func (e *env) records() []sinkRecord {
	e.t.Helper()
	f, err := os.Open(e.record)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	var out []sinkRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r sinkRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			e.t.Fatalf("sink record %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// sentRecords groups the sink's "sent" records by delivery id.
func sentRecords(recs []sinkRecord) map[string][]sinkRecord {
	out := map[string][]sinkRecord{}
	for _, r := range recs {
		if r.Outcome == "sent" {
			out[r.DeliveryID] = append(out[r.DeliveryID], r)
		}
	}
	return out
}

// plugins asks the daemon's admin API for the state of every provider.
func (e *env) plugins() []pluginhost.ProviderStatus {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.admin+pluginhost.AdminPluginsPath, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("admin API: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("admin API: %s", resp.Status)
	}
	var st []pluginhost.ProviderStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		e.t.Fatalf("admin API: %v", err)
	}
	return st
}

// plugin returns the admin API's status of one channel's provider.
func (e *env) plugin(channel, provider string) pluginhost.ProviderStatus {
	e.t.Helper()
	st := e.plugins()
	for _, s := range st {
		if s.Channel == channel && s.Provider == provider {
			return s
		}
	}
	e.t.Fatalf("admin API lists no provider %s/%s: %+v", channel, provider, st)
	return pluginhost.ProviderStatus{}
}

// cli runs the herald binary against the daemon's admin API and returns
// its combined output. The CLI finds the admin token through the daemon
// config, as an operator's would.
func (e *env) cli(args ...string) (string, error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, heraldBinary(e.t), args...)
	cmd.Env = append(append(os.Environ(), e.extraEnv...), "HERALD_ADMIN_URL="+e.admin, "HERALD_CONFIG="+e.cfgPath, "HERALD_ADMIN_TOKEN_FILE=")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// traffic emits RESERVATION_REQUESTED events through the HTTP API in the
// background.
type traffic struct {
	e       *env
	prefix  string
	stop    chan struct{}
	once    sync.Once
	done    chan struct{}
	emitted atomic.Int64
	err     error
}

// startTraffic emits events prefix-0, prefix-1, ... one every interval
// until halted or max events are out.
func (e *env) startTraffic(prefix string, every time.Duration, max int) *traffic {
	tr := &traffic{e: e, prefix: prefix, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := range max {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, _, err := e.client().Emit(ctx, reservation(fmt.Sprintf("%s-%d", prefix, i)))
			cancel()
			if err != nil {
				tr.err = fmt.Errorf("emit %s-%d: %w", prefix, i, err)
				return
			}
			tr.emitted.Add(1)
			select {
			case <-tr.stop:
				return
			case <-tick.C:
			}
		}
	}()
	e.t.Cleanup(func() { tr.once.Do(func() { close(tr.stop) }); <-tr.done })
	return tr
}

// count is how many events are out so far.
func (tr *traffic) count() int { return int(tr.emitted.Load()) }

// waitFor waits until n events are out.
func (tr *traffic) waitFor(n int, deadline time.Duration) {
	tr.e.t.Helper()
	testenv.Eventually(tr.e.t, deadline, func() bool {
		select {
		case <-tr.done:
			if tr.err != nil {
				tr.e.t.Fatal(tr.err)
			}
			if tr.count() < n {
				tr.e.t.Fatalf("traffic ended after %d events, want %d", tr.count(), n)
			}
		default:
		}
		return tr.count() >= n
	}, "%d events emitted (now %d)", n, tr.count())
}

// halt stops the traffic and returns how many events went out.
func (tr *traffic) halt() int {
	tr.e.t.Helper()
	tr.once.Do(func() { close(tr.stop) })
	<-tr.done
	if tr.err != nil {
		tr.e.t.Fatal(tr.err)
	}
	return tr.count()
}

// eventIndex is the number in an event id "prefix-N".
func eventIndex(t *testing.T, id string) int {
	t.Helper()
	n, err := strconv.Atoi(id[strings.LastIndexByte(id, '-')+1:])
	if err != nil {
		t.Fatalf("event id %q: %v", id, err)
	}
	return n
}

// assertOneAttemptEach checks that no delivery needed a second attempt:
// nothing failed, not even once.
func (e *env) assertOneAttemptEach(want int) {
	e.t.Helper()
	if n := e.count(`SELECT count(*) FROM delivery_attempt_log`); n != want {
		rows, _ := e.db.Pool.Query(context.Background(),
			`SELECT outcome, error, count(*) FROM delivery_attempt_log WHERE outcome <> 'sent' GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 5`)
		var why []string
		for rows.Next() {
			var o, msg string
			var c int
			_ = rows.Scan(&o, &msg, &c)
			why = append(why, fmt.Sprintf("%d× %s %q", c, o, msg))
		}
		rows.Close()
		e.t.Fatalf("attempts = %d, want %d (one per delivery); others: %s", n, want, strings.Join(why, "; "))
	}
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

// until polls cond every 20ms until it holds; past deadline it fails the
// test with describe(), called then so that it tells the state at the end.
func (e *env) until(deadline time.Duration, cond func() bool, describe func() string) {
	e.t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			e.t.Fatalf("condition not met within %s: %s", deadline, describe())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// regexpMatch reports whether s matches the regular expression re.
func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// logHasLine reports whether one line of log holds every one of parts.
func logHasLine(log string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			if !strings.Contains(line, p) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// processAlive reports whether pid runs (a zombie counts as gone).
func processAlive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// TestPluginSIGKILLMidBatch kills the EMAIL plugin process with SIGKILL
// while a batch is inside it: the host restarts the plugin, the batch's
// deliveries go to RETRY and are sent by the new process, and every
// delivery ends SENT with exactly one successful attempt.
func TestPluginSIGKILLMidBatch(t *testing.T) {
	e := newPluginEnv(t, testenv.PluginVariant(t, "sink"))
	// While holdFile exists the EMAIL sink holds every batch it gets and
	// says so in holdFile.held: the test knows a batch is inside the plugin.
	holdFile := filepath.Join(e.dir, "hold")
	e.writeRules(pluginRules(8,
		channelSpec{name: "EMAIL", providers: []provider{{config: map[string]string{"record_file": e.record, "hold_file": holdFile}}}},
		channelSpec{name: "PUSH", providers: []provider{{config: map[string]string{"record_file": e.record}}}}))
	d := e.start()
	before := e.plugin("EMAIL", "sink")
	if before.State != pluginhost.StateServing || before.PID <= 0 {
		t.Fatalf("EMAIL plugin before the kill: %+v", before)
	}

	tr := e.startTraffic("kill", 100*time.Millisecond, 200)
	e.until(30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE channel = 'EMAIL' AND status = 'SENT'`) >= 6
	}, func() string { return "EMAIL deliveries sent before the kill: " + e.statusSummary() })
	if err := os.WriteFile(holdFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var held []string // delivery ids of the batches inside the plugin
	e.until(30*time.Second, func() bool {
		held = heldBy(t, holdFile+".held", before.PID)
		return len(held) > 0
	}, func() string { return "an EMAIL batch held inside the plugin: " + e.statusSummary() })
	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill plugin pid %d: %v", before.PID, err)
	}
	if err := os.Remove(holdFile); err != nil {
		t.Fatal(err)
	}
	killedAt := tr.count()

	e.until(30*time.Second, func() bool {
		st := e.plugin("EMAIL", "sink")
		return st.State == pluginhost.StateServing && st.PID > 0 && st.PID != before.PID
	}, func() string { return fmt.Sprintf("the host restarts the EMAIL plugin: %+v", e.plugins()) })
	after := e.plugin("EMAIL", "sink")
	if after.Restarts != 1 {
		t.Errorf("restarts = %d, want 1: %+v", after.Restarts, after)
	}
	if processAlive(before.PID) {
		t.Errorf("killed plugin pid %d still runs", before.PID)
	}
	// More traffic through the restarted plugin, then drain.
	tr.waitFor(killedAt+10, 30*time.Second)
	events := tr.halt()
	want := events * 6
	e.waitAllSent(want, 60*time.Second)
	e.assertExactlyOnce(want)

	// Every delivery of the killed batch has a failed attempt saying the
	// plugin exited during the send, then one successful attempt by the
	// restarted process (the sink's provider message id is
	// "sink-<pid>-<batch>-<index>").
	heldHere := strings.Join(heldBy(t, holdFile+".held", before.PID), ",")
	rows, err := e.db.Pool.Query(context.Background(), `SELECT d.delivery_id::text, d.status, d.provider_message_id,
			(SELECT count(*) FROM delivery_attempt_log a WHERE a.delivery_id = d.delivery_id AND a.outcome <> 'sent'
			 AND a.error LIKE '%plugin send: plugin exited%')
		FROM deliveries d WHERE d.delivery_id = ANY(string_to_array($1, ',')::uuid[])`, heldHere)
	if err != nil {
		t.Fatal(err)
	}
	var checked int
	for rows.Next() {
		var id, status, msgID string
		var exited int
		if err := rows.Scan(&id, &status, &msgID, &exited); err != nil {
			t.Fatal(err)
		}
		checked++
		if status != "SENT" || exited != 1 || !strings.HasPrefix(msgID, fmt.Sprintf("sink-%d-", after.PID)) {
			t.Errorf("held delivery %s: %s, %d attempts failed with the plugin's exit, provider message id %q; want SENT after one such failure by pid %d",
				id, status, exited, msgID, after.PID)
		}
	}
	rows.Close()
	if checked == 0 || checked != len(strings.Split(heldHere, ",")) {
		t.Fatalf("checked %d of the held deliveries %s", checked, heldHere)
	}
	t.Logf("%d events, %d deliveries; %d deliveries were inside the killed plugin", events, want, checked)

	// The sink saw every delivery sent once. (Only the killed process could
	// have recorded a delivery it never answered for; a second record of
	// such a delivery would be at-least-once towards the provider, which
	// the idempotency key covers.)
	sent := sentRecords(e.records())
	if len(sent) != want {
		t.Fatalf("sink recorded %d distinct deliveries as sent, want %d", len(sent), want)
	}
	for id, rs := range sent {
		var others int
		for _, r := range rs {
			if r.PID != before.PID {
				others++
			}
		}
		if len(rs) > 1 && others > 1 {
			t.Errorf("delivery %s recorded as sent %d times (%+v)", id, len(rs), rs)
		}
	}
	log := d.Log()
	for _, want := range []string{"plugin crashed; restarting", "sink holding batch"} {
		if !strings.Contains(log, want) {
			t.Errorf("herald log lacks %q", want)
		}
	}
}

// heldBy reads the sink's <hold_file>.held and returns the delivery ids of
// the batches pid held.
func heldBy(t *testing.T, path string, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var h struct {
			PID         int      `json:"pid"`
			DeliveryIDs []string `json:"delivery_ids"`
		}
		if line == "" || json.Unmarshal([]byte(line), &h) != nil {
			continue // a line being written
		}
		if h.PID == pid {
			ids = append(ids, h.DeliveryIDs...)
		}
	}
	return ids
}

// TestPluginHotSwapUnderTraffic replaces the sink binary on disk (v1 →
// v2, an atomic rename) while events flow, with plugins.watch on: the host
// starts v2, switches traffic, drains and stops v1, and no delivery fails
// even once.
func TestPluginHotSwapUnderTraffic(t *testing.T) {
	v1 := testenv.PluginVariant(t, "sink", "version=1.0.0")
	v2 := testenv.PluginVariant(t, "sink", "version=2.0.0")
	e := newPluginEnv(t, v1)
	e.watch = true // the swap follows the new file, without a reload
	e.writeConfig()
	sink := provider{config: map[string]string{"record_file": e.record, "delay": "50ms"}}
	e.writeRules(pluginRules(5, channelSpec{name: "EMAIL", providers: []provider{sink}}, channelSpec{name: "PUSH", providers: []provider{sink}}))
	d := e.start()
	old := map[string]pluginhost.ProviderStatus{}
	for _, ch := range []string{"EMAIL", "PUSH"} {
		st := e.plugin(ch, "sink")
		if st.Version != "1.0.0" || st.State != pluginhost.StateServing {
			t.Fatalf("%s before the swap: %+v", ch, st)
		}
		old[ch] = st
	}

	tr := e.startTraffic("swap", 50*time.Millisecond, 600)
	e.until(30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT'`) >= 30
	}, func() string { return "traffic flowing on v1: " + e.statusSummary() })

	testenv.InstallPlugin(t, v2, e.pluginDir, "sink")
	e.until(30*time.Second, func() bool {
		for _, ch := range []string{"EMAIL", "PUSH"} {
			if st := e.plugin(ch, "sink"); st.Version != "2.0.0" || st.State != pluginhost.StateServing {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("v2 serving both channels: %+v", e.plugins()) })
	// Events from here on are sent after the switch (the one being emitted
	// right now might not be).
	switched := tr.count() + 1
	tr.waitFor(switched+20, 30*time.Second)
	events := tr.halt()
	want := events * 6
	e.waitAllSent(want, 60*time.Second)
	e.assertExactlyOnce(want)
	e.assertOneAttemptEach(want)

	for ch, st := range old {
		now := e.plugin(ch, "sink")
		if now.PID == st.PID || now.Restarts != 0 {
			t.Errorf("%s after the swap: %+v (v1 was pid %d)", ch, now, st.PID)
		}
		testenv.Eventually(t, 30*time.Second, func() bool { return !processAlive(st.PID) }, "%s v1 (pid %d) stopped", ch, st.PID)
	}
	versions := map[string]int{}
	for id, rs := range sentRecords(e.records()) {
		if len(rs) != 1 {
			t.Errorf("delivery %s recorded as sent %d times", id, len(rs))
		}
		r := rs[0]
		versions[r.BinaryVersion]++
		if eventIndex(t, r.EventID) >= switched && r.BinaryVersion != "2.0.0" {
			t.Errorf("delivery %s of %s, emitted after the switch, was sent by %s", id, r.EventID, r.BinaryVersion)
		}
	}
	if versions["1.0.0"] == 0 || versions["2.0.0"] == 0 {
		t.Errorf("deliveries sent by version: %v, want both 1.0.0 and 2.0.0", versions)
	}
	t.Logf("%d events, %d deliveries, by version %v, none retried", events, want, versions)
	log := d.Log()
	for _, want := range []string{"binary_version=1.0.0", "binary_version=2.0.0", "hot swap: traffic switched",
		"old_version=1.0.0", "new_version=2.0.0", "hot swap: old plugin stopped"} {
		if !strings.Contains(log, want) {
			t.Errorf("herald log lacks %q", want)
		}
	}
}

// TestPluginBrokenBinaryRolledBack drops a new binary whose health check
// fails into the plugin directory under traffic, with plugins.watch on:
// the host tries it, stops it and keeps the old version serving; `herald
// plugins reload` says why; every delivery is sent by the old version,
// none fails.
func TestPluginBrokenBinaryRolledBack(t *testing.T) {
	v1 := testenv.PluginVariant(t, "sink", "version=1.0.0")
	broken := testenv.PluginVariant(t, "sink", "version=2.0.0-broken", "brokenHealth=true")
	e := newPluginEnv(t, v1)
	e.watch = true // the host tries the new file as soon as it is there
	e.writeConfig()
	sink := provider{config: map[string]string{"record_file": e.record, "delay": "20ms"}}
	e.writeRules(pluginRules(5, channelSpec{name: "EMAIL", providers: []provider{sink}}, channelSpec{name: "PUSH", providers: []provider{sink}}))
	d := e.start()
	old := map[string]pluginhost.ProviderStatus{}
	for _, ch := range []string{"EMAIL", "PUSH"} {
		old[ch] = e.plugin(ch, "sink")
	}

	tr := e.startTraffic("broken", 50*time.Millisecond, 600)
	e.until(30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT'`) >= 30
	}, func() string { return "traffic flowing on v1: " + e.statusSummary() })

	testenv.InstallPlugin(t, broken, e.pluginDir, "sink")
	testenv.Eventually(t, 30*time.Second, func() bool {
		return strings.Count(d.Log(), "hot swap failed; the old version keeps serving") >= 2
	}, "the host tried the new binary for both channels and kept the old one")

	// An explicit reload tries again and says why it failed.
	out, err := e.cli("plugins", "reload", "sink")
	if err == nil {
		t.Fatalf("herald plugins reload sink succeeded with a broken binary:\n%s", out)
	}
	for _, want := range []string{"health check failed", "2.0.0-broken", "version 1.0.0", "keeps serving"} {
		if !strings.Contains(out, want) {
			t.Errorf("herald plugins reload output lacks %q:\n%s", want, out)
		}
	}
	out, err = e.cli("plugins", "ls")
	if err != nil {
		t.Fatalf("herald plugins ls: %v\n%s", err, out)
	}
	for ch, st := range old {
		now := e.plugin(ch, "sink")
		if now.PID != st.PID || now.Version != "1.0.0" || now.State != pluginhost.StateServing || now.Restarts != 0 {
			t.Errorf("%s: old version not kept: before %+v, now %+v", ch, st, now)
		}
		if !strings.Contains(now.LastError, "health check failed") {
			t.Errorf("%s: last error %q does not say why the new binary was refused", ch, now.LastError)
		}
		row := fmt.Sprintf(`(?m)^sink\s+1\.0\.0\s+%s\s+sink\s+serving\s+%d\s`, ch, st.PID)
		if !regexpMatch(row, out) {
			t.Errorf("herald plugins ls has no row matching %s:\n%s", row, out)
		}
	}

	mark := tr.count()
	tr.waitFor(mark+20, 30*time.Second)
	events := tr.halt()
	want := events * 6
	e.waitAllSent(want, 60*time.Second)
	e.assertExactlyOnce(want)
	e.assertOneAttemptEach(want)
	pids := map[int]bool{old["EMAIL"].PID: true, old["PUSH"].PID: true}
	for id, rs := range sentRecords(e.records()) {
		if len(rs) != 1 || rs[0].BinaryVersion != "1.0.0" || !pids[rs[0].PID] {
			t.Errorf("delivery %s: sink records %+v, want one by v1 (pids %v)", id, rs, pids)
		}
	}
	log := d.Log()
	for _, want := range []string{"binary_version=2.0.0-broken", "sink: built broken (brokenHealth=true)"} {
		if !strings.Contains(log, want) {
			t.Errorf("herald log lacks %q", want)
		}
	}
	if strings.Contains(log, "hot swap: traffic switched") {
		t.Errorf("herald switched traffic to the broken binary")
	}
}

// TestPluginChecksumMismatchRefused pins EMAIL's plugin to a checksum the
// binary does not have and PUSH's to the right one: EMAIL's provider is
// refused (admin API, `herald plugins ls`, log), its deliveries wait in
// RETRY without being sent by anything, PUSH keeps serving; once the
// config pins the right checksum EMAIL's deliveries go out, once each.
func TestPluginChecksumMismatchRefused(t *testing.T) {
	e := newPluginEnv(t, testenv.PluginVariant(t, "sink"))
	good := sha256File(t, filepath.Join(e.pluginDir, "herald-plugin-sink"))
	wrong := strings.Repeat("0f", 32)
	pinned := func(sum string) provider {
		return provider{checksum: sum, config: map[string]string{"record_file": e.record}}
	}
	rulesWith := func(emailSum string) string {
		return pluginRules(30, channelSpec{name: "EMAIL", providers: []provider{pinned(emailSum)}}, channelSpec{name: "PUSH", providers: []provider{pinned(good)}})
	}
	e.writeRules(rulesWith(wrong))
	d := e.start()

	st := e.plugin("EMAIL", "sink")
	if st.State != pluginhost.StateRefused || st.PID != 0 || !strings.Contains(st.LastError, "checksum mismatch") ||
		!strings.Contains(st.LastError, good) || !strings.Contains(st.LastError, wrong) {
		t.Fatalf("EMAIL provider = %+v, want refused for a checksum mismatch naming both sums", st)
	}
	if st := e.plugin("PUSH", "sink"); st.State != pluginhost.StateServing || st.SHA256 != good {
		t.Fatalf("PUSH provider = %+v, want serving the pinned binary", st)
	}
	out, err := e.cli("plugins", "ls")
	if err != nil {
		t.Fatalf("herald plugins ls: %v\n%s", err, out)
	}
	if !regexpMatch(`(?m)^sink\s+-\s+EMAIL\s+sink\s+refused\s+-\s+-\s+0\s+\S+\s+checksum mismatch`, out) {
		t.Errorf("herald plugins ls does not show EMAIL refused for a checksum mismatch:\n%s", out)
	}
	if !logHasLine(d.Log(), "plugin refused", "channel=EMAIL", "checksum mismatch", good) {
		t.Errorf("herald log does not say the EMAIL plugin was refused for its checksum")
	}

	const events = 5
	for i := range events {
		if _, _, err := e.client().Emit(context.Background(), reservation(fmt.Sprintf("pin-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// PUSH is served; every EMAIL delivery waits as RETRY, tried again and
	// again without spending an attempt (no provider was handed it), and
	// nothing sends it.
	e.until(30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE channel = 'PUSH' AND status = 'SENT'`) == events*3 &&
			e.count(`SELECT count(*) FROM deliveries WHERE channel = 'EMAIL' AND status = 'RETRY' AND attempts = 0
				AND last_error LIKE '%no provider available%'`) == events*3 &&
			strings.Count(d.Log(), "no provider available") >= 2*events*3
	}, func() string {
		return "PUSH sent and every EMAIL delivery waiting for a provider: " + e.statusSummary()
	})
	if n := e.count(`SELECT count(*) FROM deliveries WHERE channel = 'EMAIL' AND status IN ('SENT', 'FAILED')`); n != 0 {
		t.Fatalf("%d EMAIL deliveries SENT or FAILED while the plugin is refused", n)
	}
	if n := e.count(`SELECT count(*) FROM delivery_attempt_log a JOIN deliveries d USING (delivery_id)
		WHERE d.channel = 'EMAIL' AND a.outcome = 'sent'`); n != 0 {
		t.Fatalf("%d EMAIL attempts sent while the plugin is refused", n)
	}
	for _, r := range e.records() {
		if r.Channel == "EMAIL" {
			t.Fatalf("the sink received EMAIL delivery %s while EMAIL's plugin is refused", r.DeliveryID)
		}
	}

	// The operator pins the right checksum: the rules reload starts the
	// provider and the waiting deliveries go out.
	e.writeRules(rulesWith(good))
	e.until(30*time.Second, func() bool {
		st := e.plugin("EMAIL", "sink")
		return st.State == pluginhost.StateServing && st.SHA256 == good
	}, func() string { return fmt.Sprintf("EMAIL serving after the checksum fix: %+v", e.plugins()) })
	e.waitAllSent(events*6, 60*time.Second)
	e.assertExactlyOnce(events * 6)
	sent := sentRecords(e.records())
	if len(sent) != events*6 {
		t.Fatalf("sink recorded %d distinct deliveries as sent, want %d", len(sent), events*6)
	}
	for id, rs := range sent {
		if len(rs) != 1 {
			t.Errorf("delivery %s recorded as sent %d times", id, len(rs))
		}
	}
}

// TestPluginFailoverAndBack gives EMAIL two providers, a (priority 1) and
// b (priority 2). While a fails (its fail_file exists) its circuit opens
// and traffic moves to b; once a recovers, the breaker's half-open probe
// succeeds and traffic returns to a. Every delivery is sent exactly once.
func TestPluginFailoverAndBack(t *testing.T) {
	e := newPluginEnv(t, testenv.PluginVariant(t, "sink"))
	down := filepath.Join(e.dir, "a-down")
	e.writeRules(pluginRules(10, channelSpec{name: "EMAIL", providers: []provider{
		{name: "b", priority: 2, config: map[string]string{"record_file": e.record}},
		{name: "a", priority: 1, config: map[string]string{"record_file": e.record, "fail_file": down}},
	}}))
	e.start()
	tr := e.startTraffic("fo", 100*time.Millisecond, 600)

	// sentBy returns the providers of the sent records from index from on.
	sentBy := func(from int) (map[string]int, int) {
		recs := e.records()
		by := map[string]int{}
		for _, r := range recs[min(from, len(recs)):] {
			if r.Outcome == "sent" {
				by[r.Provider]++
			}
		}
		return by, len(recs)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		by, _ := sentBy(0)
		return by["a"] >= 6 && by["b"] == 0
	}, "healthy traffic on a")

	// a fails: its circuit opens and b takes the traffic.
	if err := os.WriteFile(down, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, mark := sentBy(0)
	e.until(30*time.Second, func() bool {
		by, _ := sentBy(mark)
		return by["b"] >= 6 && e.plugin("EMAIL", "a").State == pluginhost.StateCircuitOpen
	}, func() string { return fmt.Sprintf("traffic on b with a's circuit open: %+v", e.plugins()) })
	if st := e.plugin("EMAIL", "b"); st.State != pluginhost.StateServing {
		t.Errorf("b = %+v, want serving", st)
	}

	// a recovers: after the cooldown one probe goes to a, succeeds, and
	// closes the circuit.
	if err := os.Remove(down); err != nil {
		t.Fatal(err)
	}
	_, mark = sentBy(0)
	e.until(45*time.Second, func() bool {
		by, _ := sentBy(mark)
		return by["a"] >= 1 && e.plugin("EMAIL", "a").State == pluginhost.StateServing
	}, func() string { return fmt.Sprintf("traffic back on a: %+v", e.plugins()) })
	back := tr.count() + 1
	tr.waitFor(back+10, 30*time.Second)
	events := tr.halt()
	want := events * 3
	e.waitAllSent(want, 60*time.Second)
	e.assertExactlyOnce(want)

	// The database says who sent what: both providers served, a failed
	// attempts went to RETRY and were sent later, and traffic after the
	// recovery is on a.
	byProvider := map[string]int{}
	rows, err := e.db.Pool.Query(context.Background(), `SELECT provider, count(*) FROM deliveries GROUP BY provider`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p string
		var n int
		if err := rows.Scan(&p, &n); err != nil {
			t.Fatal(err)
		}
		byProvider[p] = n
	}
	rows.Close()
	if byProvider["a"] == 0 || byProvider["b"] == 0 || byProvider["a"]+byProvider["b"] != want {
		t.Errorf("deliveries by provider = %v, want a and b adding up to %d", byProvider, want)
	}
	if n := e.count(`SELECT count(*) FROM delivery_attempt_log WHERE provider = 'a' AND outcome = 'retryable'`); n == 0 {
		t.Errorf("no attempt recorded a's failures")
	}
	var lateOnB []string
	for id, rs := range sentRecords(e.records()) {
		if len(rs) != 1 {
			t.Errorf("delivery %s recorded as sent %d times: %+v", id, len(rs), rs)
		}
		if eventIndex(t, rs[0].EventID) > back && rs[0].Provider != "a" && rs[0].Attempt == 1 {
			lateOnB = append(lateOnB, rs[0].EventID)
		}
	}
	if len(lateOnB) > 0 {
		slices.Sort(lateOnB)
		t.Errorf("events emitted after a recovered were sent by b: %v", lateOnB)
	}
	t.Logf("%d events, %d deliveries, by provider %v", events, want, byProvider)
}

// TestPluginRulesReloadUnderTraffic changes the sink's config in the rules
// while batches are inside the plugins: the host starts new processes with
// the new config, switches traffic, and lets the old processes finish the
// sends they hold before stopping them, so not one attempt fails, not even
// on the best-effort channel where a failed attempt is a lost delivery.
func TestPluginRulesReloadUnderTraffic(t *testing.T) {
	e := newPluginEnv(t, testenv.PluginVariant(t, "sink"))
	e.lease = "20s" // a held Send may take a while: give it 10s
	e.writeConfig()
	holdFile := filepath.Join(e.dir, "hold")
	rulesWith := func(label string) string {
		sink := provider{config: map[string]string{"record_file": e.record, "hold_file": holdFile, "version": label}}
		return pluginRules(5, channelSpec{name: "EMAIL", providers: []provider{sink}},
			channelSpec{name: "WEBSOCKET", providers: []provider{sink}, bestEffort: true})
	}
	e.writeRules(rulesWith("one"))
	d := e.start()
	old := map[string]pluginhost.ProviderStatus{}
	for _, ch := range []string{"EMAIL", "WEBSOCKET"} {
		old[ch] = e.plugin(ch, "sink")
	}
	tr := e.startTraffic("reload", 50*time.Millisecond, 600)
	e.until(30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT'`) >= 20
	}, func() string { return "traffic flowing: " + e.statusSummary() })

	// Both old processes hold a batch while the rules change.
	if err := os.WriteFile(holdFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	heldOld := map[string]bool{}
	e.until(30*time.Second, func() bool {
		for _, st := range old {
			for _, id := range heldBy(t, holdFile+".held", st.PID) {
				heldOld[id] = true
			}
			if len(heldBy(t, holdFile+".held", st.PID)) == 0 {
				return false
			}
		}
		return true
	}, func() string { return "a batch held inside each old process: " + e.statusSummary() })
	e.writeRules(rulesWith("two"))
	e.until(30*time.Second, func() bool {
		for ch, st := range old {
			if now := e.plugin(ch, "sink"); now.PID == st.PID || now.State != pluginhost.StateServing {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("new processes serving the new config: %+v", e.plugins()) })
	for ch, st := range old {
		if !processAlive(st.PID) {
			t.Fatalf("%s: the old process (pid %d) was stopped while it held a batch", ch, st.PID)
		}
	}
	if err := os.Remove(holdFile); err != nil {
		t.Fatal(err)
	}
	switched := tr.count() + 1
	tr.waitFor(switched+10, 30*time.Second)
	events := tr.halt()
	want := events * 6
	e.waitAllSent(want, 60*time.Second)
	e.assertExactlyOnce(want)
	e.assertOneAttemptEach(want)
	for ch, st := range old {
		testenv.Eventually(t, 30*time.Second, func() bool { return !processAlive(st.PID) }, "%s: the old process (pid %d) stopped", ch, st.PID)
	}
	labels := map[string]int{}
	oldPIDs := map[int]bool{old["EMAIL"].PID: true, old["WEBSOCKET"].PID: true}
	for id, rs := range sentRecords(e.records()) {
		if len(rs) != 1 {
			t.Errorf("delivery %s recorded as sent %d times", id, len(rs))
		}
		labels[rs[0].Version]++
		if heldOld[id] && !oldPIDs[rs[0].PID] {
			t.Errorf("delivery %s, held by an old process during the reload, was sent by pid %d", id, rs[0].PID)
		}
		if eventIndex(t, rs[0].EventID) >= switched && rs[0].Version != "two" {
			t.Errorf("delivery %s of %s, emitted after the switch, was sent with config %q", id, rs[0].EventID, rs[0].Version)
		}
	}
	if labels["one"] == 0 || labels["two"] == 0 {
		t.Errorf("deliveries sent by config label: %v, want both one and two", labels)
	}
	if !strings.Contains(d.Log(), "stopping provider removed or changed by new config") {
		t.Errorf("herald log does not say it replaced the providers")
	}
	t.Logf("%d events, %d deliveries, %d held by the old processes across the reload, by config %v, none retried",
		events, want, len(heldOld), labels)
}
