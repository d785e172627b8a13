package bench

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestSoakWatch drives the soak watch with a count it controls: it samples
// a window each time the count crosses a multiple of the window (and the
// one finish finds), reads every hot table's size and row statistics from
// the real database, and reports the last window's rate over the first's.
func TestSoakWatch(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO notification_counters (tenant_id, user_id, unread) VALUES ('t', 'u', 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE notification_counters SET unread = 2`); err != nil {
		t.Fatal(err)
	}
	// A backend sends its statistics at most once a second.
	testenv.Eventually(t, 30*time.Second, func() bool {
		st, err := tableStats(ctx, db.Pool)
		return err == nil && st[2].Updates == 1
	}, "the counter's update reaches the statistics")
	var n atomic.Int64
	start := time.Now()
	w := watchSoak(ctx, db.Pool, 100, start, func() int { return int(n.Load()) }, []int{os.Getpid()})
	windows := func() int { w.mu.Lock(); defer w.mu.Unlock(); return len(w.windows) }
	n.Store(99)
	n.Store(150)
	testenv.Eventually(t, 30*time.Second, func() bool { return windows() == 1 }, "the first window is sampled")
	n.Store(420) // crosses 200, 300 and 400 at once: one window
	s := w.finish(ctx)
	if len(s.Windows) != 2 {
		t.Fatalf("windows = %d, want 2: %+v", len(s.Windows), s.Windows)
	}
	if s.Windows[0].Deliveries != 150 || s.Windows[1].Deliveries != 420 {
		t.Errorf("window ends = %d, %d, want 150, 420", s.Windows[0].Deliveries, s.Windows[1].Deliveries)
	}
	for _, win := range s.Windows {
		if win.Err != "" {
			t.Fatalf("window error: %s", win.Err)
		}
		if win.Checkpoints < 0 {
			t.Errorf("checkpoints = %d, want the server's count since the start", win.Checkpoints)
		}
		if len(win.DaemonRSS) != 1 || win.DaemonRSS[0] <= 0 {
			t.Errorf("daemon RSS = %v, want this process's", win.DaemonRSS)
		}
		var names []string
		for _, tb := range win.Tables {
			names = append(names, tb.Name)
		}
		if strings.Join(names, ",") != strings.Join(soakTables, ",") {
			t.Errorf("tables = %v, want %v", names, soakTables)
		}
	}
	c := s.Windows[1].Tables[2]
	if c.Name != "notification_counters" || c.TotalBytes <= 0 || c.Updates != 1 {
		t.Errorf("notification_counters = %+v, want its size and its one update", c)
	}
	want := s.Windows[1].DeliveriesPerS / s.Windows[0].DeliveriesPerS
	if s.Ratio != want || s.Ratio <= 0 {
		t.Errorf("ratio = %v, want %v", s.Ratio, want)
	}
	var out bytes.Buffer
	s.print(&out, "soak")
	for _, line := range []string{"Soak soak (latest migrations)", "notification_counters", "last window's rate ÷ first's"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("printed soak has no %q:\n%s", line, out.String())
		}
	}
}

// TestSoakTableStatsPartitioned checks that a partitioned table's figures
// are the sums over its partitions.
func TestSoakTableStatsPartitioned(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	for _, q := range []string{
		`ALTER TABLE delivery_handoffs RENAME TO delivery_handoffs_old`,
		`CREATE TABLE delivery_handoffs (id int, at date NOT NULL) PARTITION BY RANGE (at)`,
		`CREATE TABLE delivery_handoffs_a PARTITION OF delivery_handoffs FOR VALUES FROM ('2026-01-01') TO ('2026-02-01')`,
		`CREATE TABLE delivery_handoffs_b PARTITION OF delivery_handoffs FOR VALUES FROM ('2026-02-01') TO ('2026-03-01')`,
		`INSERT INTO delivery_handoffs VALUES (1, '2026-01-05'), (2, '2026-02-05')`,
		`UPDATE delivery_handoffs SET id = id + 10`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// A backend sends its statistics at most once a second.
	var h TableStat
	testenv.Eventually(t, 30*time.Second, func() bool {
		stats, err := tableStats(ctx, db.Pool)
		if err != nil {
			t.Fatal(err)
		}
		h = stats[len(stats)-1]
		return h.Updates == 2
	}, "both partitions' updates reach the statistics")
	if h.Name != "delivery_handoffs" || h.Updates != 2 || h.TotalBytes < 2*8192 {
		t.Errorf("delivery_handoffs = %+v, want the two partitions' two updates and pages", h)
	}
}
