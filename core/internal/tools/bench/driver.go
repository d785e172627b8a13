// Package bench is `herald bench`: it drives the real pipeline (producers
// enqueuing through sdk/producer in their own transactions, one or more
// `herald serve` processes, real plugin processes of the recording sink) on
// the local PostgreSQL and RabbitMQ, measures the raw ceilings of the same
// servers in the same run, and checks that every expected delivery was
// SENT exactly once.
package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/progress"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/sdk/producer"
	"github.com/heraldhq/herald/sql/outbox"
)

// Scenario is one run of the pipeline.
type Scenario struct {
	// Name labels the run in the report.
	Name string `json:"name"`
	// Events is how many events the producers enqueue. A soak run
	// (Window set) derives it from Deliveries and Backlog: the most its
	// producers can enqueue.
	Events int `json:"events"`
	// Recipients is how many recipients each event reaches.
	Recipients int `json:"recipients"`
	// Channels is how many channels each recipient gets.
	Channels int `json:"channels"`
	// Producers is the number of concurrent producers.
	Producers int `json:"producers"`
	// Rate paces the producers at this many events/s in all; 0 is unpaced.
	Rate float64 `json:"rate"`
	// Serve is the number of `herald serve` processes.
	Serve int `json:"serve"`
	// Duration caps the run: producers stop enqueuing and the run ends
	// (reporting what was missing) when it has passed.
	Duration time.Duration `json:"duration_ns"`
	// RLS is how row-level security binds the daemons' pipeline (the zero
	// value: as herald_worker, the daemon's default).
	RLS RLSMode `json:"rls,omitempty"`
	// Window, when not 0, makes the run a soak run: every Window
	// deliveries it samples the window's rate, the tables' sizes and the
	// daemons' memory (Result.Soak), until the sink has recorded
	// Deliveries. The producers keep enqueuing until that last window is
	// sampled, so that every window is measured under the same load, and
	// wait while more than Backlog deliveries are enqueued and not yet
	// recorded, so that the backlog stays bounded (they enqueue that many
	// before the daemons start, so that the first window does not build
	// it while measured); what they enqueued
	// beyond Deliveries is drained after the last window, in none, and
	// checked exactly once like the rest.
	// Source, when set, has the producers write into the outbox of a
	// database of their own (sql/outbox, `herald outbox install`), which
	// the daemons forward from through a source block, instead of calling
	// Herald's herald_enqueue: the same calls, the source stage between.
	Source bool `json:"source,omitempty"`
	// sourceURL is the source database of the run (set by setUp).
	sourceURL string

	// Warmup, when not 0, leaves the first Warmup events out of the
	// latencies (Latency, ToFanout, ToRecord, Tail), not out of the
	// throughput or the exactly-once check: a paced run starts on an
	// empty database whose plans change under it as it grows (the first
	// analyzes), which is not the steady state a latency target is about.
	// Result.WarmupLatency reports them apart.
	Warmup int `json:"warmup_events,omitempty"`

	Window     int `json:"window,omitempty"`
	Deliveries int `json:"deliveries,omitempty"`
	Backlog    int `json:"backlog,omitempty"`
	// MigrationLevel, when not 0, migrates the run's database only up to
	// this version instead of the latest, to measure an older schema with
	// the same binary.
	MigrationLevel int64 `json:"migration_level,omitempty"`
	// DirectoryWrites, when not 0, writes new recipients (with a device
	// and a membership each, in groups no event targets) into the run's
	// directory at this many rows/s while the run is measured: the relay
	// reads the directory while it is being written (directory.go).
	DirectoryWrites int `json:"directory_writes_per_sec,omitempty"`
	// Herald, when set, is the herald binary the run's daemons are
	// (Env.Herald otherwise): a build of an older commit, whose queries
	// match the older schema of MigrationLevel.
	Herald string `json:"herald,omitempty"`
	// Digest, when not 0, adds a digest rule of this window to the run's
	// event (every channel, per recipient and team; digest.go): the
	// deliveries are collected, and each window is sent as one digest
	// when it closes. The run ends when every window is flushed and sent.
	Digest time.Duration `json:"digest_window_ns,omitempty"`
}

// perEvent is how many deliveries the scenario expects per event.
func (s Scenario) perEvent() int { return s.Recipients * s.Channels }

// Env says where the servers and binaries are.
type Env struct {
	// AdminDatabaseURL connects to a database from which the benchmark may
	// CREATE and DROP its own database.
	AdminDatabaseURL string
	// AMQPURL is the broker; the benchmark declares its own exchange and
	// queues and deletes them afterwards.
	AMQPURL string
	// Herald is the herald binary to run as `herald serve`.
	Herald string
	// PluginDir holds herald-plugin-sink.
	PluginDir string
	// Keep keeps the database, configs and logs for inspection.
	Keep bool
	// Progress receives the progress bar; nil draws none.
	Progress io.Writer
	// Pprof exposes /debug/pprof on each daemon's admin listener.
	Pprof bool
	// Log receives one line per step.
	Log func(format string, args ...any)
}

