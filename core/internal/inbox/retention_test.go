package inbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
)

const day = 24 * time.Hour

// age moves notifications ids back in time: created createdDaysAgo days
// ago, and archived archivedDaysAgo days ago when they are archived.
func (w *world) age(t *testing.T, ids []string, createdDaysAgo, archivedDaysAgo int) {
	t.Helper()
	ctx := context.Background()
	if _, err := w.db.Pool.Exec(ctx, `SELECT herald_ensure_partitions('notifications', now() - make_interval(days => $1), now())`,
		createdDaysAgo); err != nil {
		t.Fatal(err)
	}
	if _, err := w.db.Pool.Exec(ctx, `UPDATE notifications SET created_at = now() - make_interval(days => $2),
		archived_at = CASE WHEN archived_at IS NOT NULL THEN now() - make_interval(days => $3) END
		WHERE notification_id = ANY($1::uuid[])`, ids, createdDaysAgo, archivedDaysAgo); err != nil {
		t.Fatal(err)
	}
}

// noDrift fails when an unread counter differs from a recount.
func (w *world) noDrift(t *testing.T) {
	t.Helper()
	var drift []store.Drift
	err := pgx.BeginFunc(context.Background(), w.db.Pool, func(tx pgx.Tx) error {
		var err error
		drift, err = store.RepairCounters(context.Background(), tx, "")
		return err
	})
	if err != nil || len(drift) != 0 {
		t.Fatalf("counters differ from a recount: %+v %v", drift, err)
	}
}

