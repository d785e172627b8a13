package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// soakTables are the tables whose growth the soak scenario follows: the
// ones every event writes to.
var soakTables = []string{"event_outbox", "notifications", "notification_counters", "deliveries",
	"delivery_attempts", "delivery_handoffs", "status_events"}

// SoakWindow is what the soak scenario measured over one window of
// deliveries (Scenario.Window of them), sampled when the sink had
// recorded the window's last one.
type SoakWindow struct {
	// Deliveries is how many deliveries the sink had recorded at the end
	// of the window.
	Deliveries int `json:"deliveries"`
	// Elapsed is the time from the first enqueue to the window's end.
	Elapsed time.Duration `json:"elapsed_ns"`
	// DeliveriesPerS is the window's own rate: its deliveries over its
	// own time.
	DeliveriesPerS float64 `json:"deliveries_per_sec"`
	// EnqueuedPerS is the producers' rate over the window, in deliveries
	// (events × deliveries per event) per second: the load the window
	// was measured under.
	EnqueuedPerS float64 `json:"enqueued_deliveries_per_sec"`
	// UnderLoad is true when the producers were still enqueuing at the
	// window's end, and so throughout the window: they stop only once.
	UnderLoad bool `json:"under_load"`
	// Backlog is how many deliveries the producers had enqueued that the
	// sink had not recorded at the window's end (in the pipeline or
	// waiting for it); MinBacklog is the least of it at the watch's polls
	// during the window (every soakPollEvery), which stays above zero
	// when the daemon never ran out of work.
	Backlog    int `json:"backlog"`
	MinBacklog int `json:"min_backlog"`
	// Tables are the sizes and row counts of the tables at the end of the
	// window (a partitioned table summed over its partitions).
	Tables []TableStat `json:"tables"`
	// DaemonRSS is the resident memory of each herald serve process at
	// the end of the window, in bytes.
	DaemonRSS []int64 `json:"daemon_rss_bytes"`
	// Checkpoints is how many checkpoints the server completed since the
	// run started (timed and requested; the whole server's, whoever caused
	// them); -1 when unknown.
	Checkpoints int64 `json:"checkpoints"`
	// Err says why Tables is empty, when reading them failed.
	Err string `json:"error,omitempty"`
}

// TableStat is one table's size and row statistics
// (pg_total_relation_size, pg_indexes_size, pg_stat_user_tables).
type TableStat struct {
	Name       string `json:"name"`
	TotalBytes int64  `json:"total_bytes"`
	IndexBytes int64  `json:"index_bytes"`
	LiveTuples int64  `json:"live_tuples"`
	DeadTuples int64  `json:"dead_tuples"`
	// Updates and HOTUpdates are n_tup_upd and n_tup_hot_upd: an update
	// that is not HOT writes a new entry into every index of the table.
	Updates    int64 `json:"updates"`
	HOTUpdates int64 `json:"hot_updates"`
	// Vacuums counts vacuums and autovacuums of the table (or its
	// partitions) so far.
	Vacuums int64 `json:"vacuums"`
}

// SoakSummary compares the last window of a soak run with its first.
type SoakSummary struct {
	Windows []SoakWindow `json:"windows"`
	// Ratio is the last window's deliveries/s over the first's: the
	// headline figure.
	Ratio float64 `json:"last_to_first_ratio"`
	// PairRatio is the rate of the last two windows together (their
	// deliveries over their time) over the rate of the first two, so
	// that one window's disturbance (a checkpoint, another process on
	// the machine) weighs half as much; 0 with fewer than four windows,
	// where the two pairs would share a window.
	PairRatio float64 `json:"last_two_to_first_two_ratio,omitempty"`
	// UnderLoad is true when the windows reached Scenario.Deliveries and
	// every one of them was measured with the producers enqueuing, so
	// that the ratios compare windows under the same load.
	UnderLoad bool `json:"under_load"`
	// MaxBacklog is Scenario.Backlog: the producers wait while more
	// deliveries than this are enqueued and not yet recorded. Filled is
	// how many deliveries they enqueued before the daemons started, so
	// that the first window starts with the backlog built like the others
	// instead of building it while measured. Before is how many the sink
	// had recorded when the first window started (the daemons start on
	// the filled backlog as soon as they are ready).
	MaxBacklog int `json:"max_backlog"`
	Filled     int `json:"filled_before_start"`
	Before     int `json:"recorded_before_first_window"`
	// Drained is how many deliveries were recorded after the last window
	// was sampled: the backlog the producers left when they stopped,
	// in no window's rate but in the exactly-once check like every other.
	// DrainedIn is the time from the last window's end until every
	// delivery was final.
	Drained   int           `json:"drained_after_last_window"`
	DrainedIn time.Duration `json:"drained_in_ns"`
	// MigrationLevel is the schema version the run used (0: the latest).
	MigrationLevel int64 `json:"migration_level,omitempty"`
}