// Result is what one scenario measured.
type Result struct {
	Scenario Scenario `json:"scenario"`
	// EventsEnqueued is how many events the producers committed.
	EventsEnqueued int `json:"events_enqueued"`
	// Expected is EventsEnqueued × deliveries per event.
	Expected int `json:"deliveries_expected"`
	// Elapsed runs from the first commit to the last SENT (a soak run:
	// from when its daemons were ready, the backlog filled before).
	Elapsed        time.Duration `json:"elapsed_ns"`
	EventsPerSec   float64       `json:"events_per_sec"`
	DeliveriesPerS float64       `json:"deliveries_per_sec"`
	// ProduceRate is the events/s the producers reached.
	ProduceRate float64 `json:"produce_events_per_sec"`
	// Latency is event commit → the plugin's Send returning.
	Latency LatencySummary `json:"latency"`
	// ToFanout is event commit → its delivery rows written by the relay;
	// ToRecord is delivery row written → its SENT outcome recorded (the
	// publisher, the broker, the listener and the plugin). Both come from
	// the rows' timestamps.
	ToFanout LatencySummary `json:"to_fanout"`
	ToRecord LatencySummary `json:"to_record"`
	// Tail is where the slowest 1 % of the trips (event commit → the
	// plugin's Send) spent their time, stage by stage.
	Tail TailSplit `json:"tail"`
	// WarmupLatency is event commit → the plugin's Send of the events
	// Scenario.Warmup left out of Latency (nil: none).
	WarmupLatency *LatencySummary `json:"warmup_latency,omitempty"`
	// ToHerald is, in a Source run, event commit (in the source) → the
	// event's row written in Herald's event_outbox by the source stage
	// (its created_at, the time of the forward's transaction): the
	// source stage's lag.
	ToHerald *LatencySummary `json:"to_herald,omitempty"`
	// Processes are the daemons and their plugins, with peak RSS.
	Processes []ProcPeak `json:"processes"`
	// DaemonPeakBytes is the largest peak RSS of one herald serve process.
	DaemonPeakBytes int64 `json:"daemon_peak_rss_bytes"`
	// PluginPeakBytes is the largest peak RSS of one plugin process.
	PluginPeakBytes int64 `json:"plugin_peak_rss_bytes"`
	// Check is the exactly-once verdict.
	Check Check `json:"check"`
	// RelayRLS is true when row-level security was active on deliveries
	// for the relay's role, so that it wrote them by INSERT instead of COPY.
	RelayRLS bool `json:"relay_rls_active"`
	// BenchCPU is the CPU time the benchmark process itself (producers,
	// progress, following the sink's records) used from the first enqueue
	// until every delivery was final, as a fraction of one core: what the
	// benchmark took from the pipeline it measures.
	BenchCPU float64 `json:"bench_cpu_cores"`
	// DaemonProcs is the GOMAXPROCS each daemon ran with (see daemonEnv).
	DaemonProcs int `json:"daemon_gomaxprocs"`
	// Admin lists each daemon's admin URL (pprof when enabled), for a run
	// that is being watched.
	Admin []string `json:"admin,omitempty"`
	// Dir holds the configs and daemon logs when Keep is set.
	Dir string `json:"dir,omitempty"`
	// DirectoryRows is how many directory rows Scenario.DirectoryWrites
	// wrote while the run was measured, DirectoryRowsPerS their rate.
	DirectoryRows     int64   `json:"directory_rows,omitempty"`
	DirectoryRowsPerS float64 `json:"directory_rows_per_sec,omitempty"`
	// Soak holds the windows of a soak run (Scenario.Window).
	Soak *SoakSummary `json:"soak,omitempty"`
	// Digest holds a digest run's figures (Scenario.Digest).
	Digest *DigestSummary `json:"digest,omitempty"`
}

// LatencySummary holds quantiles in milliseconds.
type LatencySummary struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// Check is the exactly-once verdict of one run.
type Check struct {
	// Expected deliveries; Rows in the database for the run's events.
	Expected int `json:"expected"`
	Rows     int `json:"rows"`
	Sent     int `json:"sent"`
	Failed   int `json:"failed"`
	// Pending counts rows neither SENT nor FAILED when the run ended.
	Pending int `json:"pending"`
	// SentAttempts counts attempt-log rows with outcome sent; more than one
	// per delivery is a duplicate in Herald's records.
	SentAttempts int `json:"sent_attempts"`
	// DupRecords counts delivery ids the sink received more than once.
	DupRecords int `json:"sink_duplicates"`
	// SinkRecords counts deliveries the sink received.
	SinkRecords int `json:"sink_records"`
	// OK is true when every expected delivery is SENT exactly once.
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

const (
	benchTenant    = "bench"
	benchEventType = "BENCH_EVENT"
)

// Run runs one scenario from an empty database to the exactly-once check,
// in steps: set up the run's database, directory, topology and rules;
// fill a soak run's backlog; start the daemons; measure (produce, follow
// the sink's records until every delivery is final, stop the daemons,
// take their memory peaks); and judge (the exactly-once check, the rates
// and the latencies).
func Run(ctx context.Context, env Env, sc Scenario) (res Result, err error) {
	if sc.Window > 0 {
		if err := checkSoakScenario(sc); err != nil {
			return res, err
		}
		sc.Events = soakEvents(sc)
	}
	res.Scenario = sc
	if err := checkScenario(sc); err != nil {
		return res, err
	}
	r := &pipelineRun{env: env, sc: sc, logf: env.Log, res: &res}
	if r.logf == nil {
		r.logf = func(string, ...any) {}
	}
	defer r.close()
	if err := r.setUp(ctx); err != nil {
		return res, err
	}
	if err := r.fillBacklog(ctx); err != nil {
		return res, err
	}
	if err := r.startDaemons(ctx); err != nil {
		return res, err
	}
	m, err := r.measure(ctx)
	if err != nil {
		return res, err
	}
	if err := r.judge(ctx, m); err != nil {
		return res, err
	}
	for _, d := range r.daemons {
		if d.exitErr() != nil {
			r.logf("%s: daemon %d exited: %v (log %s)", sc.Name, d.index, d.exitErr(), d.logPath)
		}
	}
	return res, nil
}

// checkSoakScenario checks what a soak run (Window set) needs.
func checkSoakScenario(sc Scenario) error {
	if sc.Deliveries < sc.Window || sc.Backlog < 1 || sc.Rate > 0 {
		return fmt.Errorf("bench: soak run %s: want 1 ≤ window (%d) ≤ deliveries (%d), a backlog ≥ 1 (%d) and no rate (%v)",
			sc.Name, sc.Window, sc.Deliveries, sc.Backlog, sc.Rate)
	}
	return nil
}

// checkScenario checks the counts and the row-level security mode of any
// run.
func checkScenario(sc Scenario) error {
	if sc.Events < 1 || sc.Recipients < 1 || sc.Channels < 1 || sc.Producers < 1 || sc.Serve < 1 {
		return errors.New("bench: events, recipients, channels, producers and serve must be at least 1")
	}
	if !sc.RLS.valid() {
		return fmt.Errorf("bench: %s", sc.RLS)
	}
	return nil
}

// pipelineRun is one Run under way: what its steps set up and share, and
// the cleanups that undo them, run in reverse order by close.
type pipelineRun struct {
	env  Env
	sc   Scenario
	logf func(format string, args ...any)
	res  *Result

	// Set up by setUp.
	dir   string // configs, the sink's records and the daemons' logs
	dbURL string
	pool  *pgxpool.Pool
	// srcPool is the producers' database: Herald's (pool), or a Source
	// run's own.
	srcPool   *pgxpool.Pool
	groups    int
	exchange  string
	channels  []string
	recordDir string

	// commits holds each event's commit time (Unix ns); enqueued counts
	// the events committed, filled those a soak run enqueued before its
	// daemons started.
	commits  []int64
	enqueued atomic.Int64
	filled   int

	daemons []*daemon
	// roots are the daemons' process ids.
	roots []int

	cleanups []func()
}

// onClose registers f to run when the run closes, before the cleanups
// registered earlier.
func (r *pipelineRun) onClose(f func()) { r.cleanups = append(r.cleanups, f) }

// close runs the cleanups, the latest first.
func (r *pipelineRun) close() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// setUp makes the run's directory, its database (seeded with the
// directory, row-level security as the scenario says), the names of its
// broker topology and its rules file.
func (r *pipelineRun) setUp(ctx context.Context) error {
	sc, env := r.sc, r.env
	sink := filepath.Join(env.PluginDir, "herald-plugin-sink")
	if _, err := os.Stat(sink); err != nil {
		return fmt.Errorf("bench: sink plugin %s: %w (build it with make bench-plugins)", sink, err)
	}
	id := fmt.Sprintf("%d_%d", time.Now().Unix(), os.Getpid())
	dir, err := os.MkdirTemp("", "herald-bench-")
	if err != nil {
		return err
	}
	r.dir = dir
	if env.Keep {
		r.res.Dir = dir
	} else {
		r.onClose(func() { os.RemoveAll(dir) })
	}

	// A database of the run's own.
	dbURL, pool, dropDB, err := heraldDatabase(ctx, env.AdminDatabaseURL, "herald_bench_"+id, sc.Producers+3, sc.MigrationLevel)
	if err != nil {
		return err
	}
	r.dbURL, r.pool = dbURL, pool
	if !env.Keep {
		r.onClose(func() { _ = dropDB() })
	}
	r.onClose(pool.Close)
	if sc.RLS == RLSOff {
		if err := disableRLS(ctx, pool); err != nil {
			return err
		}
	}
	if r.res.RelayRLS, err = relayRowSecurity(ctx, pool, sc.RLS); err != nil {
		return err
	}
	r.groups = seedGroups(sc)
	if err := seed(ctx, pool, sc, r.groups); err != nil {
		return err
	}
	r.srcPool = pool
	if sc.Source {
		srcURL, dropSrc, err := createDatabase(ctx, env.AdminDatabaseURL, "herald_bench_src_"+id)
		if err != nil {
			return err
		}
		if !env.Keep {
			r.onClose(func() { _ = dropSrc() })
		}
		pc, err := pgxpool.ParseConfig(srcURL)
		if err != nil {
			return err
		}
		pc.MaxConns = int32(sc.Producers + 2)
		src, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return err
		}
		r.onClose(src.Close)
		conn, err := src.Acquire(ctx)
		if err != nil {
			return err
		}
		_, err = conn.Conn().PgConn().Exec(ctx, outbox.InstallSQL).ReadAll()
		conn.Release()
		if err != nil {
			return fmt.Errorf("bench: install the outbox in the source database: %w", err)
		}
		r.srcPool, r.sc.sourceURL = src, srcURL
	}

	// Topology names of the run's own, removed afterwards.
	r.exchange = "herald.bench." + id
	r.channels = make([]string, sc.Channels)
	for i := range r.channels {
		r.channels[i] = fmt.Sprintf("BENCH%d", i+1)
	}
	if !env.Keep {
		r.onClose(func() { deleteTopology(env.AMQPURL, r.exchange, r.channels) })
	}
	r.recordDir = filepath.Join(dir, "records")
	if err := os.MkdirAll(r.recordDir, 0o755); err != nil {
		return err
	}
	rulesPath := filepath.Join(dir, "rules.hcl")
	return os.WriteFile(rulesPath, []byte(rulesFile(sc, r.channels, r.recordDir)), 0o600)
}

