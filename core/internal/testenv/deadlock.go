package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
)

// EventToCancel writes event eventID of tenant as processed, with two
// deliveries PENDING (channels C0 and C1), and returns their ids, the
// lower first: the order herald_cancel locks them in.
func EventToCancel(t testing.TB, db *DB, tenant, eventID string) (low, high string) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO event_outbox (tenant_id, event_id, event_type, status, processed_at)
			VALUES ($1, $2, 'X', 'PROCESSED', now())`, tenant, eventID); err != nil {
			return err
		}
		note := store.NewNotification{ID: uuid.Must(uuid.NewV7()).String(), TenantID: tenant, EventID: eventID, UserID: "u", EventType: "X",
			Severity: "info", CreatedAt: time.Now()}
		var dels []store.NewDelivery
		for _, ch := range []string{"C0", "C1"} {
			dels = append(dels, store.NewDelivery{NotificationID: note.ID, TenantID: tenant, EventID: eventID, EventType: "X", UserID: "u",
				UserType: "CUSTOMER", Channel: ch, Severity: "info", Status: store.StatusPending, MaxAttempts: 3, NextAttemptAt: time.Now()})
		}
		_, written, err := store.InsertFanout(ctx, tx, []store.NewNotification{note}, dels)
		if err != nil {
			return err
		}
		if len(written) != 2 {
			t.Fatalf("event %s: wrote %d deliveries, want 2", eventID, len(written))
		}
		low, high = written[0].ID, written[1].ID
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var lowFirst bool
	if err := db.Pool.QueryRow(ctx, `SELECT $1::uuid < $2::uuid`, low, high).Scan(&lowFirst); err != nil {
		t.Fatal(err)
	}
	if !lowFirst {
		low, high = high, low
	}
	return low, high
}

// CancelLosesDeadlock runs cancel, which must cancel the event whose two
// deliveries are low and high (EventToCancel) through herald_cancel, while
// another session forces that cancel's first transaction into a deadlock
// PostgreSQL resolves by aborting the cancel (40P01): the other session
// locks high; the cancel locks low, then waits for high; the other
// session then wants low. The other session waits with deadlock_timeout
// at 10s, the cancel's backend at the server's (1s by default), so the
// cancel's backend is the one that finds the cycle and is aborted. The
// other session then commits, and a cancel that runs again succeeds.
// CancelLosesDeadlock returns once cancel did, and fails the test when
// the other session was the victim or cancel did not return in time.
func CancelLosesDeadlock(t testing.TB, db *DB, low, high string, cancel func()) {
	t.Helper()
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	su := SuperuserURL(t, db)
	other, err := pgx.Connect(ctx, su)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	watch, err := pgx.Connect(ctx, su)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(context.Background())
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SET LOCAL deadlock_timeout = '10s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE deliveries SET updated_at = now() WHERE delivery_id = $1`, high); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		cancel()
	}()
	// The cancel waits for high: it holds low (it locks in delivery_id
	// order, and nothing else holds the event's row).
	Eventually(t, 30*time.Second, func() bool {
		var n int
		err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND query LIKE '%herald_cancel(%'`).Scan(&n)
		return err == nil && n == 1
	}, "no herald_cancel waits for delivery %s", high)
	if _, err := tx.Exec(ctx, `UPDATE deliveries SET updated_at = now() WHERE delivery_id = $1`, low); err != nil {
		t.Fatalf("the other session lost the deadlock, not the cancel: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the cancel did not return within a minute")
	}
}