// TestArchivedSweepLeavesTheInboxAsItWas: alice and bob archive and read
// notifications through the API; the ones archived 40 days ago are swept
// (retention.archived_notifications 30 days). Every user's inbox list
// (active and unread) and unread count are exactly what they were, the
// archived list keeps only the rows archived lately, and the counters
// equal a recount.
func TestArchivedSweepLeavesTheInboxAsItWas(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	var notes []note
	for range 12 {
		notes = append(notes, note{tenant: "a", user: "alice"}, note{tenant: "a", user: "bob"}, note{tenant: "b", user: "carol"})
	}
	ids := w.seed(t, notes...)
	toks := map[string]string{"alice": w.token(t, "a", "alice", ""), "bob": w.token(t, "a", "bob", ""), "carol": w.token(t, "b", "carol", "")}
	var old, recent []string
	for i, id := range ids {
		tok := toks[notes[i].user]
		if i%4 == 0 {
			if r := w.do(t, "POST", "/v1/inbox/"+id+"/read", tok, ""); r.code != 200 {
				t.Fatalf("read: %d %s", r.code, r.body)
			}
		}
		if round := i / 3; round%3 != 1 {
			if r := w.do(t, "POST", "/v1/inbox/"+id+"/archive", tok, ""); r.code != 200 {
				t.Fatalf("archive: %d %s", r.code, r.body)
			}
			if round%4 == 0 {
				recent = append(recent, id)
			} else {
				old = append(old, id)
			}
		}
	}
	w.age(t, old, 45, 40)
	w.age(t, recent, 45, 2)
	type view struct {
		active, unread, archived []string
		count                    int64
	}
	look := func(u string) view {
		pageIDs := func(q string) []string {
			var out []string
			for _, n := range w.page(t, toks[u], q).Items {
				out = append(out, fmt.Sprintf("%+v", n))
			}
			return out
		}
		return view{pageIDs("limit=100"), pageIDs("limit=100&status=unread"), pageIDs("limit=100&status=archived"), w.unread(t, toks[u])}
	}
	before := map[string]view{}
	for u := range toks {
		before[u] = look(u)
	}
	res, err := store.ApplySweeps(ctx, w.pools.Worker, store.Retention{ArchivedNotifications: 30 * day}, time.Now(), store.SweepLimits{BatchSize: 5})
	if err != nil {
		t.Fatal(err)
	}
	var swept int64
	for _, r := range res {
		swept += r.Deleted
	}
	if swept != int64(len(old)) {
		t.Fatalf("swept %d notifications, want the %d archived 40 days ago: %+v", swept, len(old), res)
	}
	for u := range toks {
		after := look(u)
		if !reflect.DeepEqual(after.active, before[u].active) || !reflect.DeepEqual(after.unread, before[u].unread) || after.count != before[u].count {
			t.Errorf("%s's inbox changed:\nbefore %+v\n after %+v", u, before[u], after)
		}
		if len(after.archived) >= len(before[u].archived) || len(after.archived) == 0 {
			t.Errorf("%s's archived list: %d rows before, %d after; want only the recent ones", u, len(before[u].archived), len(after.archived))
		}
	}
	var left int
	if err := w.db.Pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE archived_at IS NOT NULL`).Scan(&left); err != nil || left != len(recent) {
		t.Fatalf("%d archived notifications left (%v), want %d", left, err, len(recent))
	}
	w.noDrift(t)
}

// TestSweepsRaceInboxWrites: while the sweeps delete tenant a's old
// notifications (its own period of 35 days: unread ones leave the
// counters) and its notifications archived long ago, in batches of 3,
// sixteen clients read, unread, archive, unarchive and read-all the same
// rows through the API. Every request answers 200, or 404 for a row
// already swept; afterwards every counter equals a recount and no old row
// is left.
func TestSweepsRaceInboxWrites(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var notes []note
	for i := range 60 {
		notes = append(notes, note{tenant: "a", user: "alice"}, note{tenant: "a", user: "bob"})
		if i%6 == 0 {
			key := fmt.Sprintf("s%d", i)
			notes = append(notes, note{tenant: "a", user: "alice", share: key}, note{tenant: "a", user: "bob", share: key})
		}
	}
	ids := w.seed(t, notes...)
	owner := map[string]string{}
	for i, n := range notes {
		owner[ids[i]] = n.user
	}
	toks := map[string]string{"alice": w.token(t, "a", "alice", ""), "bob": w.token(t, "a", "bob", "")}
	// Two thirds old (45 days), of which every other one archived 40 days
	// ago.
	var old []string
	for i, id := range ids {
		if i%3 != 0 {
			old = append(old, id)
			if i%2 == 0 {
				if r := w.do(t, "POST", "/v1/inbox/"+id+"/archive", toks[owner[id]], ""); r.code != 200 {
					t.Fatalf("archive: %d %s", r.code, r.body)
				}
			}
		}
	}
	w.age(t, old, 45, 40)
	w.noDrift(t)
	r := store.Retention{Notifications: 365 * day, ArchivedNotifications: 30 * day,
		Tenants: map[string]store.TenantRetention{"a": {Notifications: 35 * day}}}
	var clients sync.WaitGroup
	var stop atomic.Bool
	errs := make(chan string, 1000)
	ops := []string{"read", "unread", "archive", "unarchive", "read-all"}
	for g := range 16 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 11))
			for range 40 {
				id := ids[rng.IntN(len(ids))]
				tok := toks[owner[id]]
				var rep reply
				if op := ops[rng.IntN(len(ops))]; op == "read-all" {
					rep = w.do(t, "POST", "/v1/inbox/read-all", tok, "")
				} else {
					rep = w.do(t, "POST", "/v1/inbox/"+id+"/"+op, tok, "")
				}
				if rep.code != 200 && rep.code != 404 {
					errs <- fmt.Sprintf("%d %s", rep.code, rep.body)
				}
			}
		}()
	}
	sweeper := make(chan error, 1)
	go func() {
		passes := 0
		for {
			_, err := store.ApplySweeps(ctx, w.pools.Worker, r, time.Now(), store.SweepLimits{BatchSize: 3})
			passes++
			if err != nil || (stop.Load() && passes > 1) {
				sweeper <- err
				return
			}
		}
	}()
	clients.Wait()
	stop.Store(true)
	select {
	case err := <-sweeper:
		if err != nil {
			t.Fatalf("sweep during the inbox writes: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the sweeps did not finish within 2 minutes")
	}
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	var left int
	if err := w.db.Pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE created_at < now() - interval '35 days'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d old notifications left after the sweeps (%v)", left, err)
	}
	for _, u := range []string{"alice", "bob"} {
		if got, want := w.unread(t, toks[u]), w.actual(t, "a", u); got != want {
			t.Errorf("%s: counter %d, rows %d", u, got, want)
		}
	}
	w.noDrift(t)
}