// fillBacklog has a soak run's producers fill the backlog before the
// daemons start, so that its first window, like every other, starts with
// the backlog built and sees the producers enqueue only what the daemon
// delivers (when they can keep up), not the backlog on top. Any other run
// enqueues nothing here.
func (r *pipelineRun) fillBacklog(ctx context.Context) error {
	sc := r.sc
	r.commits = make([]int64, sc.Events)
	if sc.Window == 0 {
		return nil
	}
	fill := sc
	fill.Events = sc.Backlog / sc.perEvent()
	if err := produce(ctx, r.srcPool, fill, r.groups, r.commits, 0, &r.enqueued, nil); err != nil {
		return fmt.Errorf("bench: %s: fill the backlog: %w", sc.Name, err)
	}
	r.filled = int(r.enqueued.Load())
	return nil
}

// startDaemons starts the scenario's herald serve processes and waits
// until each is ready.
func (r *pipelineRun) startDaemons(ctx context.Context) error {
	sc := r.sc
	r.onClose(func() {
		for _, d := range r.daemons {
			d.stop()
		}
	})
	for i := range sc.Serve {
		d, err := startDaemon(ctx, r.env, r.dir, i, r.dbURL, r.exchange, r.channels, sc)
		if err != nil {
			return err
		}
		r.daemons = append(r.daemons, d)
		r.res.Admin = append(r.res.Admin, d.adminURL)
	}
	for _, d := range r.daemons {
		if err := d.waitReady(ctx, 60*time.Second); err != nil {
			return err
		}
	}
	if r.env.Pprof {
		for _, line := range pprofLines(r.res.Admin) {
			r.logf("%s: %s", sc.Name, line)
		}
	}
	if sc.Window > 0 {
		r.logf("%s: %d daemon(s) ready (%s; the relay writes by %s); %d events enqueued before they started; enqueuing events × %d deliveries until %d are recorded, at most %d waiting",
			sc.Name, len(r.daemons), sc.RLS, relayWrite(r.res.RelayRLS), r.enqueued.Load(), sc.perEvent(), sc.Deliveries, sc.Backlog)
	} else {
		r.logf("%s: %d daemon(s) ready (%s; the relay writes by %s); enqueuing %d events × %d deliveries",
			sc.Name, len(r.daemons), sc.RLS, relayWrite(r.res.RelayRLS), sc.Events, sc.perEvent())
	}
	r.roots = make([]int, len(r.daemons))
	for i, d := range r.daemons {
		r.roots[i] = d.cmd.Process.Pid
	}
	return nil
}

// measured is what the measure step hands to judge.
type measured struct {
	// produced is how many events the producers committed; expected the
	// deliveries they make.
	produced, expected int
	// wallStart is when the producers started (after a soak run's fill).
	wallStart time.Time
	// waitErr is why the run ended before every delivery was final, if it
	// did.
	waitErr error
	tail    *recordTail
}

