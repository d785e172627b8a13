package bench

import (
	"bytes"
	"context"
	"math"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestSoakWatch drives the soak watch with counts it controls: it holds
// the producers while the backlog is above its bound, samples a window
// each time the record count crosses a multiple of the window with the
// producers still running, stops them once the window reaching the end
// is sampled, samples nothing after it, and counts what the sink records
// after the last window as drained. Each window reads every hot table's
// size and row statistics from the real database.
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
	// The backlog filled before the start: 200 enqueued, 10 of them
	// already recorded, which are in no window.
	var recorded, enqueued atomic.Int64
	enqueued.Store(200)
	recorded.Store(10)
	start := time.Now()
	w := watchSoak(ctx, db.Pool, 100, 300, 50, start, func() int { return int(recorded.Load()) },
		func() int { return int(enqueued.Load()) }, []int{os.Getpid()})
	windows := func() int { w.mu.Lock(); defer w.mu.Unlock(); return len(w.windows) }
	// polls waits for two polls to end: the second read the counts as
	// they were when polls was called.
	polls := func() {
		for range 2 {
			w.gate.Lock()
			polled := w.polled
			w.gate.Unlock()
			select {
			case <-polled:
			case <-time.After(30 * time.Second):
				t.Fatal("the watch does not poll")
			}
		}
	}

	// A backlog of 190: the producers wait for it to go down, here
	// until their context ends.
	short, cancel := context.WithTimeout(ctx, 2*soakPollEvery+100*time.Millisecond)
	if w.admit(short) {
		t.Fatal("admit let a producer enqueue with a backlog of 190 above its bound of 50")
	}
	cancel()
	admitted := make(chan bool, 1)
	go func() { admitted <- w.admit(ctx) }()
	enqueued.Store(210)
	polls()             // so that the window's backlog is 210 − 160
	recorded.Store(160) // a backlog of 50: the producer goes on
	if !<-admitted {
		t.Fatal("admit refused a producer with a backlog of 50")
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return windows() == 1 }, "the first window is sampled")

	enqueued.Store(450)
	polls()             // so that the window's backlog is 450 − 420
	recorded.Store(420) // crosses 200 and 300, the end, at once: one window
	testenv.Eventually(t, 30*time.Second, func() bool { return windows() == 2 }, "the last window is sampled")
	if w.admit(ctx) {
		t.Fatal("admit let a producer enqueue after the last window was sampled")
	}
	w.producersStopped()
	enqueued.Store(510)
	recorded.Store(510) // the drain: in no window
	polls()
	end := time.Now()
	s := w.finish(510, end)
	if len(s.Windows) != 2 {
		t.Fatalf("windows = %d, want 2: %+v", len(s.Windows), s.Windows)
	}
	w1, w2 := s.Windows[0], s.Windows[1]
	if w1.Deliveries != 160 || w2.Deliveries != 420 {
		t.Errorf("window ends = %d, %d, want 160, 420", w1.Deliveries, w2.Deliveries)
	}
	if w1.Backlog != 50 || w1.MinBacklog != 50 || w2.Backlog != 30 || w2.MinBacklog != 30 {
		t.Errorf("backlogs = %d (least %d), %d (least %d), want 50 (50), 30 (30)", w1.Backlog, w1.MinBacklog, w2.Backlog, w2.MinBacklog)
	}
	// Over the same time as the deliveries: 10 enqueued against 150
	// recorded since the start, then 240 against 260.
	if r1, r2 := w1.EnqueuedPerS/w1.DeliveriesPerS, w2.EnqueuedPerS/w2.DeliveriesPerS; math.Abs(r1-10.0/150) > 1e-9 || math.Abs(r2-240.0/260) > 1e-9 {
		t.Errorf("enqueued ÷ recorded = %v, %v, want 10/150 and 240/260", r1, r2)
	}
	if s.Before != 10 {
		t.Errorf("recorded before the first window = %d, want 10", s.Before)
	}
	if !w1.UnderLoad || !w2.UnderLoad || !s.UnderLoad {
		t.Errorf("under load = %t, %t, summary %t, want all true", w1.UnderLoad, w2.UnderLoad, s.UnderLoad)
	}
	if s.Drained != 510-420 || s.DrainedIn != end.Sub(start)-w2.Elapsed || s.DrainedIn <= 0 || s.MaxBacklog != 50 {
		t.Errorf("drained %d in %s (bound %d), want 90 in %s (50)", s.Drained, s.DrainedIn, s.MaxBacklog, end.Sub(start)-w2.Elapsed)
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
	c := w2.Tables[2]
	if c.Name != "notification_counters" || c.TotalBytes <= 0 || c.Updates != 1 {
		t.Errorf("notification_counters = %+v, want its size and its one update", c)
	}
	want := w2.DeliveriesPerS / w1.DeliveriesPerS
	if s.Ratio != want || s.Ratio <= 0 || s.PairRatio != 0 {
		t.Errorf("ratio = %v, pair ratio %v, want %v and none of two windows", s.Ratio, s.PairRatio, want)
	}
	var out bytes.Buffer
	s.print(&out, "soak", Check{Expected: 510, Detail: "all 510 deliveries SENT exactly once"})
	for _, line := range []string{"Soak soak (latest migrations)", "notification_counters", "last window's rate ÷ first's",
		"under load: every window", "drained after the last window: 90 deliveries", "all 510 deliveries SENT exactly once"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("printed soak has no %q:\n%s", line, out.String())
		}
	}

	// Producers that stop before the end (a run cut off): the window
	// sampled after is not under load, and neither is the run.
	recorded.Store(0)
	enqueued.Store(0)
	w = watchSoak(ctx, db.Pool, 100, 300, 50, time.Now(), func() int { return int(recorded.Load()) },
		func() int { return int(enqueued.Load()) }, nil)
	w.producersStopped()
	recorded.Store(150)
	testenv.Eventually(t, 30*time.Second, func() bool { return windows() == 1 }, "the window after the producers stopped is sampled")
	s = w.finish(150, time.Now())
	if len(s.Windows) != 1 || s.Windows[0].UnderLoad || s.UnderLoad {
		t.Errorf("cut-off run: %d windows, under load %t, want one window not under load", len(s.Windows), s.UnderLoad)
	}
	out.Reset()
	s.print(&out, "cut", Check{})
	if !strings.Contains(out.String(), "(no load)") || !strings.Contains(out.String(), "NOT under load") {
		t.Errorf("printed cut-off soak does not say it was not under load:\n%s", out.String())
	}
}

