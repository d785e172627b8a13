package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// TestDeliveryTransitionsOnlyMoveForward walks one delivery through the
// state machine and checks that late or repeated updates cannot move it
// back or record an attempt twice.
func TestDeliveryTransitionsOnlyMoveForward(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	id := insertOneDelivery(t, db, 2)
	var tx pgx.Tx
	var err error
	status := func() (string, int) {
		var s string
		var a int
		if err := db.Pool.QueryRow(ctx, `SELECT status, attempts FROM deliveries WHERE delivery_id = $1`, id).Scan(&s, &a); err != nil {
			t.Fatal(err)
		}
		return s, a
	}
	// The publisher claims the delivery (PUBLISHED, not yet committed).
	pub, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Rollback(ctx)
	rows, err := store.ClaimForPublish(ctx, pub, store.ClaimPending, 10, time.Minute)
	if err != nil || len(rows) != 1 || rows[0].Attempt != 1 || rows[0].ID != id || rows[0].Prev != store.StatusPending {
		t.Fatalf("claim for publish: %+v %v", rows, err)
	}
	// The listener may see the message before the publisher commits: it
	// still finds the delivery waiting for attempt 1.
	loaded, err := store.LoadForSend(ctx, db.Pool, []store.Ref{{ID: id, Attempt: 1}})
	if err != nil || len(loaded) != 1 || loaded[0].Attempt != 1 {
		t.Fatalf("load for send: %v %v", loaded, err)
	}
	if !json.Valid(loaded[0].Recipient) || !json.Valid(loaded[0].Content) || string(loaded[0].Content) != "{}" {
		t.Fatalf("load for send: recipient %q content %q, want the stored JSON documents", loaded[0].Recipient, loaded[0].Content)
	}
	// Its outcome waits for the publisher's commit, then applies.
	out := store.Outcome{ID: id, Attempt: 1, Kind: "retryable", Error: "busy", Status: store.StatusRetry, NextAttemptAt: time.Now(), StartedAt: time.Now()}
	recorded := make(chan error, 1)
	go func() {
		n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{out})
		if err == nil && n != 1 {
			err = fmt.Errorf("moved %d rows, want 1", n)
		}
		recorded <- err
	}()
	if err := pub.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-recorded; err != nil {
		t.Fatalf("record retry: %v", err)
	}
	if n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{out}); err != nil || n != 0 {
		t.Fatalf("second record of the same attempt moved %d rows (%v)", n, err)
	}
	if s, a := status(); s != store.StatusRetry || a != 1 {
		t.Fatalf("after retry: %s/%d", s, a)
	}
	// A stale message of attempt 1 cannot start attempt 2.
	if c, _ := store.LoadForSend(ctx, db.Pool, []store.Ref{{ID: id, Attempt: 1}}); len(c) != 0 {
		t.Fatal("stale message loaded a retrying delivery")
	}
	// A retry whose message the broker nacked goes back to RETRY.
	claimRetry := func() (pgx.Tx, []store.OutRow) {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := store.ClaimForPublish(ctx, tx, store.ClaimRetry, 10, time.Minute)
		if err != nil || len(rows) != 1 || rows[0].Attempt != 2 || rows[0].Prev != store.StatusRetry {
			t.Fatalf("claim retry: %+v %v", rows, err)
		}
		return tx, rows
	}
	tx, rows = claimRetry()
	if err := store.RevertPublished(ctx, tx, rows); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if s, _ := status(); s != store.StatusRetry {
		t.Fatalf("after nack: %s, want RETRY", s)
	}
	tx, _ = claimRetry()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	c2, err := store.LoadForSend(ctx, db.Pool, []store.Ref{{ID: id, Attempt: 2}})
	if err != nil || len(c2) != 1 {
		t.Fatalf("attempt 2 load: %v %v", c2, err)
	}
	sent := store.Outcome{ID: id, Attempt: 2, Kind: "sent", Provider: "p", ProviderMessageID: "m1", Status: store.StatusSent, StartedAt: time.Now()}
	if n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{sent}); err != nil || n != 1 {
		t.Fatalf("record sent: %d %v", n, err)
	}
	// No claim of any kind takes a SENT delivery back.
	tx, err = db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []store.ClaimKind{store.ClaimPending, store.ClaimRetry, store.ClaimStale} {
		if rows, err := store.ClaimForPublish(ctx, tx, kind, 10, 0); err != nil || len(rows) != 0 {
			t.Fatalf("claim kind %d took %v (%v)", kind, rows, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if s, a := status(); s != store.StatusSent || a != 2 {
		t.Fatalf("after claims: %s/%d, want SENT/2", s, a)
	}
	var attempts int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM delivery_attempts WHERE delivery_id = $1`, id).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 2 {
		t.Fatalf("audit rows = %d, want 2", attempts)
	}
	// A SENDING row left by an earlier version of Herald, whose lease
	// expired, goes back to RETRY, logged as lost.
	if _, err := db.Pool.Exec(ctx, `UPDATE deliveries SET status = 'SENDING', attempts = 1, max_attempts = 3, lease_until = now() - interval '1s'
		WHERE delivery_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM delivery_attempts WHERE delivery_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if n, err := store.ExpireLeases(ctx, db.Pool, 3, 0); err != nil || n != 1 {
		t.Fatalf("expire leases: %d %v", n, err)
	}
	if s, _ := status(); s != store.StatusRetry {
		t.Fatalf("after lease expiry: %s, want RETRY", s)
	}
}

// TestNotAttemptedOutcomeKeepsAttempts records an outcome no provider was
// handed: the delivery waits as RETRY with its attempt count unchanged and
// no attempt is logged, so the same attempt number can be tried again.
func TestNotAttemptedOutcomeKeepsAttempts(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	id := insertOneDelivery(t, db, 1)
	for range 3 {
		out := store.Outcome{ID: id, Attempt: 1, Kind: "unavailable", Error: "no provider available", Status: store.StatusRetry,
			NotAttempted: true, NextAttemptAt: time.Now(), StartedAt: time.Now()}
		if n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{out}); err != nil || n != 0 {
			t.Fatalf("record not-attempted: %d attempts logged, %v", n, err)
		}
	}
	var status string
	var attempts, logged int
	if err := db.Pool.QueryRow(ctx, `SELECT status, attempts, (SELECT count(*) FROM delivery_attempts) FROM deliveries`).
		Scan(&status, &attempts, &logged); err != nil {
		t.Fatal(err)
	}
	if status != store.StatusRetry || attempts != 0 || logged != 0 {
		t.Fatalf("after three not-attempted outcomes: %s, %d attempts, %d logged; want RETRY, 0, 0", status, attempts, logged)
	}
	sent := store.Outcome{ID: id, Attempt: 1, Kind: "sent", Status: store.StatusSent, StartedAt: time.Now()}
	if n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{sent}); err != nil || n != 1 {
		t.Fatalf("record sent: %d %v", n, err)
	}
}

// insertOneDelivery writes one PENDING EMAIL delivery (and its
// notification) through the relay's InsertFanout and returns its id.
func insertOneDelivery(t *testing.T, db *testenv.DB, maxAttempts int) string {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	note := store.NewNotification{ID: "0190d0a0-0000-7000-8000-0000000000aa", TenantID: "t", EventID: "e", UserID: "u", EventType: "X", Severity: "info", CreatedAt: time.Now()}
	del := store.NewDelivery{NotificationID: note.ID, TenantID: "t", EventID: "e", EventType: "X", UserID: "u", UserType: "CUSTOMER",
		Channel: "EMAIL", Severity: "info", Status: store.StatusPending, MaxAttempts: maxAttempts, NextAttemptAt: time.Now()}
	if _, _, err := store.InsertFanout(ctx, tx, []store.NewNotification{note}, []store.NewDelivery{del}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var id string
	if err := db.Pool.QueryRow(ctx, `SELECT delivery_id::text FROM deliveries`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}