// measure produces the scenario's events while it follows the sink's
// records and the processes' memory, waits until every expected delivery
// is final in the database (or the run's Duration has passed), stops the
// daemons and takes their peaks.
func (r *pipelineRun) measure(ctx context.Context) (measured, error) {
	sc, res := r.sc, r.res
	watchCtx, stopWatch := context.WithCancel(ctx)
	// Peaks come from the kernel's high-water mark (VmHWM), so a slow
	// watch loses nothing of a process it sees at least once; each sample
	// scans the whole of /proc, which the run would pay for in CPU.
	rss := WatchRSS(watchCtx, rssEvery, r.roots...)

	// Produce, and follow the sink's records while it runs.
	deadline := time.Now().Add(sc.Duration)
	runCtx, cancelRun := context.WithDeadline(ctx, deadline)
	r.onClose(cancelRun)
	cpuStart, wallStart := selfCPU(), time.Now()
	tail := newRecordTail(r.recordDir)
	r.onClose(tail.close)
	// A soak run's watch holds and stops the producers; any other run's
	// producers enqueue sc.Events unheld.
	var soak *soakWatch
	var admit func(context.Context) bool
	total := sc.Events * sc.perEvent()
	if sc.Window > 0 {
		soak = watchSoak(watchCtx, r.pool, sc.Window, sc.Deliveries, sc.Backlog, wallStart, tail.count,
			func() int { return int(r.enqueued.Load()) * sc.perEvent() }, r.roots)
		admit, total = soak.admit, sc.Deliveries
	}
	if sc.Digest > 0 {
		// The sink records digests: at least one per recipient and channel.
		total = r.groups * sc.Recipients * sc.Channels
	}
	var produceErr error
	var produceWG sync.WaitGroup
	produceWG.Add(1)
	go func() {
		defer produceWG.Done()
		produceErr = produce(runCtx, r.srcPool, sc, r.groups, r.commits, int(r.enqueued.Load()), &r.enqueued, admit)
		if soak != nil {
			soak.producersStopped()
		}
	}()
	var dirRows atomic.Int64
	var dirErr error
	dirCtx, stopDir := context.WithCancel(runCtx)
	r.onClose(stopDir)
	var dirWG sync.WaitGroup
	if sc.DirectoryWrites > 0 {
		dirWG.Add(1)
		go func() {
			defer dirWG.Done()
			dirErr = directoryWrites(dirCtx, r.pool, sc.DirectoryWrites, &dirRows)
		}()
	}
	var bar *progress.Bar
	if r.env.Progress != nil {
		bar = progress.New(r.env.Progress, sc.Name, total, progressEvery, tail.count)
	}
	produceWG.Wait()
	m := measured{produced: int(r.enqueued.Load()), wallStart: wallStart, tail: tail}
	m.expected = m.produced * sc.perEvent()
	if produceErr != nil && !errors.Is(produceErr, context.DeadlineExceeded) {
		if bar != nil {
			bar.Stop()
		}
		stopWatch()
		return m, produceErr
	}
	// Wait for every expected delivery to reach a final state in the
	// database (SENT or FAILED), polling the sink's records for progress
	// and the database only when they say the run may be complete.
	if sc.Digest > 0 {
		m.waitErr = waitDigestsDone(runCtx, r.pool, tail, m.expected)
	} else {
		m.waitErr = waitDone(runCtx, r.pool, tail, m.expected)
	}
	doneAt := time.Now()
	stopDir()
	dirWG.Wait()
	if dirErr != nil {
		r.logf("%s: %v", sc.Name, dirErr)
	}
	res.DirectoryRows = dirRows.Load()
	if wall := doneAt.Sub(wallStart); wall > 0 {
		res.DirectoryRowsPerS = float64(res.DirectoryRows) / wall.Seconds()
	}
	if bar != nil {
		bar.Stop()
	}
	if wall := time.Since(wallStart); wall > 0 {
		res.BenchCPU = (selfCPU() - cpuStart).Seconds() / wall.Seconds()
		res.DaemonProcs = daemonProcs(sc.Serve)
	}
	rss.sample() // the last high-water marks, while every process is alive
	if soak != nil {
		res.Soak = soak.finish(m.expected, doneAt)
		res.Soak.MigrationLevel, res.Soak.Filled = sc.MigrationLevel, r.filled*sc.perEvent()
	}
	for _, d := range r.daemons {
		d.stop()
	}
	stopWatch()
	<-rss.Done()
	res.Processes = rss.Peaks()
	for _, p := range res.Processes {
		if slices.Contains(r.roots, p.PID) {
			res.DaemonPeakBytes = max(res.DaemonPeakBytes, p.PeakBytes)
		} else {
			res.PluginPeakBytes = max(res.PluginPeakBytes, p.PeakBytes)
		}
	}
	return m, nil
}

// judge checks that every expected delivery was SENT exactly once and
// computes the rates and latencies from the commit times, the sink's
// records and the rows' timestamps.
func (r *pipelineRun) judge(ctx context.Context, m measured) error {
	sc, res, produced := r.sc, r.res, m.produced
	res.EventsEnqueued = produced
	res.Expected = m.expected
	recs, err := m.tail.all()
	if err != nil {
		return err
	}
	var digest DigestSummary
	if sc.Digest > 0 {
		res.Check, digest, err = checkDigest(ctx, r.pool, sc, m.expected, recs, r.commits[:produced])
		res.Digest = &digest
	} else {
		res.Check, err = check(ctx, r.pool, m.expected, recs)
	}
	if err != nil {
		return err
	}
	if m.waitErr != nil {
		res.Check.OK = false
		res.Check.Detail = fmt.Sprintf("run cut off after %s: %s", sc.Duration, res.Check.Detail)
	}
	commits := r.commits
	firstCommit, lastCommit := int64(0), int64(0)
	for _, c := range commits[:produced] {
		if c == 0 {
			continue
		}
		if firstCommit == 0 || c < firstCommit {
			firstCommit = c
		}
		if c > lastCommit {
			lastCommit = c
		}
	}
	start := firstCommit
	if r.filled > 0 {
		// A soak run is timed from when its daemons were ready, and the
		// events it enqueued before, which waited for them to start, are
		// left out of the latencies.
		start = m.wallStart.UnixNano()
		clear(commits[:r.filled])
	}
	if w := min(sc.Warmup, produced); w > 0 && r.filled == 0 {
		// The warm-up's events: timed apart, then left out of the rest.
		warm := &Latencies{}
		for _, rec := range recs {
			i, ok := eventIndex(rec.EventID)
			if ok && i < w && commits[i] != 0 && rec.Attempt == 1 {
				warm.Add(time.Duration(rec.At - commits[i]))
			}
		}
		ws := summarize(warm)
		res.WarmupLatency = &ws
		clear(commits[:w])
	}
	lat := &Latencies{}
	var lastSent int64
	for _, rec := range recs {
		if rec.At > lastSent {
			lastSent = rec.At
		}
		i, ok := eventIndex(rec.EventID)
		if !ok || i >= produced || commits[i] == 0 || rec.Attempt != 1 {
			continue
		}
		lat.Add(time.Duration(rec.At - commits[i]))
	}
	if start > 0 && lastSent > start {
		res.Elapsed = time.Duration(lastSent - start)
		secs := res.Elapsed.Seconds()
		res.EventsPerSec = float64(produced) / secs
		res.DeliveriesPerS = float64(res.Check.Sent) / secs
	}
	if lastCommit > firstCommit {
		res.ProduceRate = float64(produced-1) / time.Duration(lastCommit-firstCommit).Seconds()
	}
	res.Latency = summarize(lat)
	if res.Digest != nil && res.Digest.ItemsPerSec > 0 {
		// The deliveries of a digest run are the items the relay wrote
		// (what a plain fanout sends); the digests follow a window later.
		res.DeliveriesPerS = res.Digest.ItemsPerSec
		res.EventsPerSec = res.Digest.ItemsPerSec / float64(sc.perEvent())
	}
	var stamps map[string]rowStamps
	res.ToFanout, res.ToRecord, stamps, err = stageLatencies(ctx, r.pool, commits[:produced])
	if err != nil {
		return err
	}
	var trips []trip
	for _, rec := range recs {
		i, ok := eventIndex(rec.EventID)
		st, found := stamps[rec.DeliveryID]
		if !ok || !found || i >= produced || commits[i] == 0 || rec.Attempt != 1 || st.claimed == 0 {
			continue
		}
		trips = append(trips, trip{commit: commits[i], claimed: st.claimed, written: st.written, sent: rec.At})
	}
	res.Tail = tailSplit(trips, 0.99)
	if !r.sc.Source {
		return nil
	}
	toHerald, err := forwardLatencies(ctx, r.pool, commits[:produced])
	res.ToHerald = &toHerald
	return err
}