// soakTarget is the least last-to-first ratio that counts as flat.
const soakTarget = 0.9

// soakPollEvery is how often the soak watch reads the sink's record
// count: a window's end is known to within it, and a producer held by
// the backlog waits at most this long after the backlog has gone down.
const soakPollEvery = 250 * time.Millisecond

// soakWatch samples a window each time the sink's record count crosses a
// multiple of window, until it reaches until, and holds the producers:
// admit lets them enqueue while the backlog is at most maxBacklog, and
// stops them once the window that reached until has been sampled. So the
// producers run throughout every window, and what they enqueued beyond
// until is drained after the last window, in none.
type soakWatch struct {
	pool       *pgxpool.Pool
	window     int
	until      int
	maxBacklog int
	count      func() int // deliveries the sink recorded
	enqueued   func() int // deliveries the producers enqueued (committed)
	daemons    []int
	start      time.Time
	stopped    atomic.Bool   // the producers returned
	full       chan struct{} // closed when the window reaching until is sampled

	// gate holds what admit reads: the record count of the last poll,
	// and a channel closed (and replaced) at every poll.
	gate     sync.Mutex
	recorded int
	polled   chan struct{}

	mu         sync.Mutex
	next       int
	last       time.Time
	base       int // the record count when the watch started
	lastN      int
	lastEnq    int
	cp0        int64
	minBacklog int
	windows    []SoakWindow

	cancel context.CancelFunc
	done   chan struct{}
}

func watchSoak(ctx context.Context, pool *pgxpool.Pool, window, until, maxBacklog int, start time.Time,
	count, enqueued func() int, daemons []int) *soakWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &soakWatch{pool: pool, window: window, until: until, maxBacklog: maxBacklog, count: count, enqueued: enqueued,
		daemons: daemons, start: start, full: make(chan struct{}), polled: make(chan struct{}),
		next: window, last: start, cp0: checkpoints(ctx, pool), minBacklog: math.MaxInt, cancel: cancel, done: make(chan struct{})}
	w.base, w.lastEnq = count(), enqueued()
	w.lastN, w.recorded = w.base, w.base
	go func() {
		defer close(w.done)
		tick := time.NewTicker(soakPollEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				w.poll(ctx)
			}
		}
	}()
	return w
}

