package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const day = 24 * time.Hour

func workerPool(t *testing.T, db *testenv.DB) *pgxpool.Pool {
	t.Helper()
	p, err := store.NewPoolWith(context.Background(), db.URL, store.PoolOptions{MaxConns: 4, Role: store.RoleWorker})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// addEvents writes n events of tenant with status, created at at, named
// prefix-0, prefix-1, ...
func addEvents(t *testing.T, db *testenv.DB, tenant, prefix, status string, at time.Time, n int) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO event_outbox (tenant_id, event_id, event_type, status, created_at, processed_at)
		SELECT $1, $2 || '-' || i, 'T', $3, $4::timestamptz, CASE WHEN $3 = 'PENDING' THEN NULL ELSE $4::timestamptz + interval '1 second' END
		FROM generate_series(0, $5 - 1) i`, tenant, prefix, status, at, n); err != nil {
		t.Fatal(err)
	}
}

// eventsLeft lists the events left as "tenant/event_id" prefixes with
// their counts, e.g. "a/old-done:35".
func eventsLeft(t *testing.T, q store.Querier) string {
	t.Helper()
	rows, err := q.Query(context.Background(), `SELECT tenant_id || '/' || split_part(event_id, '-', 1) || ':' || count(*)
		FROM event_outbox GROUP BY tenant_id, split_part(event_id, '-', 1) ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(got, " ")
}

