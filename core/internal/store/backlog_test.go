package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/jackc/pgx/v5"
)

func TestReadBacklogCountsWaitingRowsThroughPartialIndexes(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	b, err := store.ReadBacklog(ctx, db.Pool)
	if err != nil || b != (store.Backlog{}) {
		t.Fatalf("empty tables: %+v %v", b, err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	note := store.NewNotification{ID: "0190d0a0-0000-7000-8000-0000000000bb", TenantID: "t", EventID: "e", UserID: "u", EventType: "X", Severity: "info", CreatedAt: time.Now()}
	var dels []store.NewDelivery
	for _, d := range []struct {
		channel, status string
		due             time.Time
	}{
		{"EMAIL", store.StatusPending, time.Now().Add(-time.Minute)},
		{"PUSH", store.StatusPending, time.Now()},
		{"SMS", store.StatusRetry, time.Now().Add(time.Minute)},
		{"SLACK", store.StatusDeferred, time.Now().Add(time.Hour)},
		{"WEBSOCKET", store.StatusPublished, time.Now().Add(-time.Hour)},
	} {
		dels = append(dels, store.NewDelivery{NotificationID: note.ID, TenantID: "t", EventID: "e", EventType: "X", UserID: "u", UserType: "CUSTOMER",
			Channel: d.channel, Severity: "info", Status: d.status, MaxAttempts: 3, NextAttemptAt: d.due})
	}
	if _, _, err := store.InsertFanout(ctx, tx, []store.NewNotification{note}, dels); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO event_outbox (tenant_id, event_id, event_type, available_at)
		VALUES ('t', 'e1', 'X', now() - interval '30 seconds'), ('t', 'e2', 'X', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b, err = store.ReadBacklog(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if b.EventsPending != 2 || b.Pending != 2 || b.Retry != 1 || b.Deferred != 1 {
		t.Fatalf("backlog %+v, want 2 events, 2 pending, 1 retry, 1 deferred", b)
	}
	// The ages are of the oldest row already due: a minute and 30s ago.
	if b.OldestPendingAge < 55*time.Second || b.OldestPendingAge > 10*time.Minute ||
		b.OldestEventAge < 25*time.Second || b.OldestEventAge > 10*time.Minute {
		t.Fatalf("ages: pending %v, event %v", b.OldestPendingAge, b.OldestEventAge)
	}

	// Every part of the query can be answered from the partial indexes of
	// the waiting rows (the planner picks them once the tables are large;
	// with sequential scans off it must show it can).
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "EXPLAIN "+store.BacklogSQL, store.BacklogCap)
		if err != nil {
			return err
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		plan := strings.Join(lines, "\n")
		// deliveries is partitioned (migration 0021): each month's
		// partition has the partial indexes, named after the parent's.
		cur := monthName("deliveries", time.Now())
		for _, idx := range []string{"event_outbox_pending", cur + "_pending", cur + "_due", "deliveries_default_pending", "digest_windows_due"} {
			if !strings.Contains(plan, idx) {
				t.Errorf("the backlog query does not use %s:\n%s", idx, plan)
			}
		}
		t.Logf("plan:\n%s", plan)
		if strings.Contains(plan, "Seq Scan") {
			t.Errorf("the backlog query scans a table:\n%s", plan)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