// admit blocks a producer until it may enqueue one more event, and says
// whether it may: false once the window that reached until has been
// sampled (the producers stop) or when ctx is done. While the backlog,
// the deliveries enqueued that the sink had not recorded at the last
// poll, is above maxBacklog, it waits for the next poll.
func (w *soakWatch) admit(ctx context.Context) bool {
	for {
		select {
		case <-w.full:
			return false
		case <-ctx.Done():
			return false
		default:
		}
		w.gate.Lock()
		backlog, polled := w.enqueued()-w.recorded, w.polled
		w.gate.Unlock()
		if backlog <= w.maxBacklog {
			return true
		}
		select {
		case <-polled:
		case <-w.full:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// producersStopped records that the producers have returned: a window
// sampled from now on was not measured under load.
func (w *soakWatch) producersStopped() { w.stopped.Store(true) }

// poll reads the record count, samples a window when the count has
// crossed the next window's end (or until), and then lets the held
// producers look at the new count. A window's rate and its UnderLoad are
// taken before the producers can learn that the last window is sampled,
// and its table statistics after.
func (w *soakWatch) poll(ctx context.Context) {
	enq := w.enqueued()
	n := w.count()
	now := time.Now()
	backlog := max(0, enq-n)
	w.mu.Lock()
	defer w.mu.Unlock()
	var win *SoakWindow
	select {
	case <-w.full:
	default:
		w.minBacklog = min(w.minBacklog, backlog)
		if n < w.next && n < w.until {
			break
		}
		win = &SoakWindow{Deliveries: n, Elapsed: now.Sub(w.start), UnderLoad: !w.stopped.Load(),
			Backlog: backlog, MinBacklog: w.minBacklog}
		if secs := now.Sub(w.last).Seconds(); secs > 0 {
			win.DeliveriesPerS = float64(n-w.lastN) / secs
			win.EnqueuedPerS = float64(enq-w.lastEnq) / secs
		}
		w.last, w.lastN, w.lastEnq, w.minBacklog = now, n, enq, backlog
		for w.next <= n {
			w.next += w.window
		}
		if n >= w.until {
			close(w.full)
		}
	}
	w.gate.Lock()
	w.recorded = n
	close(w.polled)
	w.polled = make(chan struct{})
	w.gate.Unlock()
	if win == nil {
		return
	}
	for _, pid := range w.daemons {
		if m, err := readMemStatus(pid); err == nil {
			win.DaemonRSS = append(win.DaemonRSS, m.rss)
		}
	}
	win.Checkpoints = -1
	if n := checkpoints(ctx, w.pool); n >= 0 && w.cp0 >= 0 {
		win.Checkpoints = n - w.cp0
	}
	if stats, err := tableStats(ctx, w.pool); err != nil {
		win.Err = err.Error()
	} else {
		win.Tables = stats
	}
	w.windows = append(w.windows, *win)
}

// finish stops the watch and returns the windows and their ratios.
// expected is every delivery the producers enqueued and end the time
// when all of them were final: what the sink recorded after the last
// window is the drained backlog. A window is sampled only while the
// producers run, so a run cut off before until ends with fewer windows
// and is not UnderLoad.
func (w *soakWatch) finish(expected int, end time.Time) *SoakSummary {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &SoakSummary{Windows: w.windows, MaxBacklog: w.maxBacklog, Before: w.base}
	if len(s.Windows) == 0 {
		return s
	}
	last := s.Windows[len(s.Windows)-1]
	s.Drained = max(0, expected-last.Deliveries)
	s.DrainedIn = max(0, end.Sub(w.start)-last.Elapsed)
	s.UnderLoad = last.Deliveries >= w.until
	for _, win := range s.Windows {
		s.UnderLoad = s.UnderLoad && win.UnderLoad
	}
	s.Ratio, s.PairRatio = soakRatios(s.Windows)
	return s
}

// soakRatios returns the last window's rate over the first's and, with
// four windows or more, the rate of the last two windows together over
// that of the first two: each pair's deliveries over its time.
func soakRatios(ws []SoakWindow) (last, pair float64) {
	n := len(ws)
	if n >= 2 && ws[0].DeliveriesPerS > 0 {
		last = ws[n-1].DeliveriesPerS / ws[0].DeliveriesPerS
	}
	if n < 4 {
		return last, 0
	}
	// Each window's deliveries are its rate times its own time.
	secs := func(i int) float64 {
		if i == 0 {
			return ws[0].Elapsed.Seconds()
		}
		return (ws[i].Elapsed - ws[i-1].Elapsed).Seconds()
	}
	rate := func(a, b int) float64 {
		t := secs(a) + secs(b)
		if t <= 0 {
			return 0
		}
		return (ws[a].DeliveriesPerS*secs(a) + ws[b].DeliveriesPerS*secs(b)) / t
	}
	if first := rate(0, 1); first > 0 {
		pair = rate(n-2, n-1) / first
	}
	return last, pair
}

// checkpoints returns the server's checkpoint count (-1 when unknown):
// pg_stat_checkpointer from PostgreSQL 17, pg_stat_bgwriter before.
func checkpoints(ctx context.Context, pool *pgxpool.Pool) int64 {
	var n int64
	if pool.QueryRow(ctx, `SELECT num_timed + num_requested FROM pg_stat_checkpointer`).Scan(&n) == nil {
		return n
	}
	if pool.QueryRow(ctx, `SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter`).Scan(&n) == nil {
		return n
	}
	return -1
}

// tableStats reads the sizes and statistics of soakTables, each summed
// over its partitions when it is partitioned.
func tableStats(ctx context.Context, pool *pgxpool.Pool) ([]TableStat, error) {
	rows, err := pool.Query(ctx, `
		WITH parts AS (
			SELECT t AS name, c.oid
			FROM unnest($1::text[]) AS t
			JOIN LATERAL (
				SELECT relid AS oid FROM pg_partition_tree(to_regclass('public.' || t)) WHERE isleaf
				UNION
				SELECT r.oid FROM pg_class r WHERE r.oid = to_regclass('public.' || t) AND r.relkind = 'r'
			) c ON true
		)
		SELECT p.name, sum(pg_total_relation_size(p.oid))::bigint, sum(pg_indexes_size(p.oid))::bigint,
			coalesce(sum(s.n_live_tup), 0)::bigint, coalesce(sum(s.n_dead_tup), 0)::bigint,
			coalesce(sum(s.n_tup_upd), 0)::bigint, coalesce(sum(s.n_tup_hot_upd), 0)::bigint,
			coalesce(sum(s.vacuum_count + s.autovacuum_count), 0)::bigint
		FROM parts p LEFT JOIN pg_stat_user_tables s ON s.relid = p.oid
		GROUP BY p.name ORDER BY array_position($1::text[], p.name)`, soakTables)
	if err != nil {
		return nil, fmt.Errorf("bench: table stats: %w", err)
	}
	defer rows.Close()
	var out []TableStat
	for rows.Next() {
		var t TableStat
		if err := rows.Scan(&t.Name, &t.TotalBytes, &t.IndexBytes, &t.LiveTuples, &t.DeadTuples, &t.Updates, &t.HOTUpdates, &t.Vacuums); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// print writes one run's soak windows, how they were loaded and what was
// drained after them; check is the run's exactly-once verdict, which
// covers the drained deliveries too.
func (s *SoakSummary) print(w io.Writer, name string, check Check) {
	level := "latest migrations"
	if s.MigrationLevel > 0 {
		level = fmt.Sprintf("migrations up to %04d", s.MigrationLevel)
	}
	fmt.Fprintf(w, "\nSoak %s (%s): per window of deliveries, sampled when the window's last delivery was recorded\n", name, level)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "deliveries\tat s\tdeliveries/s\tenqueued/s\tbacklog\tleast\tdaemon RSS\tcheckpoints\ttable\ttotal\tindexes\tlive\tdead\tupdates\tHOT\tvacuums\t")
	for _, win := range s.Windows {
		rate := num(win.DeliveriesPerS)
		if !win.UnderLoad {
			rate += " (no load)"
		}
		head := fmt.Sprintf("%s\t%.0f\t%s\t%s\t%s\t%s\t", num(float64(win.Deliveries)), win.Elapsed.Seconds(), rate,
			num(win.EnqueuedPerS), num(float64(win.Backlog)), num(float64(win.MinBacklog)))
		if win.Err != "" {
			fmt.Fprintf(tw, "%s\t\t%s\t\n", head, win.Err)
		}
		var rss int64
		for _, r := range win.DaemonRSS {
			rss = max(rss, r)
		}
		for i, t := range win.Tables {
			lead := "\t\t\t\t\t\t\t\t"
			if i == 0 {
				cp := "-"
				if win.Checkpoints >= 0 {
					cp = strconv.FormatInt(win.Checkpoints, 10)
				}
				lead = fmt.Sprintf("%s%s\t%s\t", head, mib(rss), cp)
			}
			fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", lead, t.Name, mib(t.TotalBytes), mib(t.IndexBytes),
				num(float64(t.LiveTuples)), num(float64(t.DeadTuples)), num(float64(t.Updates)), num(float64(t.HOTUpdates)), t.Vacuums)
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "enqueued/s: the producers' rate in deliveries; backlog: deliveries enqueued and not yet recorded at the window's end; "+
		"least: its least at the polls during the window (every %s; near 0, the daemon may have waited for the producers)\n", soakPollEvery)
	fmt.Fprintf(w, "the producers enqueued %s deliveries before the daemons started, so that the first window starts with the backlog built; "+
		"%s were recorded before it started, in no window\n", num(float64(s.Filled)), num(float64(s.Before)))
	if s.UnderLoad {
		fmt.Fprintf(w, "under load: every window was measured with the producers enqueuing (they stopped once the last window was sampled; held at a backlog of at most %s deliveries)\n",
			num(float64(s.MaxBacklog)))
	} else {
		fmt.Fprintln(w, "NOT under load: the producers stopped before the last window was sampled (the run was cut off, or they failed); the ratios do not compare like with like")
	}
	if len(s.Windows) > 0 {
		fmt.Fprintf(w, "drained after the last window: %s deliveries in %.1f s, in no window's rate; exactly once over all %s enqueued deliveries: %s\n",
			num(float64(s.Drained)), s.DrainedIn.Seconds(), num(float64(check.Expected)), check.Detail)
	}
	if len(s.Windows) >= 2 {
		fmt.Fprintf(w, "last window's rate ÷ first's: %.2f\n", s.Ratio)
	}
	if s.PairRatio > 0 {
		fmt.Fprintf(w, "last two windows' rate ÷ first two's (deliveries over time of each pair): %.2f\n", s.PairRatio)
	}
}
