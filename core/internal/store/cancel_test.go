package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// fanoutWith writes event eventID of tenant as processed, with one
// delivery per status in statuses (channel C<i>), and returns the
// deliveries' ids by channel.
func fanoutWith(t *testing.T, ctx context.Context, pool *pgxpool.Pool, tenant, eventID string, statuses ...string) map[string]string {
	t.Helper()
	ids := map[string]string{}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO event_outbox (tenant_id, event_id, event_type, status, processed_at) VALUES ($1, $2, 'X', 'PROCESSED', now())`,
			tenant, eventID); err != nil {
			return err
		}
		note := store.NewNotification{ID: uuid.Must(uuid.NewV7()).String(), TenantID: tenant, EventID: eventID, UserID: "u", EventType: "X", Severity: "info", CreatedAt: time.Now()}
		var dels []store.NewDelivery
		for i := range statuses {
			dels = append(dels, store.NewDelivery{NotificationID: note.ID, TenantID: tenant, EventID: eventID, EventType: "X", UserID: "u", UserType: "CUSTOMER",
				Channel: "C" + string(rune('0'+i)), Severity: "info", Status: store.StatusPending, MaxAttempts: 3, NextAttemptAt: time.Now()})
		}
		_, written, err := store.InsertFanout(ctx, tx, []store.NewNotification{note}, dels)
		if err != nil {
			return err
		}
		for i, d := range written {
			ids[d.Channel] = d.ID
			hold := map[string]any{"WAITING": "escalation"}[statuses[i]]
			if i%2 == 1 && statuses[i] == store.StatusWaiting {
				hold = "digest"
			}
			if _, err := tx.Exec(ctx, `UPDATE deliveries SET status = $2, hold = $3, attempts = CASE WHEN $2 IN ('SENT', 'FAILED', 'RETRY') THEN 1 ELSE 0 END
				WHERE delivery_id = $1`, d.ID, statuses[i], hold); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestCancelEvent: a cancel stops every delivery still waiting (DEFERRED,
// WAITING of either hold, PENDING, PUBLISHED, RETRY), leaves SENT and
// FAILED as they were, reports one a listener holds as in flight and
// leaves it alone, gives the same answer again, and cancels the held one
// once its sender let it go without sending; a scheduled event never
// becomes claimable; an event whose deliveries all ended is too late;
// unknown and other tenants' events are not found.
func TestCancelEvent(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	ids := fanoutWith(t, ctx, db.Pool, "t", "e1", "SENT", "FAILED", "DEFERRED", "WAITING", "WAITING", "PENDING", "RETRY", "PUBLISHED")
	// A listener sending C7's first attempt holds its lock.
	listener, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	key := store.AttemptLockKey(ids["C7"], 1)
	if _, err := listener.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, $2))`, key, int64(store.AttemptLockSeed)); err != nil {
		t.Fatal(err)
	}
	c, err := store.CancelEvent(ctx, db.Pool, "t", "e1")
	if err != nil {
		t.Fatal(err)
	}
	want := store.Cancellation{EventID: "e1", Status: "PROCESSED", Cancelled: 5, Final: map[string]int{"SENT": 1, "FAILED": 1}, InFlight: 1, Done: true,
		Now: map[string]int{"C2": 1, "C3": 1, "C4": 1, "C5": 1, "C6": 1}}
	if d := cmp.Diff(want, c); d != "" {
		t.Fatalf("first cancel (-want +got):\n%s", d)
	}
	var status, lastError string
	if err := db.Pool.QueryRow(ctx, `SELECT status, last_error FROM deliveries WHERE delivery_id = $1`, ids["C3"]).Scan(&status, &lastError); err != nil ||
		status != "CANCELLED" || lastError != store.CancelReason {
		t.Fatalf("WAITING delivery: %s %q, %v; want CANCELLED %q", status, lastError, err, store.CancelReason)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT status FROM deliveries WHERE delivery_id = $1`, ids["C7"]).Scan(&status); err != nil || status != "PUBLISHED" {
		t.Fatalf("held delivery: %s, %v; want PUBLISHED (not touched)", status, err)
	}
	var attempts int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM delivery_attempts`).Scan(&attempts); err != nil || attempts != 0 {
		t.Fatalf("%d attempt rows, %v; a cancel makes no attempt", attempts, err)
	}
	again, err := store.CancelEvent(ctx, db.Pool, "t", "e1")
	want.Now = map[string]int{}
	if d := cmp.Diff(want, again); err != nil || d != "" {
		t.Fatalf("repeat (-want +got):\n%s %v", d, err)
	}
	// The sender let go without recording (it found the attempt no
	// longer its own, or died): the next cancel takes it.
	if _, err := listener.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
		t.Fatal(err)
	}
	last, err := store.CancelEvent(ctx, db.Pool, "t", "e1")
	if err != nil || last.Cancelled != 6 || last.InFlight != 0 || last.Now["C7"] != 1 {
		t.Fatalf("after release: %+v, %v; want C7 cancelled too", last, err)
	}

	// A scheduled event: cancelled before the relay saw it, never
	// claimable once due.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO event_outbox (tenant_id, event_id, event_type, available_at) VALUES ('t', 'later', 'X', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	c, err = store.CancelEvent(ctx, db.Pool, "t", "later")
	if err != nil || c.Status != store.EventCancelled || !c.Done || c.Cancelled != 0 {
		t.Fatalf("scheduled: %+v, %v; want CANCELLED", c, err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE event_outbox SET available_at = now() - interval '1 second' WHERE event_id = 'later'`); err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		claim, err := store.ClaimEvents(ctx, tx, 10, 1<<20)
		if err == nil && len(claim.Events) != 0 {
			t.Errorf("claimed %d cancelled events", len(claim.Events))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.GetEvent(ctx, db.Pool, "t", "later")
	if err != nil || st.Status != store.EventCancelled || st.LastError != store.CancelReason {
		t.Fatalf("GetEvent: %s %q, %v", st.Status, st.LastError, err)
	}

	// Everything already went out: too late, and the answer says what.
	fanoutWith(t, ctx, db.Pool, "t", "gone", "SENT", "SENT", "FAILED")
	c, err = store.CancelEvent(ctx, db.Pool, "t", "gone")
	if err != nil || c.Done || c.Went() != "1 FAILED, 2 SENT" {
		t.Fatalf("gone: %+v (%s), %v; want not done, 1 FAILED, 2 SENT", c, c.Went(), err)
	}
	for _, who := range [][2]string{{"t", "nope"}, {"other", "e1"}} {
		if _, err := store.CancelEvent(ctx, db.Pool, who[0], who[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("cancel %s/%s: %v; want ErrNotFound", who[0], who[1], err)
		}
	}
}

// TestCancelFunctionForProducers: a producer login cancels through
// herald_cancel for a tenant it was granted, is refused with 42501 naming
// tenant_id for another, gets P0002 naming event_id for an unknown event
// and 23514 naming event_id for a malformed one; the API login cancels
// only inside its tenant and a project key only its project's events.
func TestCancelFunctionForProducers(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	for _, ten := range []string{"a", "b"} {
		if err := store.EnsureTenant(ctx, db.Pool, ten, ""); err != nil {
			t.Fatal(err)
		}
		fanoutWith(t, ctx, db.Pool, ten, "e", "PENDING")
	}
	role := "cancel_" + strings.TrimPrefix(db.Name, "herald_test_")
	svc := loginAs(t, ctx, db, role, "a")
	var outcome string
	if err := svc.QueryRow(ctx, `SELECT outcome FROM herald_cancel(tenant_id => 'a', event_id => 'e')`).Scan(&outcome); err != nil || outcome != "cancelled" {
		t.Fatalf("granted tenant: %q, %v; want cancelled", outcome, err)
	}
	for name, c := range map[string]struct {
		tenant, event, code, column string
	}{
		"other tenant":   {"b", "e", "42501", "tenant_id"},
		"unknown event":  {"a", "nope", "P0002", "event_id"},
		"long event id":  {"a", strings.Repeat("x", 10000), "23514", "event_id"},
		"empty event id": {"a", "", "23514", "event_id"},
		"bad tenant":     {"a b", "e", "23514", "tenant_id"},
	} {
		err := svc.QueryRow(ctx, `SELECT outcome FROM herald_cancel($1, $2)`, c.tenant, c.event).Scan(&outcome)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != c.code || pgErr.ColumnName != c.column {
			t.Errorf("%s: %v; want SQLSTATE %s naming %s", name, err, c.code, c.column)
		}
	}
	var status string
	if err := db.Pool.QueryRow(ctx, `SELECT status FROM deliveries WHERE tenant_id = 'b'`).Scan(&status); err != nil || status != "PENDING" {
		t.Fatalf("tenant b's delivery: %s, %v; want PENDING (refused cancel)", status, err)
	}

	api, err := pgxpool.New(ctx, db.APIURL)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO projects (tenant_id, project_id) VALUES ('b', 'p2') ON CONFLICT DO NOTHING`); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		project string
		want    error
	}{
		"project key of another project": {"p2", store.ErrNotFound},
		"tenant-wide key":                {"", nil},
	} {
		err := store.InTenant(ctx, api, "b", c.project, func(tx pgx.Tx) error {
			_, err := store.CancelEvent(ctx, tx, "b", "e")
			return err
		})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v; want %v", name, err, c.want)
		}
	}
	err = store.InTenant(ctx, api, "b", "", func(tx pgx.Tx) error {
		_, err := store.CancelEvent(ctx, tx, "a", "e")
		return err
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("API inside tenant b cancelling tenant a's event: %v; want 42501", err)
	}
}
