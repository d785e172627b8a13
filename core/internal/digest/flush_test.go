package digest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/digest"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/relay"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sdk/producer"
)

const testRules = `
defaults { time_zone = "UTC" }
channel "EMAIL" { providers = [{ plugin = "sink" }] }
channel "WEBSOCKET" {
  best_effort = true
  providers   = [{ plugin = "sink" }]
}
event "RESERVATION_REQUESTED" {
  audience { user = "{{ .payload.manager }}" }
  mandatory   = ["WEBSOCKET", "EMAIL"]
  quiet_hours = "ignore"
  digest {
    channels  = ["EMAIL"]
    key       = "{{ with .payload.restaurant }}restaurant:{{ . }}{{ end }}"
    window    = "1h"
    max_items = 3
  }
  inbox { title = "Reservation {{ .payload.n }}" }
  template "EMAIL" {
    subject = "{{ len .items }} new reservations"
    body    = "{{ range .items }}#{{ .payload.n }} {{ end }}"
  }
}
`

func setup(t *testing.T, users int) (*testenv.DB, *rules.RuleSet) {
	t.Helper()
	return setupRules(t, users, testRules)
}

func setupRules(t testing.TB, users int, text string) (*testenv.DB, *rules.RuleSet) {
	t.Helper()
	db := testenv.Postgres(t)
	p := filepath.Join(t.TempDir(), "rules.hcl")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := rulesfile.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	dir := &directory.Directory{}
	for i := range users {
		id := fmt.Sprintf("m%d", i)
		dir.Recipients = append(dir.Recipients, directory.Recipient{UserID: id, UserType: "STAFF", Email: id + "@restaurant.example", Active: true})
	}
	if err := store.ImportDirectory(context.Background(), db.Pool, "t1", dir); err != nil {
		t.Fatal(err)
	}
	return db, rs
}

