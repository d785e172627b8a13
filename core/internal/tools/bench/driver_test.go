package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestRunSmallScenario runs the whole benchmark path at a tiny size: a
// database of its own, a real herald serve with the sink plugin, producers
// through sdk/producer, and the exactly-once check; then a tiny run under
// each other row-level security mode, which must be exactly once too and
// make the relay write the way the mode says.
func TestRunSmallScenario(t *testing.T) {
	broker := testenv.RabbitMQ(t)
	pluginDir := testenv.PluginBinaries(t, "sink")
	herald := testenv.BuildHerald(t, t.TempDir())
	env := Env{
		AdminDatabaseURL: testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL),
		AMQPURL:          broker.URL,
		Herald:           herald,
		PluginDir:        pluginDir,
		Log:              t.Logf,
	}
	sc := Scenario{Name: "small", Events: 40, Recipients: 3, Channels: 2, Producers: 3, Serve: 1, Duration: 2 * time.Minute}
	res, err := Run(context.Background(), env, sc)
	if err != nil {
		t.Fatal(err)
	}
	const want = 40 * 3 * 2
	if !res.Check.OK || res.Expected != want || res.Check.Sent != want || res.Check.SinkRecords != want {
		t.Fatalf("check: %+v (expected %d)", res.Check, res.Expected)
	}
	if res.EventsEnqueued != 40 || res.Latency.Count != want || res.DeliveriesPerS <= 0 || res.DaemonPeakBytes <= 0 {
		t.Fatalf("result: %d events, %d latencies, %.0f deliveries/s, daemon RSS %d",
			res.EventsEnqueued, res.Latency.Count, res.DeliveriesPerS, res.DaemonPeakBytes)
	}
	if res.ToFanout.Count != want || res.ToRecord.Count != want {
		t.Fatalf("stage latencies: %+v %+v", res.ToFanout, res.ToRecord)
	}
	rep := Report{Runs: []Result{res}}
	rep.Evaluate()
	if !rep.OK || rep.Err() != nil {
		t.Fatalf("report not OK (%v): %+v", rep.Err(), rep)
	}

	// herald_worker keeps COPY only where it has BYPASSRLS.
	bypass := workerBypassesRLS(t, env.AdminDatabaseURL)
	if res.RelayRLS == bypass {
		t.Errorf("%s: relay row security active = %t, but herald_worker BYPASSRLS = %t", RLSWorker, res.RelayRLS, bypass)
	}
	rep = Report{Runs: []Result{res}}
	for _, mode := range []struct {
		rls      RLSMode
		relayRLS bool
	}{{RLSPolicies, true}, {RLSOff, false}} {
		tiny := sc
		tiny.Name, tiny.Events, tiny.RLS = "tiny-"+string(mode.rls), 10, mode.rls
		res, err := Run(context.Background(), env, tiny)
		if err != nil {
			t.Fatalf("%s: %v", mode.rls, err)
		}
		if !res.Check.OK || res.Check.Sent != 10*3*2 {
			t.Errorf("%s: check: %+v", mode.rls, res.Check)
		}
		if res.RelayRLS != mode.relayRLS {
			t.Errorf("%s: relay row security active = %t, want %t", mode.rls, res.RelayRLS, mode.relayRLS)
		}
		rep.Runs = append(rep.Runs, res)
	}
	rep.Evaluate()
	if !rep.OK {
		t.Fatalf("report of the three modes not OK: %+v", rep)
	}
	// Ratios of runs this small mean nothing; that they are made does.
	if len(rep.RLSCosts) != 2 || rep.RLSCosts[0].Run != "small" || rep.RLSCosts[1].Run != "tiny-policies" {
		t.Errorf("RLS costs: %+v", rep.RLSCosts)
	}
}

// workerBypassesRLS reports whether herald_worker has BYPASSRLS on the
// server.
func workerBypassesRLS(t *testing.T, adminURL string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var bypass bool
	if err := conn.QueryRow(ctx, `SELECT rolbypassrls FROM pg_roles WHERE rolname = 'herald_worker'`).Scan(&bypass); err != nil {
		t.Fatal(err)
	}
	return bypass
}

// TestRecordTailCount checks that count sees complete lines only, in every
// file, as they are appended, including a line written in two pieces and
// appends larger than its buffer.
func TestRecordTailCount(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tail := newRecordTail(dir)
	defer tail.close()
	appendTo := func(name, s string) {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	line := `{"delivery_id":"d","event_id":"bench-1","attempt":1,"outcome":"sent","at":1}` + "\n"
	steps := []struct {
		file, write string
		want        int
	}{
		{"A.jsonl", "", 0},
		{"A.jsonl", line + line[:10], 1},
		{"B.jsonl", line, 2},
		{"A.jsonl", line[10:], 3},
		{"B.jsonl", strings.Repeat(line, 5000), 5003}, // several buffers
		{"other.log", "not\na\nrecord\n", 5003},
	}
	for i, s := range steps {
		appendTo(s.file, s.write)
		if got := tail.count(); got != s.want {
			t.Fatalf("step %d: count = %d, want %d", i, got, s.want)
		}
	}
	recs, err := tail.all()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5003 {
		t.Fatalf("all: %d records, want 5003", len(recs))
	}
}

// TestDaemonEnvSharesCPUs: several daemons on one machine each get their
// share of its CPUs as GOMAXPROCS; one daemon, or a GOMAXPROCS the caller
// set, is left alone.
func TestDaemonEnvSharesCPUs(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	cpus := runtime.GOMAXPROCS(0)
	has := func(env []string, kv string) bool { return slices.Contains(env, kv) }
	if env := daemonEnv(1); slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GOMAXPROCS=") && kv != "GOMAXPROCS=" }) {
		t.Fatalf("one daemon got a GOMAXPROCS: %v", env)
	}
	for _, serve := range []int{2, 3, 2 * cpus} {
		want := fmt.Sprintf("GOMAXPROCS=%d", max(1, cpus/serve))
		if env := daemonEnv(serve); !has(env, want) {
			t.Fatalf("%d daemons: environment lacks %s", serve, want)
		}
		if got := daemonProcs(serve); fmt.Sprintf("GOMAXPROCS=%d", got) != want {
			t.Fatalf("%d daemons: daemonProcs %d, want %s", serve, got, want)
		}
	}
	t.Setenv("GOMAXPROCS", "7")
	if got := daemonProcs(3); got != 7 {
		t.Fatalf("caller's GOMAXPROCS=7: daemonProcs %d", got)
	}
}

// TestPprofLines: --pprof names each daemon's admin URL and its pprof
// path, one line per daemon, in the daemons' order.
func TestPprofLines(t *testing.T) {
	got := pprofLines([]string{"http://127.0.0.1:4001", "http://127.0.0.1:4002"})
	want := []string{
		"daemon 0: admin http://127.0.0.1:4001, pprof http://127.0.0.1:4001/debug/pprof/ (go tool pprof http://127.0.0.1:4001/debug/pprof/profile?seconds=30)",
		"daemon 1: admin http://127.0.0.1:4002, pprof http://127.0.0.1:4002/debug/pprof/ (go tool pprof http://127.0.0.1:4002/debug/pprof/profile?seconds=30)",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pprofLines:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := pprofLines(nil); len(got) != 0 {
		t.Fatalf("no daemons: %v", got)
	}
}
