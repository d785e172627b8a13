package maintenance_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/maintenance"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestTick: one round returns an attempt lost mid-send to RETRY (logged as
// lost, max_attempts raised so it spends no try), releases a deferred
// delivery whose quiet hours ended, leaves one still in its window, and
// kicks the publisher. A delivery that lost LostAttempts.MaxAttempts
// attempts is FAILED.
func TestTick(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	ids := insertDeliveries(t, db, "lost", "lost-thrice", "due", "quiet")
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`UPDATE deliveries SET status = 'SENDING', attempts = 1, lease_until = now() - interval '1s' WHERE delivery_id = ANY($1)`,
		[]string{ids["lost"], ids["lost-thrice"]})
	for i := 1; i <= maintenance.LostAttempts.MaxAttempts; i++ {
		exec(`INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, error, started_at, delivery_created_at)
			SELECT tenant_id, delivery_id, $2, 'lost', 'earlier', now(), created_at FROM deliveries WHERE delivery_id = $1`, ids["lost-thrice"], -i)
	}
	exec(`UPDATE deliveries SET status = 'DEFERRED', next_attempt_at = now() - interval '1s' WHERE delivery_id = $1`, ids["due"])
	exec(`UPDATE deliveries SET status = 'DEFERRED', next_attempt_at = now() + interval '1h' WHERE delivery_id = $1`, ids["quiet"])

	var kicks atomic.Int32
	m := maintenance.New(db.Pool, time.Hour, func() { kicks.Add(1) }, hclog.NewNullLogger())
	m.Tick(ctx)

	got := map[string]string{}
	for name, id := range ids {
		var status string
		var maxAttempts int
		if err := db.Pool.QueryRow(ctx, `SELECT status, max_attempts FROM deliveries WHERE delivery_id = $1`, id).Scan(&status, &maxAttempts); err != nil {
			t.Fatal(err)
		}
		got[name] = fmt.Sprintf("%s/%d", status, maxAttempts)
	}
	want := map[string]string{"lost": "RETRY/6", "lost-thrice": "FAILED/6", "due": "PENDING/5", "quiet": "DEFERRED/5"}
	for name := range want {
		if got[name] != want[name] {
			t.Errorf("%s: %s, want %s", name, got[name], want[name])
		}
	}
	if kicks.Load() != 1 {
		t.Errorf("publisher kicked %d times, want 1", kicks.Load())
	}
}

// insertDeliveries inserts one PENDING delivery (max_attempts 5) per name,
// for users of those names, and returns their ids by name.
func insertDeliveries(t *testing.T, db *testenv.DB, names ...string) map[string]string {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var notes []store.NewNotification
	var dels []store.NewDelivery
	for i, name := range names {
		note := store.NewNotification{ID: fmt.Sprintf("0190d0a0-0000-7000-8000-0000000000%02d", i), TenantID: "t", EventID: "e",
			UserID: name, EventType: "X", Severity: "info", CreatedAt: time.Now()}
		notes = append(notes, note)
		dels = append(dels, store.NewDelivery{NotificationID: note.ID, TenantID: "t", EventID: "e", EventType: "X", UserID: name,
			UserType: "CUSTOMER", Channel: "EMAIL", Severity: "info", Status: store.StatusPending, MaxAttempts: 5, NextAttemptAt: time.Now()})
	}
	if _, _, err := store.InsertFanout(ctx, tx, notes, dels); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	rows, err := db.Pool.Query(ctx, `SELECT user_id, delivery_id::text FROM deliveries`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var user, id string
		if err := rows.Scan(&user, &id); err != nil {
			t.Fatal(err)
		}
		ids[user] = id
	}
	if len(ids) != len(names) {
		t.Fatalf("inserted %d deliveries, want %d", len(ids), len(names))
	}
	return ids
}
