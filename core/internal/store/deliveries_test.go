package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestDeliveryTransitionsOnlyMoveForward walks one delivery through the
// state machine and checks that late or repeated updates cannot move it
// back or record an attempt twice.
func TestDeliveryTransitionsOnlyMoveForward(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	note := store.NewNotification{ID: "0190d0a0-0000-7000-8000-0000000000aa", TenantID: "t", EventID: "e", UserID: "u", EventType: "X", Severity: "info"}
	del := store.NewDelivery{NotificationID: note.ID, TenantID: "t", EventID: "e", EventType: "X", UserID: "u", UserType: "CUSTOMER",
		Channel: "EMAIL", Severity: "info", Status: store.StatusPending, MaxAttempts: 2, NextAttemptAt: time.Now()}
	if _, _, err := store.InsertFanout(ctx, tx, []store.NewNotification{note}, []store.NewDelivery{del}); err != nil {
		t.Fatal(err)
	}
	rows, err := store.ClaimForPublish(ctx, tx, store.ClaimPending, 10, time.Minute)
	if err != nil || len(rows) != 1 || rows[0].Attempt != 1 {
		t.Fatalf("claim for publish: %+v %v", rows, err)
	}
	id := rows[0].ID
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	status := func() (string, int) {
		var s string
		var a int
		if err := db.Pool.QueryRow(ctx, `SELECT status, attempts FROM deliveries WHERE delivery_id = $1`, id).Scan(&s, &a); err != nil {
			t.Fatal(err)
		}
		return s, a
	}
	// The consumer may see the message before the publisher's confirm.
	claimed, err := store.ClaimForSend(ctx, db.Pool, []store.Ref{{ID: id, Attempt: 1}}, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim for send: %v %v", claimed, err)
	}
	// A duplicate message for the same attempt claims nothing.
	again, err := store.ClaimForSend(ctx, db.Pool, []store.Ref{{ID: id, Attempt: 1}}, time.Minute)
	if err != nil || len(again) != 0 {
		t.Fatalf("duplicate claim: %v %v", again, err)
	}
	out := store.Outcome{ID: id, Attempt: 1, Kind: "retryable", Error: "busy", Status: store.StatusRetry, NextAttemptAt: time.Now(), StartedAt: time.Now()}
	if n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{out}); err != nil || n != 1 {
		t.Fatalf("record retry: %d %v", n, err)
	}
	if n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{out}); err != nil || n != 0 {
		t.Fatalf("second record of the same attempt moved %d rows (%v)", n, err)
	}
	if s, a := status(); s != store.StatusRetry || a != 1 {
		t.Fatalf("after retry: %s/%d", s, a)
	}
	// A stale message of attempt 1 cannot start attempt 2.
	if c, _ := store.ClaimForSend(ctx, db.Pool, []store.Ref{{ID: id, Attempt: 1}}, time.Minute); len(c) != 0 {
		t.Fatal("stale message claimed a retrying delivery")
	}
	c2, err := store.ClaimForSend(ctx, db.Pool, []store.Ref{{ID: id, Attempt: 2}}, time.Minute)
	if err != nil || len(c2) != 1 {
		t.Fatalf("attempt 2 claim: %v %v", c2, err)
	}
	sent := store.Outcome{ID: id, Attempt: 2, Kind: "sent", Provider: "p", ProviderMessageID: "m1", Status: store.StatusSent, StartedAt: time.Now()}
	if n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{sent}); err != nil || n != 1 {
		t.Fatalf("record sent: %d %v", n, err)
	}
	// A late confirm must not move SENT back to PUBLISHED.
	tx, err = db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.MarkPublished(ctx, tx, []string{id}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if s, a := status(); s != store.StatusSent || a != 2 {
		t.Fatalf("after late confirm: %s/%d, want SENT/2", s, a)
	}
	var attempts int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM delivery_attempts WHERE delivery_id = $1`, id).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 2 {
		t.Fatalf("audit rows = %d, want 2", attempts)
	}
	// An expired lease sends the attempt back to RETRY, logged as lost.
	if _, err := db.Pool.Exec(ctx, `UPDATE deliveries SET status = 'SENDING', attempts = 1, max_attempts = 3, lease_until = now() - interval '1s'
		WHERE delivery_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM delivery_attempts WHERE delivery_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if n, err := store.ExpireLeases(ctx, db.Pool); err != nil || n != 1 {
		t.Fatalf("expire leases: %d %v", n, err)
	}
	if s, _ := status(); s != store.StatusRetry {
		t.Fatalf("after lease expiry: %s, want RETRY", s)
	}
}