// TestSweepEventsRemovesExactlyThePast: with events kept 30 days (tenant b
// 7), the sweep deletes the PROCESSED and FAILED events created before
// that, tenant by tenant, in batches of at most 10 (35 rows: 4 statements,
// the last short), and keeps PENDING events whatever their age, every
// event inside its tenant's period, and other tenants' events inside
// theirs. A second pass finds nothing. The API role may not sweep.
func TestSweepEventsRemovesExactlyThePast(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Now()
	addEvents(t, db, "a", "olddone", "PROCESSED", now.Add(-31*day), 30)
	addEvents(t, db, "a", "oldfailed", "FAILED", now.Add(-40*day), 5)
	addEvents(t, db, "a", "oldpending", "PENDING", now.Add(-90*day), 3)
	addEvents(t, db, "a", "recent", "PROCESSED", now.Add(-29*day), 4)
	addEvents(t, db, "b", "old", "PROCESSED", now.Add(-8*day), 12)
	addEvents(t, db, "b", "recent", "FAILED", now.Add(-6*day), 2)
	addEvents(t, db, "b", "pending", "PENDING", now.Add(-60*day), 1)
	addEvents(t, db, "c", "old", "PROCESSED", now.Add(-20*day), 7)
	r := store.Retention{Events: 30 * day, Tenants: map[string]store.TenantRetention{"b": {Events: 7 * day}}}
	worker := workerPool(t, db)
	res, err := store.ApplySweeps(ctx, worker, r, now, store.SweepLimits{BatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range res {
		got = append(got, fmt.Sprintf("%s %s %s deleted %d in %d statements done %v", s.Kind, s.Tenant, s.Key(), s.Deleted, s.Statements, s.Done))
	}
	want := []string{
		"events a retention.events deleted 35 in 4 statements done true",
		"events b retention.tenant.b.events deleted 12 in 2 statements done true",
		"events c retention.events deleted 0 in 1 statements done true",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("sweeps:\n got %q\nwant %q", got, want)
	}
	if left, want := eventsLeft(t, db.Pool), "a/oldpending:3 a/recent:4 b/pending:1 b/recent:2 c/old:7"; left != want {
		t.Fatalf("events left %q, want %q", left, want)
	}
	res, err = store.ApplySweeps(ctx, worker, r, now, store.SweepLimits{BatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res {
		if s.Deleted != 0 || s.Statements != 1 {
			t.Errorf("second pass: %+v", s)
		}
	}
	// An event_id swept is new to the producer's ON CONFLICT again.
	var id int64
	if err := db.Pool.QueryRow(ctx, `INSERT INTO event_outbox (tenant_id, event_id, event_type) VALUES ('a', 'olddone-0', 'T')
		ON CONFLICT (tenant_id, event_id) DO NOTHING RETURNING id`).Scan(&id); err != nil {
		t.Fatalf("event_id of a swept event enqueued again: %v", err)
	}
	api, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 1, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	if _, err := api.Exec(ctx, `SELECT herald_sweep('events', 'a', now(), 10, NULL)`); err == nil {
		t.Fatal("herald_api swept events")
	}
	for _, args := range [][]any{{"deliveries", "a", now, 10}, {"events", "a", now, 0}, {"events", nil, now, 10}} {
		if _, err := worker.Exec(ctx, `SELECT herald_sweep($1, $2, $3, $4, NULL)`, args...); err == nil {
			t.Errorf("herald_sweep%v: no error", args)
		}
	}
}

// TestSweepStopsOnItsLimits: a pass that may run two statements deletes
// two batches and says it is not done (ErrSweepBudget); the next pass
// goes on from the oldest row and finishes.
func TestSweepStopsOnItsLimits(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Now()
	addEvents(t, db, "a", "old", "PROCESSED", now.Add(-10*day), 35)
	r := store.Retention{Events: 2 * day}
	res, err := store.ApplySweeps(ctx, db.Pool, r, now, store.SweepLimits{BatchSize: 10, MaxStatements: 2})
	if !errors.Is(err, store.ErrSweepBudget) || len(res) != 1 || res[0].Deleted != 20 || res[0].Statements != 2 || res[0].Done {
		t.Fatalf("first pass: %+v, %v; want 20 deleted in 2 statements, not done, ErrSweepBudget", res, err)
	}
	res, err = store.ApplySweeps(ctx, db.Pool, r, now, store.SweepLimits{BatchSize: 10, MaxStatements: 2})
	if err != nil || len(res) != 1 || res[0].Deleted != 15 || !res[0].Done {
		t.Fatalf("second pass: %+v, %v; want the 15 left, done", res, err)
	}
}

// drift recounts the unread counters (store.RepairCounters, rolled back)
// and returns the ones that do not match their rows.
func drift(t *testing.T, db *testenv.DB) []store.Drift {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	d, err := store.RepairCounters(ctx, tx, "")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// fanoutTo is fanout for a tenant.
func fanoutTo(t *testing.T, db *testenv.DB, tenant, event string, at time.Time, users ...string) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var notes []store.NewNotification
		for _, u := range users {
			var id string
			if err := tx.QueryRow(ctx, `SELECT gen_random_uuid()::text`).Scan(&id); err != nil {
				return err
			}
			notes = append(notes, store.NewNotification{ID: id, TenantID: tenant, EventID: event, UserID: u, EventType: "X", Severity: "info", CreatedAt: at})
		}
		_, _, err := store.InsertFanout(ctx, tx, notes, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// archive archives the notifications of tenant's events matching like at
// at, taking the unread ones off the counters as the inbox does.
func archive(t *testing.T, db *testenv.DB, tenant, like string, at time.Time) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), `WITH a AS (UPDATE notifications SET archived_at = $3
			WHERE tenant_id = $1 AND event_id LIKE $2 AND archived_at IS NULL
			RETURNING tenant_id, user_id, project_id, read_at IS NULL AS counted)
		UPDATE notification_counters c SET unread = c.unread - x.n FROM (
			SELECT tenant_id, user_id, project_id, count(*) AS n FROM a WHERE counted GROUP BY 1, 2, 3) x
		WHERE c.tenant_id = x.tenant_id AND c.user_id = x.user_id AND c.project_id = x.project_id`, tenant, like, at); err != nil {
		t.Fatal(err)
	}
}

// notificationRows lists every notification as "tenant/event/user
// read archived", sorted.
func notificationRows(t *testing.T, db *testenv.DB, where string) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT tenant_id || '/' || event_id || '/' || user_id || ' ' ||
		(read_at IS NOT NULL)::text || ' ' || (archived_at IS NOT NULL)::text FROM notifications WHERE `+where+` ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestSweepArchivedNotificationsKeepsCountersExact: notifications
// archived more than 30 days ago (some read before, some not) go; those
// archived since, and every notification not archived, old or new, read
// or not, stay as they were; tenant b, archived kept 3 days, loses its
// rows archived before that. The counters equal a recount before and
// after.
func TestSweepArchivedNotificationsKeepsCountersExact(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Now()
	if _, err := db.Pool.Exec(ctx, `SELECT herald_ensure_partitions('notifications', $1, now())`, now.Add(-80*day)); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"a", "b"} {
		for i, age := range []int{75, 50, 40, 10, 1} {
			fanoutTo(t, db, tenant, fmt.Sprintf("e%d", i), now.Add(-time.Duration(age)*day), "u1", "u2", "u3")
		}
	}
	if _, err := db.Pool.Exec(ctx, `WITH r AS (UPDATE notifications SET read_at = created_at + interval '1 hour'
			WHERE user_id = 'u2' RETURNING tenant_id, user_id, project_id)
		UPDATE notification_counters c SET unread = c.unread - x.n FROM (SELECT tenant_id, user_id, project_id, count(*) AS n FROM r GROUP BY 1, 2, 3) x
		WHERE c.tenant_id = x.tenant_id AND c.user_id = x.user_id AND c.project_id = x.project_id`); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"a", "b"} {
		archive(t, db, tenant, "e0", now.Add(-70*day)) // archived 70 days ago: goes
		archive(t, db, tenant, "e1", now.Add(-35*day)) // 35: goes
		archive(t, db, tenant, "e3", now.Add(-5*day))  // 5: a keeps it, b (3 days) not
	}
	archive(t, db, "a", "e2", now.Add(-2*day)) // an old notification archived lately: stays
	if d := drift(t, db); len(d) != 0 {
		t.Fatalf("counters drift before the sweep: %+v", d)
	}
	kept := notificationRows(t, db, "archived_at IS NULL")
	r := store.Retention{Notifications: 365 * day, ArchivedNotifications: 30 * day,
		Tenants: map[string]store.TenantRetention{"b": {ArchivedNotifications: 3 * day}}}
	res, err := store.ApplySweeps(ctx, workerPool(t, db), r, now, store.SweepLimits{BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range res {
		got = append(got, fmt.Sprintf("%s %s %s %d/%d", s.Kind, s.Tenant, s.Key(), s.Deleted, s.Statements))
	}
	if want := []string{
		"archived_notifications a retention.archived_notifications 6/2",
		"archived_notifications b retention.tenant.b.archived_notifications 9/3",
	}; !slices.Equal(got, want) {
		t.Fatalf("sweeps:\n got %q\nwant %q", got, want)
	}
	if after := notificationRows(t, db, "archived_at IS NULL"); !slices.Equal(after, kept) {
		t.Fatalf("notifications not archived changed:\n got %q\nwant %q", after, kept)
	}
	want := []string{"a/e2/u1 false true", "a/e2/u2 true true", "a/e2/u3 false true", "a/e3/u1 false true", "a/e3/u2 true true", "a/e3/u3 false true"}
	if left := notificationRows(t, db, "archived_at IS NOT NULL"); !slices.Equal(left, want) {
		t.Fatalf("archived notifications left:\n got %q\nwant %q", left, want)
	}
	if d := drift(t, db); len(d) != 0 {
		t.Fatalf("counters drift after the sweep: %+v", d)
	}
}

// TestSweepTenantPeriods: tenant acme keeps notifications 10 days and
// attempts 5; its older rows go in batches, its unread notifications
// leave the counters in the same statement (counters equal a recount),
// and tenant other keeps every row (no period of its own, and the global
// ones are longer).
func TestSweepTenantPeriods(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Now()
	if _, err := db.Pool.Exec(ctx, `SELECT herald_ensure_partitions('notifications', $1, now()),
		herald_ensure_partitions('delivery_attempts', $1, now())`, now.Add(-40*day)); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme", "other"} {
		for i, age := range []int{30, 12, 9, 0} {
			fanoutTo(t, db, tenant, fmt.Sprintf("e%d", i), now.Add(-time.Duration(age)*day), "u1", "u2")
		}
		if _, err := db.Pool.Exec(ctx, `INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, started_at, delivery_created_at)
			SELECT $1, gen_random_uuid(), 1, 'sent', now(), $2::timestamptz - i * interval '1 day' - interval '1 hour'
			FROM generate_series(0, 19) i`, tenant, now); err != nil {
			t.Fatal(err)
		}
	}
	// u1 read e1 (12 days old): of acme's 4 notifications past 10 days,
	// 3 are unread.
	if _, err := db.Pool.Exec(ctx, `WITH r AS (UPDATE notifications SET read_at = now() WHERE user_id = 'u1' AND event_id = 'e1'
			RETURNING tenant_id, user_id, project_id)
		UPDATE notification_counters c SET unread = c.unread - 1 FROM r
		WHERE c.tenant_id = r.tenant_id AND c.user_id = r.user_id AND c.project_id = r.project_id`); err != nil {
		t.Fatal(err)
	}
	unread := func(tenant string) int {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT coalesce(sum(unread), 0) FROM notification_counters WHERE tenant_id = $1`, tenant).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	acmeBefore, otherBefore := unread("acme"), unread("other")
	otherRows := notificationRows(t, db, "tenant_id = 'other'")
	r := store.Retention{Notifications: 365 * day, DeliveryAttempts: 30 * day,
		Tenants: map[string]store.TenantRetention{"acme": {Notifications: 10 * day, DeliveryAttempts: 5 * day}}}
	res, err := store.ApplySweeps(ctx, workerPool(t, db), r, now, store.SweepLimits{BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range res {
		got = append(got, fmt.Sprintf("%s %s %s %d/%d", s.Kind, s.Tenant, s.Key(), s.Deleted, s.Statements))
	}
	// Attempts of deliveries created 0 to 19 days (and an hour) ago: the
	// 15 of 5 days and more go.
	if want := []string{
		"notifications acme retention.tenant.acme.notifications 4/2",
		"delivery_attempts acme retention.tenant.acme.delivery_attempts 15/4",
	}; !slices.Equal(got, want) {
		t.Fatalf("sweeps:\n got %q\nwant %q", got, want)
	}
	if after := notificationRows(t, db, "tenant_id = 'other'"); !slices.Equal(after, otherRows) {
		t.Fatalf("tenant other's notifications changed:\n got %q\nwant %q", after, otherRows)
	}
	if left := notificationRows(t, db, "tenant_id = 'acme'"); !slices.Equal(left, []string{
		"acme/e2/u1 false false", "acme/e2/u2 false false", "acme/e3/u1 false false", "acme/e3/u2 false false"}) {
		t.Fatalf("acme's notifications left: %q", left)
	}
	if a, o := unread("acme"), unread("other"); a != acmeBefore-3 || o != otherBefore {
		t.Fatalf("unread: acme %d (was %d, 3 unread rows gone), other %d (was %d)", a, acmeBefore, o, otherBefore)
	}
	if d := drift(t, db); len(d) != 0 {
		t.Fatalf("counters drift after the sweep: %+v", d)
	}
	var acmeAttempts, otherAttempts int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE tenant_id = 'acme'), count(*) FILTER (WHERE tenant_id = 'other') FROM delivery_attempts`).
		Scan(&acmeAttempts, &otherAttempts); err != nil || acmeAttempts != 5 || otherAttempts != 20 {
		t.Fatalf("attempts left: acme %d, other %d (%v); want 5 and 20", acmeAttempts, otherAttempts, err)
	}
	// Counted before, none after.
	sweeps, err := r.Sweeps(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sweeps {
		if n, err := store.SweepDue(ctx, db.Pool, s, now, 1000); err != nil || n != 0 {
			t.Errorf("%s: %d rows due after the sweep (%v)", s.Key(), n, err)
		}
	}
}

// TestMigration0022RoundTrip: 0022 goes down and up again (with the ones
// after it).
func TestMigration0022RoundTrip(t *testing.T) {
	t.Parallel()
	db := testenv.PostgresAt(t, 22) // "down" undoes the last one applied
	ctx := context.Background()
	var out strings.Builder
	if err := store.MigrateTo(ctx, db.URL, "down", &out); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE proname LIKE 'herald_sweep%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("after down: %d sweep functions (%v)", n, err)
	}
	if err := store.MigrateTo(ctx, db.URL, "up", &out); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE proname LIKE 'herald_sweep%'`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("after up: %d sweep functions (%v), want 3", n, err)
	}
}

// TestMigration0024NumbersActionsPerTenant: 0024 numbers the actions there
// are 1, 2, ... per tenant in their global order, and goes down and up.
func TestMigration0024NumbersActionsPerTenant(t *testing.T) {
	t.Parallel()
	db := testenv.PostgresAt(t, 23)
	ctx := context.Background()
	for i, ten := range []string{"b", "a", "b", "a", "b"} {
		if err := store.EnsureTenant(ctx, db.Pool, ten, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, `INSERT INTO notification_actions (tenant_id, share_key, notification_id, user_id, action)
			VALUES ($1, $2, gen_random_uuid(), 'u', 'CONFIRMED')`, ten, fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	if err := store.MigrateTo(ctx, db.URL, "up", &out); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := db.Pool.QueryRow(ctx, `SELECT string_agg(tenant_id || tenant_seq, ' ' ORDER BY seq) FROM notification_actions`).Scan(&got); err != nil ||
		got != "b1 a1 b2 a2 b3" {
		t.Fatalf("numbered %q (%v), want b1 a1 b2 a2 b3", got, err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO notification_actions (tenant_id, share_key, notification_id, user_id, action)
		VALUES ('a', 'k9', gen_random_uuid(), 'u', 'CONFIRMED')`); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := db.Pool.QueryRow(ctx, `SELECT tenant_seq FROM notification_actions WHERE share_key = 'k9'`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("the next action of a is numbered %d (%v), want 3", n, err)
	}
	for _, cmd := range []string{"down", "up"} {
		if err := store.MigrateTo(ctx, db.URL, cmd, &out); err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
	}
}
