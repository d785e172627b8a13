package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// escalationRow is one notification with one EMAIL delivery written as an
// escalation (or, with hold digest, a digest item).
type escalationRow struct {
	user, event, share string
	hold               string
	unless             []string
	due                time.Time
}

// writeEscalations writes rows through InsertFanout in one transaction of
// q's pool (COPY for the owner; INSERT under row-level security for the
// API role, with tenant t set), and returns the notification ids by user.
func writeEscalations(t *testing.T, pool *pgxpool.Pool, rls bool, rows []escalationRow) map[string]string {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	var notes []store.NewNotification
	var dels []store.NewDelivery
	ids := map[string]string{}
	for _, r := range rows {
		id := uuid.Must(uuid.NewV7()).String()
		ids[r.user] = id
		notes = append(notes, store.NewNotification{ID: id, TenantID: "t", EventID: r.event, UserID: r.user, EventType: "RESERVATION_REQUESTED",
			Severity: "info", ShareKey: r.share, CreatedAt: now})
		dels = append(dels, store.NewDelivery{NotificationID: id, TenantID: "t", EventID: r.event, EventType: "RESERVATION_REQUESTED",
			UserID: r.user, UserType: "STAFF", Channel: "EMAIL", Severity: "info", Status: store.StatusWaiting, MaxAttempts: 3,
			NextAttemptAt: r.due, Hold: r.hold, EscalateUnless: r.unless})
	}
	write := func(tx pgx.Tx) error {
		_, written, err := store.InsertFanout(ctx, tx, notes, dels)
		if err == nil && len(written) != len(dels) {
			err = fmt.Errorf("wrote %d deliveries, want %d", len(written), len(dels))
		}
		return err
	}
	var err error
	if rls {
		err = store.InTenant(ctx, pool, "t", "", write)
	} else {
		err = pgx.BeginFunc(ctx, pool, write)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

type deliveryState struct{ status, hold, lastError string }

func escalationStates(t *testing.T, db *testenv.DB) map[string]deliveryState {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT user_id, status, coalesce(hold, ''), last_error FROM deliveries`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]deliveryState{}
	for rows.Next() {
		var u string
		var s deliveryState
		if err := rows.Scan(&u, &s.status, &s.hold, &s.lastError); err != nil {
			t.Fatal(err)
		}
		out[u] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReleaseEscalations checks what the poller does with each kind of
// waiting row: an unread one is sent, a read or acted one is cancelled
// naming why, one that only an action cancels is sent although read, a
// digest item and an escalation not due yet are left alone.
func TestReleaseEscalations(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	api, err := pgxpool.New(ctx, db.APIURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	past, future := time.Now().Add(-time.Second), time.Now().Add(time.Hour)
	both := []string{store.EscalateUnlessRead, store.EscalateUnlessActed}
	ids := writeEscalations(t, db.Pool, false, []escalationRow{
		{user: "unread", event: "e1", hold: store.HoldEscalation, unless: []string{"read"}, due: past},
		{user: "read", event: "e2", hold: store.HoldEscalation, unless: []string{"read"}, due: past},
		{user: "later", event: "e3", hold: store.HoldEscalation, unless: []string{"read"}, due: future},
		{user: "digest", event: "e4", hold: "digest", due: past},
	})
	// Two sharers of e5, through the API role (INSERT under row-level
	// security): manager acts, chef's escalation goes with it.
	for k, v := range writeEscalations(t, api, true, []escalationRow{
		{user: "manager", event: "e5", share: "e5", hold: store.HoldEscalation, unless: both, due: past},
		{user: "chef", event: "e5", share: "e5", hold: store.HoldEscalation, unless: both, due: past},
		{user: "actedonly", event: "e6", share: "e6", hold: store.HoldEscalation, unless: []string{"acted"}, due: past},
	}) {
		ids[k] = v
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE notifications SET read_at = '2026-03-10T20:55:00Z' WHERE user_id IN ('read', 'actedonly')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO notification_actions (tenant_id, share_key, notification_id, user_id, action, data, project_id, event_id, event_type, acted_at)
		VALUES ('t', 'e5', $1, 'manager', 'CONFIRMED', '{}', 'default', 'e5', 'RESERVATION_REQUESTED', '2026-03-10T20:56:00Z')`, ids["manager"]); err != nil {
		t.Fatal(err)
	}
	r, err := store.ReleaseEscalations(ctx, db.Pool, 100)
	if err != nil {
		t.Fatal(err)
	}
	if r.Pending != 2 || r.Cancelled != 3 {
		t.Fatalf("released %+v, want 2 pending (unread, actedonly) and 3 cancelled", r)
	}
	want := map[string]deliveryState{
		"unread":    {status: store.StatusPending},
		"read":      {status: store.StatusCancelled, lastError: "read at 2026-03-10T20:55:00Z"},
		"later":     {status: store.StatusWaiting, hold: store.HoldEscalation},
		"digest":    {status: store.StatusWaiting, hold: "digest"},
		"manager":   {status: store.StatusCancelled, lastError: "acted on by manager (CONFIRMED) at 2026-03-10T20:56:00Z"},
		"chef":      {status: store.StatusCancelled, lastError: "acted on by manager (CONFIRMED) at 2026-03-10T20:56:00Z"},
		"actedonly": {status: store.StatusPending},
	}
	got := escalationStates(t, db)
	for u, w := range want {
		if got[u] != w {
			t.Errorf("%s: %+v, want %+v", u, got[u], w)
		}
	}
	if r, err := store.ReleaseEscalations(ctx, db.Pool, 100); err != nil || r != (store.Released{}) {
		t.Fatalf("second release: %+v %v, want nothing", r, err)
	}
}

// TestEscalationReadRacesRelease races reads (each cancelling its
// notification's escalation in its own transaction, as the inbox does)
// against two releasing pollers, as two daemons run them. Every escalation
// ends exactly once, PENDING or CANCELLED; a cancelled one was read before
// its release could take it, and the counts of the moves add up to the
// rows: nothing moved twice.
func TestEscalationReadRacesRelease(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	const n = 300
	// Due one after another over two seconds; the readers start with the
	// last due, so the first are released unread, the last are read in
	// time, and the ones between race.
	start := time.Now().Add(300 * time.Millisecond)
	rows := make([]escalationRow, n)
	for i := range rows {
		rows[i] = escalationRow{user: fmt.Sprintf("u%03d", i), event: fmt.Sprintf("e%03d", i), hold: store.HoldEscalation,
			unless: []string{store.EscalateUnlessRead}, due: start.Add(time.Duration(i) * 6 * time.Millisecond)}
	}
	ids := writeEscalations(t, db.Pool, false, rows)
	var moved atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r, err := store.ReleaseEscalations(ctx, db.Pool, 7)
				if err != nil {
					errs <- err
					return
				}
				moved.Add(int64(r.Pending + r.Cancelled))
				if r.Pending+r.Cancelled == 0 {
					var left int
					if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE status = 'WAITING'`).Scan(&left); err != nil || left == 0 {
						return
					}
				}
			}
		}()
	}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := n - 1 - w; i >= 0; i -= 4 {
				id := ids[rows[i].user]
				err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `UPDATE notifications SET read_at = now() WHERE notification_id = $1 AND read_at IS NULL`, id); err != nil {
						return err
					}
					c, err := store.CancelEscalationsRead(ctx, tx, "t", []string{id})
					moved.Add(int64(c))
					return err
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var pending, cancelled, other int
	for u, s := range escalationStates(t, db) {
		switch s.status {
		case store.StatusPending:
			pending++
		case store.StatusCancelled:
			cancelled++
			if !strings.HasPrefix(s.lastError, "read at ") {
				t.Errorf("%s: cancelled with %q", u, s.lastError)
			}
		default:
			other++
			t.Errorf("%s: %+v, want PENDING or CANCELLED", u, s)
		}
	}
	if moved.Load() != n || pending+cancelled != n {
		t.Fatalf("moves counted %d, rows %d pending + %d cancelled (+%d other), want %d in all", moved.Load(), pending, cancelled, other, n)
	}
	t.Logf("%d released unread, %d cancelled by the read", pending, cancelled)
	if cancelled == 0 {
		t.Fatal("no read came before its escalation was due: the race was not run")
	}
}