// forwardLatencies is, per event, its commit in the source database →
// its row's created_at in Herald's event_outbox (the source stage's
// forwarding transaction).
func forwardLatencies(ctx context.Context, pool *pgxpool.Pool, commits []int64) (LatencySummary, error) {
	rows, err := pool.Query(ctx, `SELECT event_id, (extract(epoch FROM created_at) * 1e9)::bigint FROM event_outbox`)
	if err != nil {
		return LatencySummary{}, fmt.Errorf("bench: forward latencies: %w", err)
	}
	defer rows.Close()
	l := &Latencies{}
	for rows.Next() {
		var ev string
		var at int64
		if err := rows.Scan(&ev, &at); err != nil {
			return LatencySummary{}, err
		}
		if i, ok := eventIndex(ev); ok && i < len(commits) && commits[i] > 0 {
			l.Add(time.Duration(at - commits[i]))
		}
	}
	if err := rows.Err(); err != nil {
		return LatencySummary{}, err
	}
	return summarize(l), nil
}

// How often a run samples memory, redraws its progress and looks for the
// sink's new records. None of them is in what a run measures: peaks are
// the kernel's high-water marks, and throughput and latency come from the
// commit times and the sink's own timestamps.
const (
	rssEvery      = time.Second
	progressEvery = time.Second
	waitDoneEvery = 250 * time.Millisecond
)

// seedGroups is the number of groups events are spread over.
func seedGroups(sc Scenario) int { return min(sc.Events, 200) }

// seed creates the tenant and a directory of groups with Recipients
// members each.
func seed(ctx context.Context, pool *pgxpool.Pool, sc Scenario, groups int) error {
	if err := store.EnsureTenant(ctx, pool, benchTenant, "Benchmark"); err != nil {
		return err
	}
	dir := &directory.Directory{}
	for g := range groups {
		key := fmt.Sprintf("team:%d", g)
		dir.Groups = append(dir.Groups, directory.Group{Key: key, Type: "team"})
		for r := range sc.Recipients {
			uid := fmt.Sprintf("u%d-%d", g, r)
			dir.Recipients = append(dir.Recipients, directory.Recipient{UserID: uid, UserType: "STAFF",
				Email: uid + "@bench.invalid", Active: true})
			dir.Members = append(dir.Members, directory.Member{Group: key, UserID: uid, Role: "MEMBER"})
		}
	}
	if err := store.ImportDirectory(ctx, pool, benchTenant, dir); err != nil {
		return fmt.Errorf("bench: seed directory: %w", err)
	}
	return nil
}

func rulesFile(sc Scenario, channels []string, recordDir string) string {
	var b strings.Builder
	b.WriteString(`defaults {
  time_zone = "UTC"
  retry {
    max_attempts = 5
    initial      = "500ms"
    max          = "5s"
  }
}
`)
	for _, ch := range channels {
		fmt.Fprintf(&b, `channel %q {
  providers = [{ plugin = "sink", config = { record_file = %q, record_brief = true } }]
}
`, ch, filepath.Join(recordDir, ch+".jsonl"))
	}
	quoted := make([]string, len(channels))
	for i, ch := range channels {
		quoted[i] = strconv.Quote(ch)
	}
	fmt.Fprintf(&b, `event %q {
  audience {
    group = "team:{{ .payload.team }}"
  }
  mandatory   = [%s]
  quiet_hours = "ignore"
%s  inbox {
    title = "Benchmark event {{ .payload.n }}"
    body  = "Event {{ .payload.n }} for team {{ .payload.team }}"
  }
}
`, benchEventType, strings.Join(quoted, ", "), digestBlock(sc, quoted))
	return b.String()
}

// soakEvents is the most events a soak run's producers can enqueue: they
// are admitted only while the sink has recorded fewer than Deliveries and
// at most Backlog deliveries wait, and each producer may have one event
// admitted but not yet committed.
func soakEvents(sc Scenario) int {
	return (sc.Deliveries+sc.Backlog)/sc.perEvent() + sc.Producers + 1
}

// produce enqueues events number from to sc.Events-1 from sc.Producers
// goroutines, each event in its own transaction, recording each commit
// time. When admit is not nil, each producer asks it before taking the
// next event, and stops when it says no.
func produce(ctx context.Context, pool *pgxpool.Pool, sc Scenario, groups int, commits []int64, from int, done *atomic.Int64,
	admit func(context.Context) bool) error {
	var next atomic.Int64
	next.Store(int64(from))
	start := time.Now()
	errs := make(chan error, sc.Producers)
	var wg sync.WaitGroup
	for range sc.Producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if admit != nil && !admit(ctx) {
					if err := ctx.Err(); err != nil {
						errs <- err
					}
					return
				}
				i := int(next.Add(1) - 1)
				if i >= sc.Events {
					return
				}
				if sc.Rate > 0 {
					at := start.Add(time.Duration(float64(i) / sc.Rate * float64(time.Second)))
					if d := time.Until(at); d > 0 {
						t := time.NewTimer(d)
						select {
						case <-t.C:
						case <-ctx.Done():
							t.Stop()
							errs <- ctx.Err()
							return
						}
					}
				}
				if err := enqueueOne(ctx, pool, i, groups); err != nil {
					errs <- err
					return
				}
				commits[i] = time.Now().UnixNano()
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func enqueueOne(ctx context.Context, pool *pgxpool.Pool, i, groups int) error {
	payload := fmt.Appendf(nil, `{"team": %d, "n": %d}`, i%groups, i)
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// A business row would be written here, in the same transaction.
		return producer.Enqueue(ctx, tx, producer.Event{TenantID: benchTenant, EventID: eventID(i),
			Type: benchEventType, AggregateType: "bench", AggregateID: strconv.Itoa(i), Payload: payload})
	})
}

