package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// insertPublished writes n handed-off deliveries (PUBLISHED from the
// start, as the relay writes them) of one event and returns their ids.
func insertPublished(t *testing.T, db *testenv.DB, event string, n int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var notes []store.NewNotification
		var dels []store.NewDelivery
		for i := range n {
			user := fmt.Sprintf("u%d", i)
			note := store.NewNotification{ID: uuid.NewString(), TenantID: "t", EventID: event, UserID: user, EventType: "X", Severity: "info", CreatedAt: time.Now()}
			notes = append(notes, note)
			dels = append(dels, store.NewDelivery{NotificationID: note.ID, TenantID: "t", EventID: event, EventType: "X", UserID: user,
				UserType: "CUSTOMER", Channel: "EMAIL", Severity: "info", Status: store.StatusPublished, MaxAttempts: 3,
				NextAttemptAt: time.Now(), Content: []byte(`{"body": "a rendered message of some size"}`)})
		}
		_, kept, err := store.InsertFanout(ctx, tx, notes, dels)
		for _, d := range kept {
			ids = append(ids, d.ID)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestFinalOutcomeIsHOTUpdate checks what keeps the deliveries' indexes
// from growing by one entry per outcome: recording SENT or FAILED on a
// PUBLISHED delivery changes no indexed column, so PostgreSQL updates it
// in place (HOT), and a retry, which re-enters a queue index, does not.
// The transaction's own counters say so, exactly: every final row whose
// new version found room on its page was updated HOT. (A page that all of
// its rows leave at once, in one transaction, can run out of room for the
// last new version, a little longer than the old one: that update is not
// HOT for want of space, whatever the columns; the test tells the two
// apart by the page each new version is on.)
func TestFinalOutcomeIsHOTUpdate(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	ids := insertPublished(t, db, "e1", 30)
	var outs []store.Outcome
	for i, id := range ids {
		o := store.Outcome{ID: id, Attempt: 1, Kind: "sent", Provider: "p", ProviderMessageID: "m", Status: store.StatusSent, StartedAt: time.Now()}
		switch i % 3 {
		case 1:
			o.Kind, o.Status, o.Error = "permanent", store.StatusFailed, "no such user"
		case 2:
			o.Kind, o.Status, o.Error, o.NextAttemptAt = "retryable", store.StatusRetry, "busy", time.Now().Add(time.Minute)
		}
		outs = append(outs, o)
	}
	pages := func() map[string]string {
		rows, err := db.Pool.Query(ctx, `SELECT delivery_id::text, tableoid::regclass::text || '/' || (ctid::text::point)[0] FROM deliveries`)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for rows.Next() {
			var id, page string
			if err := rows.Scan(&id, &page); err != nil {
				t.Fatal(err)
			}
			m[id] = page
		}
		return m
	}
	before := pages()
	var upd, hot int64
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		n, err := store.RecordOutcomes(ctx, tx, outs)
		if err != nil || n != len(outs) {
			return fmt.Errorf("record outcomes: %d logged, %v", n, err)
		}
		// deliveries is partitioned (migration 0021): its partitions count.
		return tx.QueryRow(ctx, `SELECT sum(pg_stat_get_xact_tuples_updated(inhrelid))::bigint,
			sum(pg_stat_get_xact_tuples_hot_updated(inhrelid))::bigint FROM pg_inherits WHERE inhparent = 'deliveries'::regclass`).Scan(&upd, &hot)
	})
	if err != nil {
		t.Fatal(err)
	}
	after := pages()
	var stayed int64
	for i, id := range ids {
		if i%3 != 2 && after[id] == before[id] {
			stayed++
		}
	}
	if upd != 30 || hot != stayed || stayed < 15 {
		t.Errorf("updates = %d, HOT = %d; want 30 updates, HOT the %d final ones whose page had room (of 20, at least 15)", upd, hot, stayed)
	}
	// The retries are found through the queue index, and the final rows
	// kept their next_attempt_at.
	var retry, moved int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE queue = 'RETRY'),
			count(*) FILTER (WHERE status IN ('SENT', 'FAILED') AND next_attempt_at > created_at + interval '10 seconds')
		FROM deliveries`).Scan(&retry, &moved); err != nil {
		t.Fatal(err)
	}
	if retry != 10 || moved != 0 {
		t.Errorf("queue RETRY rows = %d, final rows with a moved next_attempt_at = %d; want 10, 0", retry, moved)
	}
}

// TestClaimStaleSince checks the stale reclaim's reaches: a round since a
// time takes only the stale deliveries created since then (by their
// UUIDv7 ids) and not those created too recently to be stale (less than
// the reclaim age ago, a minute allowed for the clocks), whatever their
// updated_at says; a full round takes every one.
func TestClaimStaleSince(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	old := insertPublished(t, db, "old", 3)
	recent := insertPublished(t, db, "recent", 2)
	// Make the old ones two hours old by their ids (and every one stale by
	// updated_at): an id is the time it was made, then random bits.
	if _, err := db.Pool.Exec(ctx, `UPDATE deliveries SET updated_at = now() - interval '1 hour',
			delivery_id = CASE WHEN event_id = 'old'
				THEN (substr(h, 1, 8) || '-' || substr(h, 9, 4) || substr(delivery_id::text, 14))::uuid
				ELSE delivery_id END
		FROM (SELECT lpad(to_hex((extract(epoch FROM now() - interval '2 hours') * 1000)::bigint), 12, '0') AS h) x`); err != nil {
		t.Fatal(err)
	}
	claimAfter := func(reclaimAfter time.Duration, since time.Time) map[string]bool {
		got := map[string]bool{}
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			rows, err := store.ClaimStaleSince(ctx, tx, 100, reclaimAfter, since)
			for _, r := range rows {
				var ev string
				if err := tx.QueryRow(ctx, `SELECT event_id FROM deliveries WHERE delivery_id = $1`, r.ID).Scan(&ev); err != nil {
					return err
				}
				got[ev+"/"+r.ID] = true
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// stale makes every delivery stale by its updated_at (a claim
	// publishes what it takes again, with a new one).
	stale := func() {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, `UPDATE deliveries SET updated_at = now() - interval '1 hour'`); err != nil {
			t.Fatal(err)
		}
	}
	// only checks that a round took the n deliveries of event ev alone.
	only := func(round string, got map[string]bool, ev string, n int) {
		t.Helper()
		if len(got) != n {
			t.Errorf("%s took %v, want the %d %s deliveries only", round, got, n, ev)
		}
		for k := range got {
			if !strings.HasPrefix(k, ev+"/") {
				t.Errorf("%s took %s", round, k)
			}
		}
	}
	only("round since 30 minutes ago", claimAfter(30*time.Second, time.Now().Add(-30*time.Minute)), "recent", len(recent))
	stale()
	if full := claimAfter(30*time.Second, time.Time{}); len(full) != len(old)+len(recent) {
		t.Errorf("full round took %d deliveries, want %d", len(full), len(old)+len(recent))
	}
	// With a reclaim age of ten minutes the recent deliveries, created
	// just now, cannot be stale, though their updated_at says an hour:
	// a round since a time stops before them; the full round reads every
	// row.
	stale()
	only("round since 3 hours ago with a 10-minute reclaim age", claimAfter(10*time.Minute, time.Now().Add(-3*time.Hour)), "old", len(old))
	stale()
	if full := claimAfter(10*time.Minute, time.Time{}); len(full) != len(old)+len(recent) {
		t.Errorf("full round with a 10-minute reclaim age took %d deliveries, want %d", len(full), len(old)+len(recent))
	}
}
