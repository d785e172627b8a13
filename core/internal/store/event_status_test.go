package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestGetEventShowsNextAttemptOnlyWhileWaiting: a SENT or FAILED delivery
// keeps its last next_attempt_at in the row (RecordOutcomes leaves it so
// that the final update is HOT), but the event's status shows none for
// it, and its JSON has no next_attempt_at; a RETRY delivery shows when it
// is tried again.
func TestGetEventShowsNextAttemptOnlyWhileWaiting(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO event_outbox (tenant_id, event_id, event_type) VALUES ('t', 'e', 'X')`); err != nil {
		t.Fatal(err)
	}
	next := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	note := store.NewNotification{ID: "0190d0a0-0000-7000-8000-0000000000ab", TenantID: "t", EventID: "e", UserID: "u", EventType: "X", Severity: "info", CreatedAt: time.Now()}
	var dels []store.NewDelivery
	for _, ch := range []string{"EMAIL", "PUSH", "SMS"} {
		dels = append(dels, store.NewDelivery{NotificationID: note.ID, TenantID: "t", EventID: "e", EventType: "X", UserID: "u", UserType: "CUSTOMER",
			Channel: ch, Severity: "info", Status: store.StatusPending, MaxAttempts: 3, NextAttemptAt: next})
	}
	if _, _, err := store.InsertFanout(ctx, tx, []store.NewNotification{note}, dels); err != nil {
		t.Fatal(err)
	}
	// The final statuses as RecordOutcomes leaves them: next_attempt_at as it was.
	if _, err := tx.Exec(ctx, `UPDATE deliveries SET status = CASE channel WHEN 'EMAIL' THEN 'SENT' WHEN 'PUSH' THEN 'FAILED' ELSE 'RETRY' END,
		attempts = 1`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := store.GetEvent(ctx, db.Pool, "t", "e")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Deliveries) != 3 {
		t.Fatalf("%d deliveries, want 3", len(st.Deliveries))
	}
	for _, d := range st.Deliveries {
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		switch d.Status {
		case store.StatusSent, store.StatusFailed:
			if !d.NextAttemptAt.IsZero() || strings.Contains(string(b), "next_attempt_at") {
				t.Errorf("%s delivery shows a next attempt: %s", d.Status, b)
			}
		case store.StatusRetry:
			if !d.NextAttemptAt.Equal(next) || !strings.Contains(string(b), `"next_attempt_at"`) {
				t.Errorf("RETRY delivery: next attempt %v, want %v: %s", d.NextAttemptAt, next, b)
			}
		default:
			t.Errorf("delivery %s: status %s", d.Channel, d.Status)
		}
	}
}