// TestSoakRatios checks the headline ratio (last window over first) and
// the pairs' ratio: each pair's deliveries over its own time, only when
// the two pairs share no window.
func TestSoakRatios(t *testing.T) {
	t.Parallel()
	win := func(deliveries int, at time.Duration, rate float64) SoakWindow {
		return SoakWindow{Deliveries: deliveries, Elapsed: at, DeliveriesPerS: rate}
	}
	for name, tc := range map[string]struct {
		windows    []SoakWindow
		last, pair float64
	}{
		"none":  {nil, 0, 0},
		"one":   {[]SoakWindow{win(100, 10*time.Second, 10)}, 0, 0},
		"three": {[]SoakWindow{win(100, 10*time.Second, 10), win(200, 30*time.Second, 5), win(300, 40*time.Second, 10)}, 1, 0},
		// Rates 10, 5, 10, 5: the first two did 200 in 30 s, the last two
		// 200 in 30 s.
		"four": {[]SoakWindow{win(100, 10*time.Second, 10), win(200, 30*time.Second, 5), win(300, 40*time.Second, 10),
			win(400, 60*time.Second, 5)}, 0.5, 1},
		// The last two did 200 in 50 s: 4/s against 200/30 s.
		"five": {[]SoakWindow{win(100, 10*time.Second, 10), win(200, 30*time.Second, 5), win(300, 40*time.Second, 10),
			win(400, 60*time.Second, 5), win(500, 90*time.Second, 100.0/30)}, 1.0 / 3, 0.6},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			last, pair := soakRatios(tc.windows)
			if math.Abs(last-tc.last) > 1e-9 || math.Abs(pair-tc.pair) > 1e-9 {
				t.Errorf("ratios = %v, %v, want %v, %v", last, pair, tc.last, tc.pair)
			}
		})
	}
}