func eventID(i int) string { return "bench-" + strconv.Itoa(i) }

func eventIndex(id string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(id, "bench-"))
	return n, err == nil && strings.HasPrefix(id, "bench-")
}

// waitDone waits until every expected delivery is final in the database.
func waitDone(ctx context.Context, pool *pgxpool.Pool, tail *recordTail, expected int) error {
	tick := time.NewTicker(waitDoneEvery)
	defer tick.Stop()
	for {
		if tail.count() >= expected {
			var final int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE status = ANY($1)`, store.FinalStatuses).Scan(&final)
			if err == nil && final >= expected {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// waitDigestsDone waits until a digest run's items are all DIGESTED and
// every window's digest is final and recorded by the sink.
func waitDigestsDone(ctx context.Context, pool *pgxpool.Pool, tail *recordTail, items int) error {
	tick := time.NewTicker(waitDoneEvery)
	defer tick.Stop()
	for {
		if ok, err := digestDone(ctx, pool, tail.count(), items); err == nil && ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// sentOnce fills in c's sent attempts and the sink's records and returns
// what breaks "each of c.Sent SENT exactly once": a delivery with several
// sent attempts, one the plugin received twice, or records that do not
// match the SENT rows. what names the deliveries in the problems.
func sentOnce(ctx context.Context, pool *pgxpool.Pool, c *Check, recs []sinkRecord, what string) ([]string, error) {
	// The attempt history is delivery_attempt_log (a first-try success
	// has no delivery_attempts row, migration 0115); a baseline run's
	// database migrated before it has the table only.
	var log string
	if err := pool.QueryRow(ctx, `SELECT coalesce(to_regclass('public.delivery_attempt_log')::text, 'delivery_attempts')`).Scan(&log); err != nil {
		return nil, fmt.Errorf("bench: check attempts: %w", err)
	}
	var multi int
	err := pool.QueryRow(ctx, `SELECT count(*), count(*) - count(DISTINCT delivery_id)
		FROM `+log+` WHERE outcome = 'sent'`).Scan(&c.SentAttempts, &multi)
	if err != nil {
		return nil, fmt.Errorf("bench: check attempts: %w", err)
	}
	seen := make(map[string]int, len(recs))
	for _, r := range recs {
		if r.Outcome == "sent" {
			seen[r.DeliveryID]++
		}
	}
	c.SinkRecords = len(seen)
	for _, n := range seen {
		if n > 1 {
			c.DupRecords++
		}
	}
	var problems []string
	if multi > 0 || c.SentAttempts != c.Sent {
		problems = append(problems, fmt.Sprintf("%d sent attempts recorded for %d SENT deliveries", c.SentAttempts, c.Sent))
	}
	if c.DupRecords > 0 {
		problems = append(problems, fmt.Sprintf("%d %s reached the plugin more than once", c.DupRecords, what))
	}
	if c.SinkRecords != c.Sent {
		problems = append(problems, fmt.Sprintf("the plugin received %d %s, the database has %d SENT", c.SinkRecords, what, c.Sent))
	}
	return problems, nil
}

// check compares the database and the sink's records with what was
// expected.
func check(ctx context.Context, pool *pgxpool.Pool, expected int, recs []sinkRecord) (Check, error) {
	c := Check{Expected: expected}
	err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'SENT'),
			count(*) FILTER (WHERE status = 'FAILED') FROM deliveries`).Scan(&c.Rows, &c.Sent, &c.Failed)
	if err != nil {
		return c, fmt.Errorf("bench: check: %w", err)
	}
	c.Pending = c.Rows - c.Sent - c.Failed
	var problems []string
	if c.Rows != expected {
		problems = append(problems, fmt.Sprintf("%d delivery rows, want %d", c.Rows, expected))
	}
	if c.Sent != expected {
		problems = append(problems, fmt.Sprintf("%d SENT, want %d (%d FAILED, %d not final)", c.Sent, expected, c.Failed, c.Pending))
	}
	more, err := sentOnce(ctx, pool, &c, recs, "deliveries")
	if err != nil {
		return c, err
	}
	problems = append(problems, more...)
	c.OK = len(problems) == 0
	if c.OK {
		c.Detail = fmt.Sprintf("all %d deliveries SENT exactly once", expected)
	} else {
		c.Detail = strings.Join(problems, "; ")
	}
	return c, nil
}

// sinkRecord is the part of the sink plugin's record line the benchmark
// reads.
type sinkRecord struct {
	DeliveryID string `json:"delivery_id"`
	EventID    string `json:"event_id"`
	Attempt    int    `json:"attempt"`
	Outcome    string `json:"outcome"`
	At         int64  `json:"at"`
}

// recordTail follows the sink's record files, counting lines cheaply: it
// keeps each file open and reads only what was appended since the last
// count, into one buffer.
type recordTail struct {
	dir   string
	mu    sync.Mutex
	files map[string]*os.File
	buf   []byte
	n     int
}

func newRecordTail(dir string) *recordTail {
	return &recordTail{dir: dir, files: map[string]*os.File{}, buf: make([]byte, 64<<10)}
}

// count returns the number of complete record lines written so far. A
// line is complete when its newline is written, so counting newlines in
// what was read counts complete lines only, however a line was split
// between two reads.
func (t *recordTail) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	paths, _ := filepath.Glob(filepath.Join(t.dir, "*.jsonl"))
	for _, p := range paths {
		fh := t.files[p]
		if fh == nil {
			var err error
			if fh, err = os.Open(p); err != nil {
				continue
			}
			t.files[p] = fh
		}
		for {
			n, err := fh.Read(t.buf)
			t.n += bytes.Count(t.buf[:n], []byte{'\n'})
			if err != nil || n < len(t.buf) {
				break
			}
		}
	}
	return t.n
}

// close closes the files count keeps open.
func (t *recordTail) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for p, fh := range t.files {
		_ = fh.Close()
		delete(t.files, p)
	}
}

