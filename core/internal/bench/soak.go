package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// soakTables are the tables whose growth the soak scenario follows: the
// ones every event writes to.
var soakTables = []string{"event_outbox", "notifications", "notification_counters", "deliveries",
	"delivery_attempts", "delivery_handoffs"}

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
	// Ratio is the last full window's deliveries/s over the first's.
	Ratio float64 `json:"last_to_first_ratio"`
	// MigrationLevel is the schema version the run used (0: the latest).
	MigrationLevel int64 `json:"migration_level,omitempty"`
}

// soakTarget is the least last-to-first ratio that counts as flat.
const soakTarget = 0.9

// soakWatch samples a window each time the sink's record count crosses a
// multiple of window.
type soakWatch struct {
	pool    *pgxpool.Pool
	window  int
	count   func() int
	daemons []int
	start   time.Time

	mu      sync.Mutex
	next    int
	last    time.Time
	cp0     int64
	windows []SoakWindow

	cancel context.CancelFunc
	done   chan struct{}
}

func watchSoak(ctx context.Context, pool *pgxpool.Pool, window int, start time.Time, count func() int, daemons []int) *soakWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &soakWatch{pool: pool, window: window, count: count, daemons: daemons, start: start,
		next: window, last: start, cp0: checkpoints(ctx, pool), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(250 * time.Millisecond)
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

// poll samples a window when the count has crossed the next window's end.
func (w *soakWatch) poll(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.count()
	if n < w.next {
		return
	}
	now := time.Now()
	win := SoakWindow{Deliveries: n, Elapsed: now.Sub(w.start)}
	prev := 0
	if len(w.windows) > 0 {
		prev = w.windows[len(w.windows)-1].Deliveries
	}
	if secs := now.Sub(w.last).Seconds(); secs > 0 {
		win.DeliveriesPerS = float64(n-prev) / secs
	}
	w.last = now
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
	w.windows = append(w.windows, win)
	for w.next <= n {
		w.next += w.window
	}
}

// finish stops the watch, samples a window the run completed since the
// last tick, and returns the windows and the ratio of the last one's rate
// to the first's. A window is sampled only when the count crosses its
// end, so the run's tail past the last full window is in none.
func (w *soakWatch) finish(ctx context.Context) *SoakSummary {
	w.cancel()
	<-w.done
	w.poll(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &SoakSummary{Windows: w.windows}
	if len(s.Windows) >= 2 && s.Windows[0].DeliveriesPerS > 0 {
		s.Ratio = s.Windows[len(s.Windows)-1].DeliveriesPerS / s.Windows[0].DeliveriesPerS
	}
	return s
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

// print writes one run's soak windows.
func (s *SoakSummary) print(w io.Writer, name string) {
	level := "latest migrations"
	if s.MigrationLevel > 0 {
		level = fmt.Sprintf("migrations up to %04d", s.MigrationLevel)
	}
	fmt.Fprintf(w, "\nSoak %s (%s): per window of deliveries, sampled when the window's last delivery was recorded\n", name, level)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "deliveries\tat s\tdeliveries/s\tdaemon RSS\tcheckpoints\ttable\ttotal\tindexes\tlive\tdead\tupdates\tHOT\tvacuums\t")
	for _, win := range s.Windows {
		if win.Err != "" {
			fmt.Fprintf(tw, "%s\t%.0f\t%s\t\t\t%s\t\n", num(float64(win.Deliveries)), win.Elapsed.Seconds(), num(win.DeliveriesPerS), win.Err)
		}
		var rss int64
		for _, r := range win.DaemonRSS {
			rss = max(rss, r)
		}
		for i, t := range win.Tables {
			lead := "\t\t\t\t\t"
			if i == 0 {
				cp := "-"
				if win.Checkpoints >= 0 {
					cp = strconv.FormatInt(win.Checkpoints, 10)
				}
				lead = fmt.Sprintf("%s\t%.0f\t%s\t%s\t%s\t", num(float64(win.Deliveries)), win.Elapsed.Seconds(), num(win.DeliveriesPerS), mib(rss), cp)
			}
			fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", lead, t.Name, mib(t.TotalBytes), mib(t.IndexBytes),
				num(float64(t.LiveTuples)), num(float64(t.DeadTuples)), num(float64(t.Updates)), num(float64(t.HOTUpdates)), t.Vacuums)
		}
	}
	_ = tw.Flush()
	if len(s.Windows) >= 2 {
		fmt.Fprintf(w, "last window's rate ÷ first's: %.2f\n", s.Ratio)
	}
}