// TestRunSoak runs a small soak through the whole pipeline (a real herald
// serve, the sink plugin, producers through sdk/producer): every window
// is measured with the producers enqueuing and the backlog bounded, the
// deliveries enqueued beyond the end are drained after the last window
// and reported, and every enqueued delivery, drained ones included, is
// SENT exactly once.
func TestRunSoak(t *testing.T) {
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
	sc := Scenario{Name: "soak", Recipients: 10, Channels: 3, Producers: 4, Serve: 1, Duration: 5 * time.Minute,
		Window: 10_000, Deliveries: 30_000, Backlog: 3_000}
	res, err := Run(context.Background(), env, sc)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Check.OK || res.Check.Sent != res.Expected || res.Expected != res.EventsEnqueued*30 {
		t.Fatalf("check: %+v (expected %d of %d events)", res.Check, res.Expected, res.EventsEnqueued)
	}
	// The producers stop once the sink has recorded the end, with at most
	// the backlog waiting and one event of each producer under way.
	if res.Expected < sc.Deliveries || res.Expected > sc.Deliveries+sc.Backlog+30*(sc.Producers+1) {
		t.Errorf("%d deliveries enqueued, want from %d to %d", res.Expected, sc.Deliveries, sc.Deliveries+sc.Backlog+30*(sc.Producers+1))
	}
	s := res.Soak
	if s == nil || len(s.Windows) < 2 {
		t.Fatalf("soak summary: %+v", s)
	}
	last := s.Windows[len(s.Windows)-1]
	if !s.UnderLoad || last.Deliveries < sc.Deliveries {
		t.Errorf("under load %t, last window at %d, want under load to %d", s.UnderLoad, last.Deliveries, sc.Deliveries)
	}
	for i, win := range s.Windows {
		if !win.UnderLoad || win.DeliveriesPerS <= 0 || win.EnqueuedPerS <= 0 || win.Deliveries < (i+1)*sc.Window {
			t.Errorf("window %d: %+v, want a rate measured under load past %d", i+1, win, (i+1)*sc.Window)
		}
		if win.Backlog > sc.Backlog+30*sc.Producers {
			t.Errorf("window %d: backlog %d above its bound %d and the producers' events under way", i+1, win.Backlog, sc.Backlog)
		}
	}
	if s.Filled != sc.Backlog/30*30 || s.Before < 0 || s.Before > s.Filled {
		t.Errorf("%d deliveries enqueued before the daemons started, %d recorded before the first window, want %d and at most as many",
			s.Filled, s.Before, sc.Backlog/30*30)
	}
	if s.Drained != res.Expected-last.Deliveries || s.Drained < last.Backlog || s.DrainedIn <= 0 {
		t.Errorf("drained %d in %s, want %d − %d, at least the last window's backlog %d", s.Drained, s.DrainedIn,
			res.Expected, last.Deliveries, last.Backlog)
	}
	if want := s.Windows[len(s.Windows)-1].DeliveriesPerS / s.Windows[0].DeliveriesPerS; s.Ratio != want {
		t.Errorf("ratio = %v, want %v", s.Ratio, want)
	}
	rep := Report{Runs: []Result{res}}
	rep.Evaluate()
	var note string
	for _, tg := range rep.Targets {
		if strings.HasPrefix(tg.Name, "soak soak:") {
			note = tg.Note
		}
	}
	if !strings.Contains(note, "every window under the producers' load") || !strings.Contains(note, "drained after the last window") {
		t.Errorf("soak target note = %q, want the load and the drained deliveries", note)
	}
	var out bytes.Buffer
	rep.Print(&out)
	for _, line := range []string{"under load: every window", "drained after the last window", "SENT exactly once", "before the daemons started"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("report has no %q:\n%s", line, out.String())
		}
	}
	t.Logf("%s", out.String())
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
		for _, st := range stats {
			if st.Name == "delivery_handoffs" {
				h = st
			}
		}
		return h.Updates == 2
	}, "both partitions' updates reach the statistics")
	if h.Name != "delivery_handoffs" || h.Updates != 2 || h.TotalBytes < 2*8192 {
		t.Errorf("delivery_handoffs = %+v, want the two partitions' two updates and pages", h)
	}
}

// TestRunRefusesBadSoak checks that a soak run without an end at or past
// its first window, without a backlog bound or with paced producers is
// refused before anything starts.
func TestRunRefusesBadSoak(t *testing.T) {
	t.Parallel()
	base := Scenario{Name: "soak", Recipients: 10, Channels: 3, Producers: 4, Serve: 1, Window: 100, Deliveries: 300, Backlog: 50}
	for name, change := range map[string]func(*Scenario){
		"end before the first window": func(s *Scenario) { s.Deliveries = 99 },
		"no backlog bound":            func(s *Scenario) { s.Backlog = 0 },
		"paced":                       func(s *Scenario) { s.Rate = 10 },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sc := base
			change(&sc)
			if _, err := Run(context.Background(), Env{}, sc); err == nil || !strings.Contains(err.Error(), "soak run") {
				t.Errorf("Run(%+v) = %v, want the soak run refused", sc, err)
			}
		})
	}
}
