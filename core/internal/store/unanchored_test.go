package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestInsertDeliveriesOnceWritesOnce writes the deliveries of a per_digest
// recipient (no inbox row) and a post to a place, in one call, twice, as a
// retried fan-out would: the second run writes nothing; a delivery without
// CreatedAt is refused, naming its kind, the event, the user and the
// channel.
func TestInsertDeliveriesOnceWritesOnce(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	at := time.Now().Truncate(time.Millisecond)
	dels := func() []store.NewDelivery {
		nid := uuid.NewString() // names no inbox row
		return []store.NewDelivery{
			{NotificationID: nid, TenantID: "t1", EventID: "e1", EventType: "T", UserID: "u1", UserType: "STAFF", Channel: channel.Inbox,
				Severity: "info", Status: store.StatusWaiting, Hold: store.HoldDigest, MaxAttempts: 1, NextAttemptAt: at, CreatedAt: at,
				Content: []byte(`{"event_id": "e1"}`), Unanchored: true},
			{NotificationID: nid, TenantID: "t1", EventID: "e1", EventType: "T", UserID: "u1", UserType: "STAFF", Channel: "WEBSOCKET",
				Severity: "info", Status: store.StatusPending, MaxAttempts: 1, NextAttemptAt: at, CreatedAt: at, Unanchored: true},
			{NotificationID: uuid.NewString(), TenantID: "t1", EventID: "e1", EventType: "T", UserID: "ops", Channel: "SLACK",
				Severity: "info", Status: store.StatusPending, MaxAttempts: 1, NextAttemptAt: at, CreatedAt: at, Place: true},
		}
	}
	tests := map[string]struct {
		dels    []store.NewDelivery
		written int
		err     string
	}{
		"first":  {dels: dels(), written: 3},
		"second": {dels: dels(), written: 0},
		"no created_at": {dels: func() []store.NewDelivery {
			d := dels()
			d[1].CreatedAt = time.Time{}
			return d
		}(), err: "insert unanchored deliveries: delivery of event e1 to u1 on WEBSOCKET has no CreatedAt"},
		"place without created_at": {dels: func() []store.NewDelivery {
			d := dels()
			d[2].CreatedAt = time.Time{}
			return d
		}(), err: "insert place deliveries: delivery of event e1 to ops on SLACK has no CreatedAt"},
	}
	// In order: the second run follows the first.
	for _, name := range []string{"first", "second", "no created_at", "place without created_at"} {
		tc := tests[name]
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, err := store.InsertDeliveriesOnce(ctx, tx, tc.dels)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Fatalf("%s: error %v, want %q", name, err, tc.err)
		case tc.err == "" && err != nil:
			t.Fatalf("%s: %v", name, err)
		case len(got) != tc.written:
			t.Fatalf("%s: wrote %d, want %d", name, len(got), tc.written)
		}
		if err := tx.Commit(ctx); err != nil && tc.err == "" {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE event_id = 'e1'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("%d deliveries of e1, want 3", n)
	}
}
