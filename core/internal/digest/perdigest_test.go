package digest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/digest"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// perDigestRules keeps the inbox per digest: each manager's reservations
// of one restaurant are one inbox row per window; WEBSOCKET still goes out
// per event (with its own template: the inbox's reads .items).
const perDigestRules = `
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
    max_items = 10
    inbox     = "per_digest"
  }
  inbox {
    title = "{{ len .items }} new reservations"
    body  = "{{ range .items }}#{{ .payload.n }} {{ end }}"
  }
  template "WEBSOCKET" { title = "Reservation {{ .payload.n }}" }
  template "EMAIL" {
    subject = "{{ len .items }} new reservations"
    body    = "{{ range .items }}#{{ .payload.n }} {{ end }}"
  }
}
`

// frames records what a flusher announces to live sessions.
type frames struct {
	mu  sync.Mutex
	got []string
}

func (f *frames) Notify(_ context.Context, tenant, user string, frame []byte) {
	var fr digest.Frame
	_ = json.Unmarshal(frame, &fr)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, fmt.Sprintf("%s/%s %s digest=%v %s", tenant, user, fr.Type, fr.Digest, fr.Title))
}

func (f *frames) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

// TestDigestPerDigestInboxOneRowPerWindow relays seven reservations for
// m0 and two for m1 (one restaurant each) and one whose key renders empty,
// cancels one of m0's, then flushes with two flushers at once: the events
// wrote no inbox row of their own (but the empty key's, which keeps its
// event's row), each manager gets exactly one row per window ("6 new
// reservations" without the cancelled one), unread counts are one per
// row, the items name their row, and each row is announced live once.
func TestDigestPerDigestInboxOneRowPerWindow(t *testing.T) {
	t.Parallel()
	db, rs := setupRules(t, 2, perDigestRules)
	ctx := context.Background()
	for i := range 7 {
		enqueue(t, db, fmt.Sprintf("a%d", i), fmt.Sprintf(`{"manager": "m0", "restaurant": 1, "n": %d}`, i))
	}
	enqueue(t, db, "b0", `{"manager": "m1", "restaurant": 2, "n": 100}`)
	enqueue(t, db, "b1", `{"manager": "m1", "restaurant": 2, "n": 101}`)
	enqueue(t, db, "empty", `{"manager": "m1", "restaurant": "", "n": 200}`)
	relayAll(t, db, rs)

	// Only the event whose key renders empty has a row of its own.
	if n := count(t, db, `SELECT count(*) FROM notifications`); n != 1 {
		t.Fatalf("%d inbox rows after the relay, want 1 (the empty key's own)", n)
	}
	if n := count(t, db, `SELECT count(*) FROM notifications WHERE event_id = 'empty'`); n != 1 {
		t.Fatal("the event whose key renders empty lost its inbox row")
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE channel = $1 AND status = 'WAITING' AND hold = 'digest'`, channel.Inbox); n != 9 {
		t.Fatalf("%d inbox items waiting, want 9", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE channel = 'WEBSOCKET' AND status = 'PENDING'`); n != 10 {
		t.Fatalf("%d WEBSOCKET deliveries pending, want 10 (one per event)", n)
	}
	if n := count(t, db, `SELECT coalesce(sum(unread), 0)::int FROM notification_counters`); n != 1 {
		t.Fatalf("unread %d before the flush, want 1", n)
	}

	c, err := store.CancelEvent(ctx, db.Pool, "t1", "a6")
	if err != nil {
		t.Fatal(err)
	}
	if c.Now[channel.Inbox] != 1 || c.Now["EMAIL"] != 1 {
		t.Fatalf("cancel of a6 cancelled %v, want its inbox and EMAIL items", c.Now)
	}

	// Not due yet: nothing happens.
	rec := &frames{}
	flushWith(t, db, rs, rec, 2)
	if n := count(t, db, `SELECT count(*) FROM notifications`); n != 1 {
		t.Fatalf("%d inbox rows before the windows close, want 1", n)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE digest_windows SET closes_at = now()`); err != nil {
		t.Fatal(err)
	}
	flushWith(t, db, rs, rec, 2)
	if n := count(t, db, `SELECT count(*) FROM digest_windows`); n != 0 {
		t.Fatalf("%d windows left", n)
	}

	var got []string
	rows, err := db.Pool.Query(ctx, `SELECT user_id || ': ' || title || ': ' || body || ' ' || (data->'digest'->>'count')
		FROM notifications WHERE event_id LIKE 'digest:%' ORDER BY user_id`)
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
	want := []string{"m0: 6 new reservations: #0 #1 #2 #3 #4 #5  6", "m1: 2 new reservations: #100 #101  2"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("digest inbox rows %q, want %q", got, want)
	}
	for user, want := range map[string]int{"m0": 1, "m1": 2} {
		if n := count(t, db, `SELECT coalesce(sum(unread), 0)::int FROM notification_counters WHERE user_id = $1`, user); n != want {
			t.Errorf("%s: unread %d, want %d", user, n, want)
		}
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries i WHERE i.channel = $1 AND i.status = 'DIGESTED' AND EXISTS (
			SELECT 1 FROM notifications x WHERE x.event_id = 'digest:' || i.digest_window::text
			AND i.last_error = 'shown in digest inbox notification ' || x.notification_id::text)`, channel.Inbox); n != 8 {
		t.Fatalf("%d inbox items name their window's row, want 8", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE event_id = 'a6' AND channel IN ('EMAIL', $1) AND status = 'CANCELLED'`, channel.Inbox); n != 2 {
		t.Fatal("the cancelled event's items are no longer CANCELLED")
	}
	// The EMAIL digests are as with a per_event inbox.
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE event_id LIKE 'digest:%' AND channel = 'EMAIL' AND status = 'PENDING'`); n != 2 {
		t.Fatalf("%d EMAIL digests, want 2", n)
	}
	// The inbox's items are its bookkeeping: their end is no
	// delivery-status event (migration 0137); the EMAIL items' is.
	if n := count(t, db, `SELECT count(*) FROM status_events WHERE data->>'channel' = $1`, channel.Inbox); n != 0 {
		t.Errorf("%d status events of inbox items, want none", n)
	}
	if n := count(t, db, `SELECT count(*) FROM status_events WHERE data->>'channel' = 'EMAIL' AND kind IN ('delivery.digested', 'delivery.cancelled')`); n != 9 {
		t.Errorf("%d status events of EMAIL items, want 9 (8 digested, 1 cancelled)", n)
	}

	testenv.Eventually(t, 10*time.Second, func() bool { return len(rec.list()) == 2 }, "two live frames, got %q", rec.list())
	wantFrames := []string{"t1/m0 notification digest=true 6 new reservations", "t1/m1 notification digest=true 2 new reservations"}
	gotFrames := rec.list()
	if len(gotFrames) == 2 && gotFrames[0] > gotFrames[1] {
		gotFrames[0], gotFrames[1] = gotFrames[1], gotFrames[0]
	}
	if strings.Join(gotFrames, "|") != strings.Join(wantFrames, "|") {
		t.Fatalf("frames %q, want %q", gotFrames, wantFrames)
	}
}

// TestDigestPerDigestInboxRowSurvivesABrokenTemplate flushes a per_digest
// window after its rule is gone: the inbox row is still written (with
// the event type and the count) and its items are DIGESTED into it, since
// an inbox row cannot be FAILED and no item may be lost.
func TestDigestPerDigestInboxRowSurvivesABrokenTemplate(t *testing.T) {
	t.Parallel()
	db, rs := setupRules(t, 1, perDigestRules)
	ctx := context.Background()
	enqueue(t, db, "a0", `{"manager": "m0", "restaurant": 1, "n": 0}`)
	enqueue(t, db, "a1", `{"manager": "m0", "restaurant": 1, "n": 1}`)
	relayAll(t, db, rs)
	if _, err := db.Pool.Exec(ctx, `UPDATE digest_windows SET closes_at = now()`); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "other.hcl")
	if err := os.WriteFile(p, []byte(`
channel "EMAIL" { providers = [{ plugin = "sink" }] }
event "OTHER" {
  audience { user = "m0" }
  mandatory = ["EMAIL"]
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	other, err := rulesfile.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	flushWith(t, db, other, nil, 1)
	var title, body string
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT title, body, (data->'digest'->>'count')::int FROM notifications WHERE user_id = 'm0'`).Scan(&title, &body, &n); err != nil {
		t.Fatal(err)
	}
	if title != "RESERVATION_REQUESTED" || body != "2 new RESERVATION_REQUESTED" || n != 2 {
		t.Fatalf("row %q %q count %d, want the plain row of 2 items", title, body, n)
	}
	if got := count(t, db, `SELECT count(*) FROM deliveries WHERE channel = $1 AND status = 'DIGESTED'`, channel.Inbox); got != 2 {
		t.Fatalf("%d inbox items DIGESTED, want 2", got)
	}
	if got := count(t, db, `SELECT count(*) FROM deliveries WHERE channel = 'EMAIL' AND event_id LIKE 'digest:%' AND status = 'FAILED'`); got != 1 {
		t.Fatalf("%d EMAIL digests FAILED, want 1 (the rule is gone)", got)
	}
}

// flushWith runs n flushers side by side, announcing to rec (nil: none),
// until none finds a due window.
func flushWith(t *testing.T, db *testenv.DB, rs *rules.RuleSet, rec *frames, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := digest.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(), digest.Config{})
			if rec != nil {
				f.Notifier = rec
			}
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
