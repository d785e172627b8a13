package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// TestCancelDeadlockIsRetryable: a cancel that PostgreSQL aborts as a
// deadlock's victim fails with an error store.Retryable accepts (the API
// and the CLI run it again), naming the cancel; the event's deliveries
// are then cancelled by the next try. Other errors are not retryable.
func TestCancelDeadlockIsRetryable(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	low, high := testenv.EventToCancel(t, db, "t", "e")
	var err error
	testenv.CancelLosesDeadlock(t, db, low, high, func() {
		_, err = store.CancelEvent(ctx, db.Pool, "t", "e")
	})
	if !store.Retryable(err) || !strings.Contains(err.Error(), "cancel event") {
		t.Fatalf("cancel that lost a deadlock: %v; want a retryable error naming the cancel", err)
	}
	c, err := store.CancelEvent(ctx, db.Pool, "t", "e")
	if err != nil || !c.Done || c.Cancelled != 2 {
		t.Fatalf("next try: %+v, %v; want both deliveries cancelled", c, err)
	}
	for _, e := range []error{nil, errors.New("boom"), store.ErrNotFound, fmt.Errorf("x: %w", context.Canceled)} {
		if store.Retryable(e) {
			t.Errorf("Retryable(%v) = true", e)
		}
	}
}

// TestFlushAndCancelNeverDeadlock runs a digest flush and a cancel of an
// event with an item in each of the windows flushed at the same time,
// round after round: both lock the items in delivery_id order, so
// neither ever fails (a deadlock was 40P01 for one of them). The event's
// items in windows earlier in the flush's order have the higher ids, and
// each window holds other events' items too, the case where the flush's
// old join order and the cancel's order crossed.
func TestFlushAndCancelNeverDeadlock(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	const windows, others, rounds = 8, 20, 50
	build := func(store.DueWindow, []store.WaitingItem) store.NewDelivery {
		return store.NewDelivery{Content: json.RawMessage(`{"title": "digest"}`)}
	}
	for r := range rounds {
		event := fmt.Sprintf("e%d", r)
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO event_outbox (tenant_id, event_id, event_type, status, processed_at)
				VALUES ('t', $1, 'X', 'PROCESSED', now())`, event); err != nil {
				return err
			}
			// Window i falls due before window i+1: the flush takes them
			// in that order.
			rows, err := tx.Query(ctx, `INSERT INTO digest_windows (tenant_id, user_id, channel, event_type, digest_key, items, max_items, status, closes_at)
				SELECT 't', 'u' || i, 'EMAIL', 'X', $1, $2, 1000, 'FULL', now() - interval '1 hour' + i * interval '1 second'
				FROM generate_series(0, $3 - 1) i
				RETURNING window_id::text, user_id`, event, others+1, windows)
			if err != nil {
				return err
			}
			win := map[string]string{}
			for rows.Next() {
				var id, user string
				if err := rows.Scan(&id, &user); err != nil {
					return err
				}
				win[user] = id
			}
			if err := rows.Err(); err != nil {
				return err
			}
			var notes []store.NewNotification
			var dels []store.NewDelivery
			item := func(ev, user string) {
				n := store.NewNotification{ID: uuid.Must(uuid.NewV7()).String(), TenantID: "t", EventID: ev, UserID: user, EventType: "X",
					Severity: "info", CreatedAt: time.Now()}
				notes = append(notes, n)
				dels = append(dels, store.NewDelivery{NotificationID: n.ID, TenantID: "t", EventID: ev, EventType: "X", UserID: user,
					UserType: "CUSTOMER", Channel: "EMAIL", Severity: "info", Status: store.StatusWaiting, Hold: store.HoldDigest,
					DigestWindow: win[user], MaxAttempts: 3, NextAttemptAt: time.Now()})
			}
			// The event's item in the last window first: the lowest id.
			for i := windows - 1; i >= 0; i-- {
				item(event, fmt.Sprintf("u%d", i))
			}
			for k := range others {
				for i := range windows {
					item(fmt.Sprintf("%s-other%d", event, k), fmt.Sprintf("u%d", i))
				}
			}
			_, written, err := store.InsertFanout(ctx, tx, notes, dels)
			if err == nil && len(written) != len(dels) {
				err = fmt.Errorf("wrote %d items, want %d", len(written), len(dels))
			}
			return err
		})
		if err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		var flushErr, cancelErr error
		var flushed store.FlushResult
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			flushed, flushErr = store.FlushDigests(ctx, db.Pool, 100, build)
		}()
		go func() {
			defer wg.Done()
			<-start
			_, cancelErr = store.CancelEvent(ctx, db.Pool, "t", event)
		}()
		close(start)
		wg.Wait()
		if flushErr != nil || cancelErr != nil {
			t.Fatalf("round %d: flush %v, cancel %v; want neither to fail", r, flushErr, cancelErr)
		}
		if flushed.Windows != windows {
			t.Fatalf("round %d: flushed %d windows, want %d", r, flushed.Windows, windows)
		}
		var open int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE event_id = $1 AND status NOT IN ('CANCELLED', 'DIGESTED')`,
			event).Scan(&open); err != nil || open != 0 {
			t.Fatalf("round %d: %d items of the event neither cancelled nor digested, %v", r, open, err)
		}
	}
}