// all reads every record.
func (t *recordTail) all() ([]sinkRecord, error) {
	files, err := filepath.Glob(filepath.Join(t.dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []sinkRecord
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var r sinkRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				_ = fh.Close()
				return nil, fmt.Errorf("bench: %s: %w", f, err)
			}
			out = append(out, r)
		}
		err = sc.Err()
		_ = fh.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// daemon is one `herald serve` process.
type daemon struct {
	index    int
	cmd      *exec.Cmd
	apiURL   string
	adminURL string
	logPath  string
	logFile  *os.File
	done     chan struct{}
	err      error
	stopOnce sync.Once
}

// daemonEnv is the environment of each of serve daemons on this machine:
// each gets an equal share of its CPUs as GOMAXPROCS (its plugins get it
// too: GOMAXPROCS is on the plugin host's environment allow-list), as it
// would under a container's CPU limit, which Go reads itself.
// Left at Go's default, several daemons on a small machine each run as
// many scheduler threads as there are CPUs and spend the CPUs they share
// spinning and switching: on 2 CPUs, three daemons gave 8,500–9,700
// deliveries/s that way and 10,900–11,500 with one each. A GOMAXPROCS
// already in the environment wins.
func daemonEnv(serve int) []string {
	env := os.Environ()
	if serve <= 1 || os.Getenv("GOMAXPROCS") != "" {
		return env
	}
	return append(env, fmt.Sprintf("GOMAXPROCS=%d", daemonProcs(serve)))
}

// daemonProcs is the GOMAXPROCS daemonEnv gives each of serve daemons.
func daemonProcs(serve int) int {
	if v, err := strconv.Atoi(os.Getenv("GOMAXPROCS")); err == nil && v > 0 {
		return v
	}
	if serve <= 1 {
		return runtime.GOMAXPROCS(0)
	}
	return max(1, runtime.GOMAXPROCS(0)/serve)
}

// pprofLines is what --pprof prints (on stderr, through Env.Log) once the
// daemons are ready: each daemon's admin URL and where its profiles are,
// so that a run can be profiled while it goes.
func pprofLines(admin []string) []string {
	lines := make([]string, len(admin))
	for i, u := range admin {
		lines[i] = fmt.Sprintf("daemon %d: admin %s, pprof %s/debug/pprof/ (go tool pprof %s/debug/pprof/profile?seconds=30)", i, u, u, u)
	}
	return lines
}

func startDaemon(ctx context.Context, env Env, dir string, i int, dbURL, exchange string, channels []string, sc Scenario) (*daemon, error) {
	api, err := freeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := freeAddr()
	if err != nil {
		return nil, err
	}
	var queues strings.Builder
	for _, ch := range channels {
		fmt.Fprintf(&queues, `  queue %q {
    bindings    = ["*.%s"]
    prefetch    = 64
    concurrency = 4
  }
`, exchange+"."+ch, ch)
	}
	// A throw-away database on the benchmark's cluster: the API's and the
	// superadmin's pools log in as its owner (allow_owner_login), which
	// costs what logins of their own would.
	cfg := fmt.Sprintf(`database {
  url               = %q
  max_conns         = 12
  worker_role       = %q
  allow_owner_login = true
}
amqp {
  url      = %q
  exchange = %q
%s}
http {
  listen       = %q
  admin_listen = %q
  pprof        = %t
}
plugins {
  dir           = %q
  sandbox_write = [%q] # the sink's record files
}
rules = [%q]
log { level = "warn" }
%s`, dbURL, sc.RLS.workerRole(), env.AMQPURL, exchange, queues.String(), api, admin, env.Pprof, env.PluginDir,
		filepath.Join(dir, "records"), filepath.Join(dir, "rules.hcl"), sourceBlock(sc))
	cfgPath := filepath.Join(dir, fmt.Sprintf("herald-%d.hcl", i))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	d := &daemon{index: i, apiURL: "http://" + api, adminURL: "http://" + admin,
		logPath: filepath.Join(dir, fmt.Sprintf("herald-%d.log", i)), done: make(chan struct{})}
	d.logFile, err = os.Create(d.logPath)
	if err != nil {
		return nil, err
	}
	d.cmd = exec.Command(cmp.Or(sc.Herald, env.Herald), "serve", "--config", cfgPath)
	d.cmd.Env = daemonEnv(sc.Serve)
	d.cmd.Stdout, d.cmd.Stderr = d.logFile, d.logFile
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		_ = d.logFile.Close()
		return nil, fmt.Errorf("bench: start %s serve: %w", cmp.Or(sc.Herald, env.Herald), err)
	}
	go func() {
		d.err = d.cmd.Wait()
		_ = d.logFile.Close()
		close(d.done)
	}()
	return d, nil
}

// sourceBlock is the daemon file's source block of a Source run.
func sourceBlock(sc Scenario) string {
	if !sc.Source {
		return ""
	}
	return fmt.Sprintf("source \"bench\" {\n  url     = %q\n  tenants = [%q]\n}\n", sc.sourceURL, benchTenant)
}

func (d *daemon) waitReady(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-d.done:
			return fmt.Errorf("bench: herald serve %d exited before it was ready (%v); log: %s", d.index, d.err, tailOf(d.logPath))
		default:
		}
		resp, err := client.Get(d.apiURL + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: herald serve %d not ready after %s; log: %s", d.index, within, tailOf(d.logPath))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM and waits (SIGKILL after 20 s).
func (d *daemon) stop() {
	d.stopOnce.Do(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(20 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	})
}

func (d *daemon) exitErr() error {
	select {
	case <-d.done:
		var ee *exec.ExitError
		if errors.As(d.err, &ee) && ee.ProcessState != nil && !ee.Exited() {
			return nil // stopped by our signal
		}
		return d.err
	default:
		return nil
	}
}

func tailOf(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// heraldDatabase creates a database called name next to adminURL's
// database, applies Herald's migrations (up to level; every one when level
// is 0) and opens a pool of at most maxConns connections on it. The caller
// closes the pool; drop drops the database, closing its remaining
// connections by force. When it fails, nothing is left behind.
func heraldDatabase(ctx context.Context, adminURL, name string, maxConns int, level int64) (dbURL string, pool *pgxpool.Pool, drop func() error, err error) {
	dbURL, drop, err = createDatabase(ctx, adminURL, name)
	if err != nil {
		return "", nil, nil, err
	}
	if err := store.MigrateUpTo(ctx, dbURL, level); err != nil {
		return "", nil, nil, errors.Join(fmt.Errorf("bench: migrate: %w", err), drop())
	}
	pool, err = store.NewPool(ctx, dbURL, maxConns)
	if err != nil {
		return "", nil, nil, errors.Join(err, drop())
	}
	return dbURL, pool, drop, nil
}

// createDatabase creates name next to adminURL's database
// (store.CreateDatabase, which testenv.Postgres uses too) and returns its
// URL and a function that drops it. drop works after ctx is done and gives
// up after cleanupTimeout.
func createDatabase(ctx context.Context, adminURL, name string) (string, func() error, error) {
	dbURL, dropDB, err := store.CreateDatabase(ctx, adminURL, name)
	if err != nil {
		return "", nil, fmt.Errorf("bench: %w", err)
	}
	drop := func() error {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if err := dropDB(c); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		return nil
	}
	return dbURL, drop, nil
}

// deleteTopology removes the run's exchange and queues.
func deleteTopology(amqpURL, exchange string, channels []string) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	for _, c := range channels {
		_, _ = ch.QueueDelete(exchange+"."+c, false, false, false)
	}
	_ = ch.ExchangeDelete(exchange, false, false)
}

// ScratchDatabase creates an empty database called name next to adminURL's
// database and returns a pool on it and a function that closes the pool and
// drops the database.
func ScratchDatabase(ctx context.Context, adminURL, name string) (*pgxpool.Pool, func(), error) {
	dbURL, drop, err := createDatabase(ctx, adminURL, name)
	if err != nil {
		return nil, nil, err
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, nil, errors.Join(err, drop())
	}
	return pool, func() { pool.Close(); _ = drop() }, nil
}

// selfCPU returns the user and system CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func summarize(l *Latencies) LatencySummary {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return LatencySummary{Count: l.Count(), P50: ms(l.Quantile(0.50)), P95: ms(l.Quantile(0.95)),
		P99: ms(l.Quantile(0.99)), Max: ms(l.Max())}
}