func enqueue(t *testing.T, db *testenv.DB, id, payload string) {
	t.Helper()
	err := producer.Enqueue(context.Background(), db.Pool, producer.Event{TenantID: "t1", EventID: id, Type: "RESERVATION_REQUESTED",
		Payload: json.RawMessage(payload)})
	if err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, db *testenv.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func relayAll(t testing.TB, db *testenv.DB, rs *rules.RuleSet) {
	t.Helper()
	r := relay.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(), relay.Config{BatchSize: 100})
	for {
		n, err := r.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
}

// flushConcurrently runs flushers side by side, as several daemons do,
// until none finds a due window.
func flushConcurrently(t *testing.T, db *testenv.DB, rs *rules.RuleSet, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := digest.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(), digest.Config{})
			for {
				res, err := f.FlushOnce(context.Background())
				if err != nil {
					errs <- err
					return
				}
				if res.Windows == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestDigestCollectsPerKeyAndFlushesEachWindowOnce relays ten reservations
// for one manager (seven at restaurant 1, two at restaurant 2, one whose
// key renders empty) in one batch, cancels the only item of one window,
// closes the windows and flushes them with two flushers at once: every item
// still waiting is in exactly one digest delivery, the cancelled one in
// none, the window of cancelled items sends nothing, and the empty key
// fails only its own delivery.
func TestDigestCollectsPerKeyAndFlushesEachWindowOnce(t *testing.T) {
	t.Parallel()
	db, rs := setup(t, 1)
	ctx := context.Background()
	for i := range 7 {
		enqueue(t, db, fmt.Sprintf("r1-%d", i), fmt.Sprintf(`{"manager": "m0", "restaurant": 1, "n": %d}`, i))
	}
	enqueue(t, db, "r2-0", `{"manager": "m0", "restaurant": 2, "n": 100}`)
	enqueue(t, db, "r2-1", `{"manager": "m0", "restaurant": 2, "n": 101}`)
	enqueue(t, db, "empty", `{"manager": "m0", "restaurant": "", "n": 200}`)
	relayAll(t, db, rs)

	// Restaurant 1: two FULL windows of 3 and an OPEN one of 1; restaurant
	// 2: one OPEN window of 2.
	var got []string
	rows, err := db.Pool.Query(ctx, `SELECT digest_key || ' ' || status || ' ' || items FROM digest_windows ORDER BY digest_key, status, items`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	want := []string{"restaurant:1 FULL 3", "restaurant:1 FULL 3", "restaurant:1 OPEN 1", "restaurant:2 OPEN 2"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("windows %q, want %q", got, want)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE channel = 'EMAIL' AND status = 'WAITING' AND hold = 'digest' AND digest_window IS NOT NULL`); n != 9 {
		t.Fatalf("%d EMAIL items waiting, want 9", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE channel = 'WEBSOCKET' AND status = 'PENDING'`); n != 10 {
		t.Fatalf("%d WEBSOCKET deliveries pending, want 10 (one per event)", n)
	}
	var lastErr string
	if err := db.Pool.QueryRow(ctx, `SELECT status || ': ' || last_error FROM deliveries WHERE event_id = 'empty' AND channel = 'EMAIL'`).Scan(&lastErr); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(lastErr, "FAILED: digest key") || !strings.Contains(lastErr, "rendered empty") {
		t.Fatalf("empty key: %q, want FAILED naming the digest key", lastErr)
	}

	// The item of the open window at restaurant 1 is cancelled (as DELETE
	// /v1/events/{id} does: WAITING → CANCELLED).
	if _, err := db.Pool.Exec(ctx, `UPDATE deliveries SET status = 'CANCELLED', last_error = 'cancelled' WHERE event_id = 'r1-6' AND channel = 'EMAIL' AND status = 'WAITING'`); err != nil {
		t.Fatal(err)
	}
	// The open windows are not due yet: nothing happens to them.
	flushConcurrently(t, db, rs, 2)
	if n := count(t, db, `SELECT count(*) FROM digest_windows`); n != 2 {
		t.Fatalf("%d windows left after flushing the full ones, want the 2 open ones", n)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE digest_windows SET closes_at = now()`); err != nil {
		t.Fatal(err)
	}
	flushConcurrently(t, db, rs, 2)
	if n := count(t, db, `SELECT count(*) FROM digest_windows`); n != 0 {
		t.Fatalf("%d windows left", n)
	}

	// Three digests: #0-2, #3-5 and #100-101; r1-6 cancelled is in none.
	rows, err = db.Pool.Query(ctx, `SELECT content, status, event_id, digest_window::text FROM deliveries
		WHERE event_id LIKE 'digest:%' ORDER BY content->>'Body'`)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for rows.Next() {
		var c sdk.Content
		var raw []byte
		var status, eventID, win string
		if err := rows.Scan(&raw, &status, &eventID, &win); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatal(err)
		}
		if status != store.StatusPending || eventID != store.DigestEventPrefix+win {
			t.Errorf("digest %s: status %s, event_id %s", win, status, eventID)
		}
		bodies = append(bodies, c.Subject+": "+c.Body)
	}
	want = []string{"3 new reservations: #0 #1 #2 ", "2 new reservations: #100 #101 ", "3 new reservations: #3 #4 #5 "}
	if strings.Join(bodies, "|") != strings.Join(want, "|") {
		t.Fatalf("digests %q, want %q", bodies, want)
	}
	// Every item is DIGESTED into exactly one existing digest of its own
	// window; the cancelled one stays CANCELLED.
	if n := count(t, db, `SELECT count(*) FROM deliveries i WHERE i.status = 'DIGESTED' AND EXISTS (
			SELECT 1 FROM deliveries d WHERE d.event_id = 'digest:' || i.digest_window::text
			AND i.last_error = 'sent in digest delivery ' || d.delivery_id::text)`); n != 8 {
		t.Fatalf("%d items digested into their window's digest, want 8", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE event_id = 'r1-6' AND channel = 'EMAIL' AND status = 'CANCELLED'`); n != 1 {
		t.Fatal("the cancelled item is no longer CANCELLED")
	}
}

// TestDigestTwoFlushersFlushEveryWindowOnce opens 600 windows (one item
// each, 300 recipients × 2 keys), closes them all and lets four flushers
// race: each window is flushed by exactly one.
func TestDigestTwoFlushersFlushEveryWindowOnce(t *testing.T) {
	t.Parallel()
	db, rs := setup(t, 300)
	for i := range 300 {
		for _, r := range []int{1, 2} {
			enqueue(t, db, fmt.Sprintf("e%d-%d", i, r), fmt.Sprintf(`{"manager": "m%d", "restaurant": %d, "n": %d}`, i, r, i))
		}
	}
	relayAll(t, db, rs)
	if n := count(t, db, `SELECT count(*) FROM digest_windows`); n != 600 {
		t.Fatalf("%d windows, want 600", n)
	}
	if _, err := db.Pool.Exec(context.Background(), `UPDATE digest_windows SET closes_at = now()`); err != nil {
		t.Fatal(err)
	}
	flushConcurrently(t, db, rs, 4)
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE event_id LIKE 'digest:%'`); n != 600 {
		t.Fatalf("%d digest deliveries, want 600", n)
	}
	if n := count(t, db, `SELECT count(DISTINCT digest_window) FROM deliveries WHERE event_id LIKE 'digest:%'`); n != 600 {
		t.Fatalf("%d windows have a digest, want 600 (one each)", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE channel = 'EMAIL' AND status = 'DIGESTED'`); n != 600 {
		t.Fatalf("%d items digested, want 600", n)
	}
}

// TestDigestWorkersOfTwoDaemonsFlushEveryWindowOnce opens 600 windows (300
// recipients × 2 keys), closes them all at once (a wave, as one burst of
// events makes a window later) and runs two flushers as two daemons do,
// each with three workers claiming 50 windows a transaction, so the extra
// workers join: each window is flushed exactly once, every item is in
// its window's digest, and the flushers go on running once it is done.
func TestDigestWorkersOfTwoDaemonsFlushEveryWindowOnce(t *testing.T) {
	t.Parallel()
	db, rs := setup(t, 300)
	for i := range 300 {
		for _, r := range []int{1, 2} {
			enqueue(t, db, fmt.Sprintf("e%d-%d", i, r), fmt.Sprintf(`{"manager": "m%d", "restaurant": %d, "n": %d}`, i, r, i))
		}
	}
	relayAll(t, db, rs)
	if _, err := db.Pool.Exec(context.Background(), `UPDATE digest_windows SET closes_at = now()`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var kicks atomic.Int64
	done := make(chan error, 2)
	for range 2 {
		f := digest.New(db.Pool, func() *rules.RuleSet { return rs }, func() { kicks.Add(1) }, hclog.NewNullLogger(),
			digest.Config{Workers: 3, BatchSize: 50, PollInterval: 50 * time.Millisecond})
		go func() { done <- f.Run(ctx) }()
	}
	testenv.Eventually(t, 2*time.Minute, func() bool {
		return count(t, db, `SELECT count(*) FROM digest_windows`) == 0
	}, "every window flushed")
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE event_id LIKE 'digest:%'`); n != 600 {
		t.Fatalf("%d digest deliveries, want 600", n)
	}
	if n := count(t, db, `SELECT count(DISTINCT digest_window) FROM deliveries WHERE event_id LIKE 'digest:%'`); n != 600 {
		t.Fatalf("%d windows have a digest, want 600 (one each)", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries i WHERE i.status = 'DIGESTED' AND EXISTS (
			SELECT 1 FROM deliveries d WHERE d.event_id = 'digest:' || i.digest_window::text
			AND i.last_error = 'sent in digest delivery ' || d.delivery_id::text)`); n != 600 {
		t.Fatalf("%d items digested into their window's digest, want 600", n)
	}
	// The publisher is kicked per committed batch: at least 600/50.
	if k := kicks.Load(); k < 12 {
		t.Fatalf("publisher kicked %d times, want one per batch (≥ 12)", k)
	}
}
