package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/tools/bench"
)

func init() {
	commands = append(commands, newBenchCmd)
}

type benchFlags struct {
	scenario   string
	events     int
	recipients int
	channels   int
	producers  int
	rate       float64
	serve      int
	duration   time.Duration
	json       bool
	keep       bool
	pprof      bool
	noCeilings bool
	dbURL      string
	amqpURL    string
	pluginDir  string
	rabbitN    int
	copyRows   int
	ceilEvents int
	enqEvents  int
	adminRows  int
	adminReqs  int
	inbox      bench.InboxScenario
	cpuProfile string
	deliveries int
	window     int
	backlog    int
	baseline   int64
	baseHerald string
	directory  bench.DirectoryScenario
	dirWrites  int
	dirAPI     bench.DirectoryAPIScenario
	dirFanout  bool
	// floorFanout and floorSingle are the events of the database floor's
	// fanout and single shapes.
	floorFanout int
	floorSingle int
	// digestWindow and digestRcpts shape the digest scenario.
	digestWindow time.Duration
	digestRcpts  int
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the pipeline end to end against the raw speed of the same servers",
		Long: `bench drives the real pipeline on the local PostgreSQL and RabbitMQ: it creates a
database of its own, seeds a directory, starts --serve herald serve processes with
the recording sink plugin, enqueues events through sdk/producer (one transaction
per event), and reports events/s, deliveries/s, latency from event commit to the
plugin's Send returning, and peak RSS of every process. In the same run it measures
the servers' raw ceilings (RabbitMQ persistent publish with pipelined confirms plus
consume; PostgreSQL COPY) and what the single run's producers alone commit with no
daemon running, and prints throughput as a ratio to them. It also measures, in one
database, what those producers commit when they write each event by a direct INSERT
into event_outbox and by herald_enqueue as Herald's login (one pool for both: only the
statement differs), and by herald_enqueue as a producer login (--enqueue-events each,
in twenty alternating rounds, with the PostgreSQL backends' CPU per event when the
server is local; targets: both within 10 % of the direct INSERT). At the end it
checks that every expected delivery is SENT exactly once.

--scenario all (the default) runs the standard suite:
  floor    the database floor of the fanout and single shapes (below), before
           the pipeline runs
  fanout   10 recipients × 3 channels, unpaced; the pipeline runs as herald_worker
  fanout-rls-policies   the fanout run with database.worker_role = "": the
           pipeline runs as the tables' owner, bound by the row-level security
           policies (the relay writes deliveries by INSERT, not COPY)
  fanout-no-rls   the fanout run on a database with row-level security
           disabled on every table: the baseline of the "RLS cost" lines
  latency  10 recipients × 3 channels at half the fanout run's rate: about 20 s
           measured after about 10 s of warm-up (the database growing from
           empty), whose latencies are reported apart
  single   1 recipient × 1 channel, unpaced
  scale-2, scale-3   the fanout run with 2 and 3 herald serve processes
  admin    the superadmin API benchmark (below)
  inbox    the notification centre benchmark (below; about a minute)
  soak     the fanout shape into one database until --deliveries (below; a
           few minutes)
--scenario soak runs the soak benchmark only: the fanout shape (10 recipients
× 3 channels) until the sink has recorded --deliveries deliveries
(--deliveries 5000000 for a long run; the cap is --duration or an hour,
whichever is longer), reporting every --soak-window deliveries that window's
deliveries/s, the hot tables' and their indexes' sizes, live and dead
tuples, updates and HOT updates, and the daemon's RSS, and the ratio of the
last window's rate to the first's (target ≥ 0.9). The producers are unpaced
but wait while more than --soak-backlog deliveries are enqueued and not yet
recorded (they enqueue that many before the daemons start, so the first
window starts with the backlog built like the others), and keep enqueuing
until the last window is sampled, so every window is measured under the
same load; the backlog they leave is drained after the last window, in
none, and checked exactly once like the rest. --soak-baseline N runs it
first on a database migrated only up to migration N, then on the latest
schema, back to back (both loaded the same way);
--soak-baseline-herald names the herald binary of the first run's daemons
(one built from a commit of that schema: this binary's queries may need
the latest).
--scenario floor runs the database floor only (with the ceilings): for the
fanout shape (10 recipients × 3 channels, --floor-fanout-events) and the single
shape (1 × 1, --floor-single-events), with no broker and no plugin, the
pipeline's own code in this process against a migrated database of its own as
herald_worker: the producers enqueue as the runs' producers do, the relay
(the daemon's relay settings, the run's rules) writes notifications,
deliveries, counters and handoff rows, a stand-in for the handoff deletes the
handoff rows and hands each batch's messages straight to the listener's code,
which checks, records (store.RecordOutcomes, the sink's MaxBatch) and releases
them with a plugin stand-in that answers sent at once; every expected delivery
must end SENT exactly once. It reports events/s and deliveries/s, the row
writes per delivery of every table (pg_stat_user_tables), and every run's
deliveries/s as a ratio to the floor of its shape (÷floor; target: fanout ≥
0.80×).
--scenario rls runs the three fanout runs only.
--scenario admin runs the superadmin API benchmark only: --admin-rows
notifications in a database of its own, the real API served in-process, and
--admin-requests requests of each of a fixed mix of filtered list requests
(p50/p95/p99 per shape, target p99 < 50 ms), plus the stats endpoint. It
measures no ceilings.
--scenario inbox runs the notification centre benchmark only: --inbox-rows
notifications (some shared) of --inbox-users users in a database of its own,
counters to match, a token per user and the real API served in-process; first
one reader alone (service times), then --inbox-readers readers for
--inbox-read-for, each round a random user's GET /v1/inbox/unread-count,
/v1/inbox/bell and first page /v1/inbox?limit=20 (p50/p95/p99 per endpoint,
targets p99 < 5 ms, < 25 ms and < 25 ms, and ≥ 2,000 reads/s), then
--inbox-writers writers for --inbox-write-for marking notifications read and
acting on shared ones (writes/s, p99), and a check that every counter still
matches its rows. It measures no ceilings.
--scenario directory runs the directory benchmark: at the store level, in a
database of its own, importing --directory-recipients recipients with one
device and one membership each (rows/s over every row written), importing
the same file again (unchanged upserts), exporting it, import --prune of a
file without a tenth of them (upsert and deletes in one transaction), and
erasing one user with --directory-erased notifications and deliveries; then
the fanout run twice, without and with --directory-write-rate rows/s of new
recipients written into its directory while it runs (the relay's throughput
while the directory is written, as a ratio to the run without; target ≥
0.90×); then, through the service API served in this process,
POST /v1/recipients:batch of --directory-recipients recipients with their
devices and memberships from --directory-batch-clients clients (rows/s)
and --directory-writers writers each sending --directory-puts single
upserts (PUT /v1/recipients/{user_id}, p50/p99), then --directory-readers
readers each sending --directory-reads GET /v1/me/preferences as random
users with their own tokens (p50/p99).
--scenario enqueue measures the herald_enqueue and direct INSERT ceilings only.
--scenario source runs the fanout direct, through a source database twice, direct
again (fanout, fanout-source, fanout-source-2, fanout-2), then latency-source, the
source path at half the direct fanout's events/s; targets: the source runs' mean
deliveries/s ≥ 0.90× the direct runs', and the source stage's lag (event commit in
the source → its row in Herald) p99 < 1 s at half load.
--scenario digest runs a plain fanout (fanout-no-digest: --digest-recipients in
200 groups, each event to one group, 1 channel, --events, default 2,000, unpaced),
then the same with a digest rule (digest: every delivery collected per recipient
and team over --digest-window, default 1m, max_items 1,000), its events paced at
the events/s the plain run sustained (or --rate): window close → digest written
and → plugin p50/p99, deliveries collected/s with the digest bookkeeping and its
ratio to the plain run's deliveries/s, and the exactly-once check of the digests.
--scenario custom runs one run from the flags.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.floorFanout, "floor-fanout-events", 2_000, "events of the database floor's fanout shape (floor)")
	fl.IntVar(&f.floorSingle, "floor-single-events", 10_000, "events of the database floor's single shape (floor)")
	fl.StringVar(&f.scenario, "scenario", "all", "all, floor, fanout, source (direct and through a source database, then its lag at half load), rls, latency, single, scale, admin, inbox, soak, directory, enqueue, digest or custom")
	fl.IntVar(&f.directory.Recipients, "directory-recipients", 100_000, "recipients the directory import writes, one device and one membership each (directory)")
	fl.IntVar(&f.directory.Erased, "directory-erased", 20_000, "notifications (one delivery each) of the user the directory benchmark erases (directory)")
	fl.DurationVar(&f.digestWindow, "digest-window", time.Minute, "the digest rule's window (digest; 1s to 168h)")
	fl.IntVar(&f.digestRcpts, "digest-recipients", 10_000, "recipients of the digest runs, 200 groups of --digest-recipients/200 (digest)")
	fl.IntVar(&f.dirWrites, "directory-write-rate", 2_000, "directory rows/s written during the second fanout run (directory)")
	fl.BoolVar(&f.dirFanout, "directory-fanout", true, "with --scenario directory, also the two fanout runs (directory)")
	fl.IntVar(&f.dirAPI.BatchClients, "directory-batch-clients", 4, "clients sending POST /v1/recipients:batch at once (directory)")
	fl.IntVar(&f.dirAPI.Writers, "directory-writers", 20, "writers sending single upserts at once (directory)")
	fl.IntVar(&f.dirAPI.Puts, "directory-puts", 200, "single upserts per writer (directory)")
	fl.IntVar(&f.dirAPI.Readers, "directory-readers", 50, "readers of GET /v1/me/preferences at once (directory)")
	fl.IntVar(&f.dirAPI.Reads, "directory-reads", 100, "GET /v1/me/preferences requests per reader (directory)")
	fl.IntVar(&f.deliveries, "deliveries", 2_000_000, "deliveries of the soak run (soak)")
	fl.IntVar(&f.window, "soak-window", 1_000_000, "deliveries per reported window (soak)")
	fl.IntVar(&f.backlog, "soak-backlog", 100_000, "deliveries enqueued and not yet recorded beyond which the soak's producers wait (soak)")
	fl.Int64Var(&f.baseline, "soak-baseline", 0, "also run the soak first on a database migrated only up to this migration (soak; 0: no)")
	fl.StringVar(&f.baseHerald, "soak-baseline-herald", "", "herald binary of the baseline soak run's daemons, built from a commit whose queries match that migration (soak; default: this binary)")
	fl.IntVar(&f.events, "events", 0, "events per run (0: the scenario's default)")
	fl.IntVar(&f.recipients, "recipients", 10, "recipients per event (custom)")
	fl.IntVar(&f.channels, "channels", 3, "channels per recipient (custom)")
	fl.IntVar(&f.producers, "producers", 4, "concurrent producers")
	fl.Float64Var(&f.rate, "rate", 0, "events/s in all (0: unpaced; latency scenario: 0 = half the fanout rate)")
	fl.IntVar(&f.serve, "serve", 1, "herald serve processes (custom)")
	fl.DurationVar(&f.duration, "duration", 3*time.Minute, "cap per run")
	fl.BoolVar(&f.json, "json", false, "print the report as JSON")
	fl.BoolVar(&f.keep, "keep", false, "keep each run's database, configs and logs")
	fl.BoolVar(&f.pprof, "pprof", false, "expose /debug/pprof on each daemon's admin listener and print its URL on stderr")
	fl.BoolVar(&f.noCeilings, "no-ceilings", false, "skip the raw server ceilings")
	fl.StringVar(&f.dbURL, "database-url", envOr("HERALD_PG_ADMIN_URL", "postgres://herald:herald@127.0.0.1:5432/herald?sslmode=disable"),
		"PostgreSQL URL of a role that may create databases; env HERALD_PG_ADMIN_URL")
	fl.StringVar(&f.amqpURL, "amqp-url", envOr("HERALD_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ URL; env HERALD_AMQP_URL")
	fl.StringVar(&f.pluginDir, "plugins-dir", "bin/bench-plugins", "directory holding herald-plugin-sink")
	fl.IntVar(&f.rabbitN, "ceiling-messages", 50000, "messages for the RabbitMQ ceiling")
	fl.IntVar(&f.copyRows, "ceiling-rows", 200000, "rows for the PostgreSQL COPY ceiling")
	fl.IntVar(&f.ceilEvents, "ceiling-events", 20000, "events for the producer ceiling (the single run's producers, no daemon)")
	fl.IntVar(&f.enqEvents, "enqueue-events", 12000, "events each way for the herald_enqueue vs direct INSERT ceilings")
	fl.IntVar(&f.adminRows, "admin-rows", 1_000_000, "notifications in the superadmin benchmark's database (admin)")
	fl.IntVar(&f.adminReqs, "admin-requests", 200, "measured requests per request shape (admin)")
	fl.IntVar(&f.inbox.Rows, "inbox-rows", 1_000_000, "notifications in the inbox benchmark's database (inbox)")
	fl.IntVar(&f.inbox.Users, "inbox-users", 10_000, "users they belong to, in 10 tenants (inbox)")
	fl.IntVar(&f.inbox.Readers, "inbox-readers", 50, "concurrent readers (inbox)")
	fl.DurationVar(&f.inbox.Warmup, "inbox-warmup", 2*time.Second, "how long the readers run unmeasured first (inbox)")
	fl.DurationVar(&f.inbox.ReadFor, "inbox-read-for", 20*time.Second, "how long the readers are measured (inbox)")
	fl.IntVar(&f.inbox.Writers, "inbox-writers", 20, "concurrent writers (inbox)")
	fl.DurationVar(&f.inbox.WriteFor, "inbox-write-for", 10*time.Second, "how long the writers write, at most (inbox)")
	fl.IntVar(&f.inbox.MaxWrites, "inbox-max-writes", 50_000, "how many writes they send, at most (inbox)")
	fl.IntVar(&f.inbox.APIConns, "inbox-api-conns", config.DefaultDaemon().Database.APIMaxConns,
		"the API's database pool, database.api_max_conns (inbox)")
	fl.StringVar(&f.cpuProfile, "cpu-profile", "", "write a CPU profile of the benchmark process itself to this file")
	_ = fl.MarkHidden("cpu-profile")
	return cmd
}

func runBench(cmd *cobra.Command, f benchFlags) error {
	if f.deliveries < 1 || f.window < 1 || f.window > f.deliveries {
		return &ExitError{Code: 2, Err: fmt.Errorf("--deliveries and --soak-window: want 1 ≤ --soak-window (%d) ≤ --deliveries (%d)", f.window, f.deliveries)}
	}
	if f.backlog < 1 {
		return &ExitError{Code: 2, Err: fmt.Errorf("--soak-backlog: want ≥ 1, got %d", f.backlog)}
	}
	if f.baseHerald != "" {
		if _, err := os.Stat(f.baseHerald); err != nil {
			return &ExitError{Code: 2, Err: fmt.Errorf("--soak-baseline-herald: %w", err)}
		}
	}
	if f.dirAPI.BatchClients < 1 || f.dirAPI.Writers < 1 || f.dirAPI.Puts < 1 || f.dirAPI.Readers < 1 || f.dirAPI.Reads < 1 {
		return &ExitError{Code: 2, Err: fmt.Errorf("--directory-batch-clients, --directory-writers, --directory-puts, --directory-readers and --directory-reads: want ≥ 1 each")}
	}
	if f.directory.Recipients < 100 || f.directory.Erased < 1 || f.dirWrites < 1 {
		return &ExitError{Code: 2, Err: fmt.Errorf("--directory-recipients (≥ 100), --directory-erased and --directory-write-rate (≥ 1): got %d, %d, %d",
			f.directory.Recipients, f.directory.Erased, f.dirWrites)}
	}
	if f.floorFanout < 1 || f.floorSingle < 1 {
		return &ExitError{Code: 2, Err: fmt.Errorf("--floor-fanout-events and --floor-single-events: want ≥ 1 each, got %d, %d", f.floorFanout, f.floorSingle)}
	}
	if f.baseline < 0 {
		return &ExitError{Code: 2, Err: fmt.Errorf("--soak-baseline: %d is not a migration version", f.baseline)}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	pluginDir, err := filepath.Abs(f.pluginDir)
	if err != nil {
		return err
	}
	// The superadmin and inbox benchmarks serve the API in this process
	// and need neither the sink plugin nor the ceilings.
	apiOnly := f.scenario == "admin" || f.scenario == "inbox" || f.scenario == "enqueue"
	if _, err := os.Stat(filepath.Join(pluginDir, "herald-plugin-sink")); err != nil && !apiOnly {
		return &ExitError{Code: 2, Err: fmt.Errorf("--plugins-dir: %s has no herald-plugin-sink (make bench builds it: go build -o %s/herald-plugin-sink ./core/internal/tools/sinkplugin)", pluginDir, f.pluginDir)}
	}
	if f.cpuProfile != "" {
		out, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer out.Close()
		if err := pprof.StartCPUProfile(out); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	progress := os.Stderr
	logf := func(format string, args ...any) { fmt.Fprintf(progress, "bench: "+format+"\n", args...) }
	env := bench.Env{AdminDatabaseURL: f.dbURL, AMQPURL: f.amqpURL, Herald: self, PluginDir: pluginDir,
		Keep: f.keep, Progress: progress, Pprof: f.pprof, Log: logf}

	rep := bench.Report{Started: time.Now().UTC(), Machine: bench.NewMachine()}
	var noAutovacuum bool
	rep.Machine.Postgres, rep.Machine.RabbitMQ, noAutovacuum = serverVersions(ctx, f.dbURL, f.amqpURL)
	if noAutovacuum {
		logf("warning: %s", store.AutovacuumWarning)
	}

	if !f.noCeilings && !apiOnly {
		logf("measuring RabbitMQ: %d persistent messages, publish with pipelined confirms + consume", f.rabbitN)
		c, err := bench.RabbitCeiling(ctx, f.amqpURL, f.rabbitN, 1000)
		if err != nil {
			return fmt.Errorf("rabbitmq ceiling: %w", err)
		}
		rep.Ceilings = append(rep.Ceilings, c)
		logf("measuring PostgreSQL: COPY %d delivery-like rows in batches of 1,000", f.copyRows)
		pc, err := copyCeiling(ctx, f.dbURL, f.copyRows)
		if err != nil {
			return fmt.Errorf("postgresql ceiling: %w", err)
		}
		rep.Ceilings = append(rep.Ceilings, pc)
		logf("measuring producers alone: %d events from %d producers, one transaction each, no daemon", f.ceilEvents, singleProducers(f))
		prc, err := bench.ProducerCeiling(ctx, f.dbURL, fmt.Sprintf("herald_bench_producers_%d", os.Getpid()), f.ceilEvents, singleProducers(f))
		if err != nil {
			return fmt.Errorf("producer ceiling: %w", err)
		}
		rep.Ceilings = append(rep.Ceilings, prc)
	}
	if (!f.noCeilings && !apiOnly) || f.scenario == "enqueue" {
		logf("measuring herald_enqueue against a direct INSERT: %d events each way from %d producers, one transaction each, no daemon",
			f.enqEvents, singleProducers(f))
		ecs, rounds, err := bench.EnqueueCeilings(ctx, f.dbURL, fmt.Sprintf("herald_bench_enqueue_%d", os.Getpid()), f.enqEvents, singleProducers(f))
		if err != nil {
			return fmt.Errorf("enqueue ceilings: %w", err)
		}
		rep.Ceilings = append(rep.Ceilings, ecs...)
		rep.EnqueueRounds = rounds
	}

	fanout := bench.Scenario{Name: "fanout", Events: pick(f.events, 6000), Recipients: 10, Channels: 3,
		Producers: f.producers, Serve: 1, Duration: f.duration}
	single := bench.Scenario{Name: "single", Events: pick(f.events, 30000), Recipients: 1, Channels: 1,
		Producers: singleProducers(f), Serve: 1, Duration: f.duration}
	if f.scenario == "all" || f.scenario == "floor" {
		for _, sc := range bench.FloorScenarios(fanout, single, f.floorFanout, f.floorSingle) {
			if idle, waited := bench.Settle(ctx, 0.8, 30*time.Second); !idle {
				logf("machine still busy after %s; starting the %s floor anyway", waited.Round(time.Second), sc.Name)
			}
			fl, err := bench.RunFloor(ctx, env, sc)
			if err != nil {
				return fmt.Errorf("bench floor %s: %w", sc.Name, err)
			}
			logf("floor %s: %s deliveries/s, %s events/s, %.2f row writes per delivery, this process %.0f%% of a core; %s", sc.Name,
				fmtRate(fl.DeliveriesPerS), fmtRate(fl.EventsPerSec), fl.WritesPerDelivery, fl.GoCPU*100, fl.Check.Detail)
			rep.Floors = append(rep.Floors, fl)
		}
	}
	// The fanout run under each row-level security mode, for the "RLS
	// cost" lines.
	rls := []bench.Scenario{fanout, fanout, fanout}
	rls[1].Name, rls[1].RLS = "fanout-rls-policies", bench.RLSPolicies
	rls[2].Name, rls[2].RLS = "fanout-no-rls", bench.RLSOff
	soakDuration := f.duration
	if !cmd.Flags().Changed("duration") {
		soakDuration = max(f.duration, time.Hour)
	}
	// The soak run: the fanout shape until --deliveries, the producers
	// enqueuing until the last window (Run derives the events).
	soak := fanout
	soak.Name, soak.Events, soak.Window, soak.Deliveries, soak.Backlog, soak.Duration = "soak", 0, f.window, f.deliveries, f.backlog, soakDuration
	// The fanout run with the producers writing the outbox of a database
	// of their own, forwarded by a source block: against the direct
	// fanout of the same run.
	viaSource := fanout
	viaSource.Name, viaSource.Source = "fanout-source", true
	var runs []bench.Scenario
	admin, inbox, dirBench := false, false, false
	switch f.scenario {
	case "all":
		admin, inbox = true, true
		runs = append(runs, rls...)
		runs = append(runs, viaSource, bench.Scenario{Name: "latency-source"})
		runs = append(runs, bench.Scenario{Name: "latency"}, single)
		for _, n := range []int{2, 3} {
			s := fanout
			s.Name, s.Serve = fmt.Sprintf("scale-%d", n), n
			runs = append(runs, s)
		}
		runs = append(runs, soak)
	case "soak":
		if f.baseline > 0 {
			old := soak
			old.Name, old.MigrationLevel, old.Herald = fmt.Sprintf("soak-%04d", f.baseline), f.baseline, f.baseHerald
			runs = append(runs, old)
		}
		runs = append(runs, soak)
	case "fanout":
		runs = []bench.Scenario{fanout}
	case "source":
		// Direct and through a source database in the same run, in the
		// order direct, source, source, direct (what drifts during the
		// session falls on both alike), then the source path at half the
		// direct fanout's events/s for its lag.
		viaSource2, fanout2 := viaSource, fanout
		viaSource2.Name, fanout2.Name = "fanout-source-2", "fanout-2"
		runs = []bench.Scenario{fanout, viaSource, viaSource2, fanout2, {Name: "latency-source"}}
	case "rls":
		// The baseline first: the suite runs it last, and runs later in a
		// session tend to be slower (checkpoints of the dropped databases),
		// so the two orders together bound the order's effect.
		runs = []bench.Scenario{rls[2], rls[0], rls[1]}
	case "admin":
		admin = true
	case "enqueue", "floor":
		// The ceilings (and floors) above are the whole of it.
	case "inbox":
		inbox = true
	case "latency":
		if f.rate <= 0 {
			runs = []bench.Scenario{fanout, {Name: "latency"}}
		} else {
			runs = []bench.Scenario{{Name: "latency"}}
		}
	case "single":
		runs = []bench.Scenario{single}
	case "scale":
		for _, n := range []int{1, 2, 3} {
			s := fanout
			s.Name, s.Serve = fmt.Sprintf("scale-%d", n), n
			runs = append(runs, s)
		}
	case "directory":
		dirBench = true
		writing := fanout
		writing.Name, writing.DirectoryWrites = "fanout-directory-writes", f.dirWrites
		if f.dirFanout {
			runs = []bench.Scenario{fanout, writing}
		}
	case "digest":
		if f.digestWindow < time.Second || f.digestWindow > 168*time.Hour || f.digestRcpts < 200 || f.digestRcpts > 200_000 {
			return &ExitError{Code: 2, Err: fmt.Errorf("--digest-window (1s to 168h) and --digest-recipients (200 to 200,000): got %s, %d",
				f.digestWindow, f.digestRcpts)}
		}
		if f.events > 0 && f.events < 200 {
			return &ExitError{Code: 2, Err: fmt.Errorf("--events: the digest runs spread events over 200 groups; want ≥ 200, got %d", f.events)}
		}
		plain := bench.Scenario{Name: "fanout-no-digest", Events: pick(f.events, 2000), Recipients: f.digestRcpts / 200, Channels: 1,
			Producers: f.producers, Serve: 1, Duration: f.duration}
		digest := plain
		digest.Name, digest.Digest, digest.Rate, digest.Duration = "digest", f.digestWindow, f.rate, f.duration+f.digestWindow
		runs = []bench.Scenario{plain, digest}
	case "custom":
		runs = []bench.Scenario{{Name: "custom", Events: pick(f.events, 10000), Recipients: f.recipients, Channels: f.channels,
			Producers: f.producers, Rate: f.rate, Serve: f.serve, Duration: f.duration}}
	default:
		return &ExitError{Code: 2, Err: fmt.Errorf("--scenario: %q is not all, floor, fanout, source, rls, latency, single, scale, admin, inbox, soak, directory, enqueue, digest or custom", f.scenario)}
	}

	for i, sc := range runs {
		if sc.Name == "latency" {
			sc = latencyScenario(f, rep.Runs)
		}
		if sc.Digest > 0 && sc.Rate <= 0 {
			// Events arrive at the rate the plain fanout sustained.
			sc.Rate = 100
			for _, r := range rep.Runs {
				if r.Scenario.Name == "fanout-no-digest" && r.EventsPerSec >= 1 {
					sc.Rate = float64(int(r.EventsPerSec))
				}
			}
		}
		if sc.Name == "latency-source" {
			sc = latencyScenario(f, rep.Runs)
			sc.Name, sc.Source = "latency-source", true
		}
		if i > 0 {
			// The servers finish the last run's work (autovacuum, the
			// dropped database's checkpoint, broker housekeeping) before
			// the next run starts, so runs do not measure each other.
			if idle, waited := bench.Settle(ctx, 0.8, 30*time.Second); !idle {
				logf("machine still busy after %s; starting %s anyway", waited.Round(time.Second), sc.Name)
			}
		}
		res, err := bench.Run(ctx, env, sc)
		if err != nil {
			return fmt.Errorf("bench %s: %w", sc.Name, err)
		}
		logf("%s: %s deliveries/s, %s events/s, p50 %.1f ms, p99 %.1f ms, bench process %.0f%% of a core; %s", sc.Name,
			fmtRate(res.DeliveriesPerS), fmtRate(res.EventsPerSec), res.Latency.P50, res.Latency.P99, res.BenchCPU*100, res.Check.Detail)
		if t := res.Tail; t.Count > 0 {
			logf("%s: the %d trips ≥ p99 (%.1f ms), medians: commit → relay claim %.1f ms, claim → row %.1f ms, row → plugin %.1f ms", sc.Name,
				t.Count, t.From, t.Wake, t.Relay, t.Deliver)
		}
		if res.ToHerald != nil {
			logf("%s: source → Herald's event_outbox p50 %.1f ms, p99 %.1f ms", sc.Name, res.ToHerald.P50, res.ToHerald.P99)
		}
		if res.Digest != nil {
			logf("%s: %d items into %d digests; window close → digest written p99 %.1f ms, → plugin p99 %.1f ms", sc.Name,
				res.Digest.Items, res.Digest.Digests, res.Digest.Flush.P99, res.Digest.ToPlugin.P99)
		}
		if res.Soak != nil {
			load := "every window under the producers' load"
			if !res.Soak.UnderLoad {
				load = "NOT every window under the producers' load"
			}
			logf("%s: last window's rate ÷ first's %.2f over %d windows (%s; %d deliveries drained after the last window in %.1f s)",
				sc.Name, res.Soak.Ratio, len(res.Soak.Windows), load, res.Soak.Drained, res.Soak.DrainedIn.Seconds())
		}
		rep.Runs = append(rep.Runs, res)
	}
	if admin {
		if len(runs) > 0 {
			if idle, waited := bench.Settle(ctx, 0.8, 30*time.Second); !idle {
				logf("machine still busy after %s; starting admin anyway", waited.Round(time.Second))
			}
		}
		res, err := bench.RunAdmin(ctx, env, bench.AdminScenario{Rows: f.adminRows, Requests: f.adminReqs})
		if err != nil {
			return fmt.Errorf("bench admin: %w", err)
		}
		logf("admin: every list request p50 %.1f ms, p99 %.1f ms; %d failed", res.Overall.P50, res.Overall.P99, res.Failed)
		rep.Admin = &res
	}
	if inbox {
		if len(runs) > 0 || admin {
			if idle, waited := bench.Settle(ctx, 0.8, 30*time.Second); !idle {
				logf("machine still busy after %s; starting inbox anyway", waited.Round(time.Second))
			}
		}
		res, err := bench.RunInbox(ctx, env, f.inbox)
		if err != nil {
			return fmt.Errorf("bench inbox: %w", err)
		}
		for _, e := range res.Reads {
			logf("inbox: %s p50 %.2f ms, p99 %.2f ms", e.Name, e.Latency.P50, e.Latency.P99)
		}
		logf("inbox: %s reads/s, %s writes/s; %d failed; counters %s", fmtRate(res.ReadsPerSec), fmtRate(res.WritesPerSec), res.Failed, res.Check.Detail)
		rep.Inbox = &res
	}
	if dirBench {
		if idle, waited := bench.Settle(ctx, 0.8, 30*time.Second); !idle {
			logf("machine still busy after %s; starting directory anyway", waited.Round(time.Second))
		}
		res, err := bench.RunDirectory(ctx, env, f.directory)
		if err != nil {
			return fmt.Errorf("bench directory: %w", err)
		}
		for _, s := range res.Steps {
			logf("directory: %s: %s rows/s", s.Name, fmtRate(s.PerSec))
		}
		rep.Directory = &res
		if idle, waited := bench.Settle(ctx, 0.8, 30*time.Second); !idle {
			logf("machine still busy after %s; starting directory api anyway", waited.Round(time.Second))
		}
		sc := f.dirAPI
		sc.Recipients = f.directory.Recipients
		api, err := bench.RunDirectoryAPI(ctx, env, sc)
		if err != nil {
			return fmt.Errorf("bench directory api: %w", err)
		}
		logf("directory api: batches %s rows/s; single upserts p50 %.1f ms, p99 %.1f ms; /v1/me/preferences p50 %.1f ms, p99 %.1f ms; %d failed",
			fmtRate(api.BatchRowsPerS), api.Put.P50, api.Put.P99, api.MePreferences.P50, api.MePreferences.P99, api.Failed)
		rep.DirectoryAPI = &api
	}
	rep.Evaluate()
	if f.json {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		rep.Print(cmd.OutOrStdout())
	}
	if err := rep.Err(); err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	return nil
}

// latencyScenario paces the fanout shape at --rate, or at half the rate the
// fanout run sustained.
func latencyScenario(f benchFlags, done []bench.Result) bench.Scenario {
	rate := f.rate
	if rate <= 0 {
		for _, r := range done {
			if r.Scenario.Name == "fanout" {
				rate = float64(int(r.EventsPerSec / 2))
			}
		}
	}
	if rate <= 0 {
		rate = 100
	}
	// About 20 seconds of measured traffic unless --events says
	// otherwise, after about 10 seconds of warm-up (Scenario.Warmup: the
	// database growing from empty, left out of the latencies).
	warmup := int(rate * 10)
	return bench.Scenario{Name: "latency", Events: warmup + pick(f.events, int(rate*20)), Warmup: warmup, Recipients: 10, Channels: 3,
		Producers: f.producers, Rate: rate, Serve: 1, Duration: f.duration}
}

// singleProducers is the number of producers of the single run, which the
// producer ceiling uses too.
func singleProducers(f benchFlags) int { return max(f.producers, 8) }

func pick(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

func fmtRate(v float64) string { return fmt.Sprintf("%.0f", v) }

// copyCeiling measures COPY into a database of its own.
func copyCeiling(ctx context.Context, adminURL string, rows int) (bench.Ceiling, error) {
	pool, drop, err := bench.ScratchDatabase(ctx, adminURL, fmt.Sprintf("herald_bench_copy_%d", os.Getpid()))
	if err != nil {
		return bench.Ceiling{}, err
	}
	defer drop()
	return bench.PostgresCopyCeiling(ctx, pool, rows, 1000)
}

// serverVersions asks both servers for their versions.
func serverVersions(ctx context.Context, dbURL, amqpURL string) (pg, rabbit string, noAutovacuum bool) {
	pg, rabbit = "PostgreSQL (unknown version)", "RabbitMQ (unknown version)"
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(c, dbURL); err == nil {
		var v string
		if conn.QueryRow(c, "SHOW server_version").Scan(&v) == nil {
			pg = "PostgreSQL " + strings.Fields(v)[0]
		}
		// A server without autovacuum keeps every dead row: a long run
		// slows down for that, not for Herald (store.AutovacuumWarning).
		if off, err := store.AutovacuumOff(c, conn); err == nil && off {
			pg, noAutovacuum = pg+" (autovacuum off)", true
		}
		_ = conn.Close(c)
	}
	if conn, err := amqp.Dial(amqpURL); err == nil {
		if v, ok := conn.Properties["version"].(string); ok {
			rabbit = "RabbitMQ " + v
		}
		_ = conn.Close()
	}
	return pg, rabbit, noAutovacuum
}