// rowStamps are the database's times of one delivery, in Unix
// nanoseconds: claimed is when the relay's transaction that claimed its
// event began (the event's processed_at), written when the relay made the
// delivery row (the time in its UUIDv7 id, to the millisecond).
type rowStamps struct{ claimed, written int64 }

// stageLatencies splits the trip at the delivery row: commit → row written
// (the relay's clock, to the millisecond: the time in the UUIDv7
// delivery id; created_at is the event's since migration 0021) and row →
// SENT recorded (sent_at). A digest run's items count in the first only;
// its digests (no event of the run's) in the second. It also returns each
// first-attempt delivery's stamps, by id, for the tail split.
func stageLatencies(ctx context.Context, pool *pgxpool.Pool, commits []int64) (LatencySummary, LatencySummary, map[string]rowStamps, error) {
	rows, err := pool.Query(ctx, `SELECT d.delivery_id::text, d.event_id, ('x' || substr(replace(d.delivery_id::text, '-', ''), 1, 12))::bit(48)::bigint * 1000000,
			(extract(epoch FROM d.sent_at) * 1e9)::bigint, COALESCE((extract(epoch FROM e.processed_at) * 1e9)::bigint, 0)
		FROM deliveries d LEFT JOIN event_outbox e ON e.tenant_id = d.tenant_id AND e.event_id = d.event_id
		WHERE (d.status = 'SENT' AND d.attempts = 1) OR d.status = 'DIGESTED'`)
	if err != nil {
		return LatencySummary{}, LatencySummary{}, nil, fmt.Errorf("bench: stage latencies: %w", err)
	}
	defer rows.Close()
	fan, rec := &Latencies{}, &Latencies{}
	stamps := map[string]rowStamps{}
	for rows.Next() {
		var id, ev string
		var created, claimed int64
		var sent *int64 // NULL: a digest item, collected, not sent itself
		if err := rows.Scan(&id, &ev, &created, &sent, &claimed); err != nil {
			return LatencySummary{}, LatencySummary{}, nil, err
		}
		if i, ok := eventIndex(ev); ok && i < len(commits) && commits[i] > 0 {
			fan.Add(time.Duration(created - commits[i]))
		}
		if sent != nil {
			rec.Add(time.Duration(*sent - created))
			stamps[id] = rowStamps{claimed: claimed, written: created}
		}
	}
	if err := rows.Err(); err != nil {
		return LatencySummary{}, LatencySummary{}, nil, err
	}
	return summarize(fan), summarize(rec), stamps, nil
}

// trip is one delivery's way from its event's commit to the plugin, in
// Unix nanoseconds: the producer's commit, the relay's claim of the event,
// the delivery row made, and the plugin's Send.
type trip struct{ commit, claimed, written, sent int64 }

// TailSplit says where the slowest trips spent their time: of the trips
// at or above the quantile (the p99 of commit → the plugin's Send), the
// median of each stage.
type TailSplit struct {
	// Count is how many trips are at or above the quantile.
	Count int `json:"count"`
	// From is the quantile's trip time, in ms.
	From float64 `json:"from_ms"`
	// Wake is commit → the relay's transaction that claimed the event
	// began: the wake-up (NOTIFY, poll) and the wait for a relay.
	Wake float64 `json:"wake_ms"`
	// Relay is that transaction's start → the delivery row made: the
	// claim, the directory and the rules.
	Relay float64 `json:"relay_ms"`
	// Deliver is the row made → the plugin's Send: the relay's commit,
	// the handoff's publish, the broker and the listener's check.
	Deliver float64 `json:"deliver_ms"`
	// Fifths is the p99 (ms) of the trips of each fifth of the run, by
	// the event's commit: whether the tail is the start's (a database
	// growing from empty, its first analyzes) or the whole run's.
	Fifths []float64 `json:"p99_by_fifth_ms,omitempty"`
}

// tailSplit returns the split of the trips at or above the q-quantile of
// their whole time (the zero TailSplit when there are none).
func tailSplit(trips []trip, q float64) TailSplit {
	if len(trips) == 0 {
		return TailSplit{}
	}
	all := &Latencies{}
	for _, t := range trips {
		all.Add(time.Duration(t.sent - t.commit))
	}
	from := all.Quantile(q)
	wake, relay, deliver := &Latencies{}, &Latencies{}, &Latencies{}
	for _, t := range trips {
		if time.Duration(t.sent-t.commit) < from {
			continue
		}
		wake.Add(time.Duration(t.claimed - t.commit))
		relay.Add(time.Duration(t.written - t.claimed))
		deliver.Add(time.Duration(t.sent - t.written))
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	first, last := trips[0].commit, trips[0].commit
	for _, t := range trips {
		first, last = min(first, t.commit), max(last, t.commit)
	}
	var fifths [5]Latencies
	for _, t := range trips {
		i := 0
		if last > first {
			i = min(int(5*(t.commit-first)/(last-first)), 4)
		}
		fifths[i].Add(time.Duration(t.sent - t.commit))
	}
	byFifth := make([]float64, len(fifths))
	for i := range fifths {
		byFifth[i] = ms(fifths[i].Quantile(q))
	}
	return TailSplit{Count: wake.Count(), From: ms(from), Wake: ms(wake.Quantile(0.5)), Relay: ms(relay.Quantile(0.5)),
		Deliver: ms(deliver.Quantile(0.5)), Fifths: byFifth}
}
