package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// fanoutDeliveries runs the relay's fan-out of event (created at at) to
// users, one EMAIL delivery each, through q's role, with fresh
// notification ids as the relay makes them. It returns the deliveries
// written.
func fanoutDeliveries(t *testing.T, q *pgxpool.Pool, event string, at time.Time, users ...string) []store.NewDelivery {
	t.Helper()
	ctx := context.Background()
	tx, err := q.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var notes []store.NewNotification
	var dels []store.NewDelivery
	for _, u := range users {
		var id string
		if err := tx.QueryRow(ctx, `SELECT gen_random_uuid()::text`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		notes = append(notes, store.NewNotification{ID: id, TenantID: "t", EventID: event, UserID: u, EventType: "X", Severity: "info", CreatedAt: at})
		dels = append(dels, store.NewDelivery{NotificationID: id, TenantID: "t", EventID: event, EventType: "X", UserID: u, UserType: "CUSTOMER",
			Channel: "EMAIL", Severity: "info", Status: store.StatusPending, MaxAttempts: 3, NextAttemptAt: time.Now()})
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('herald.tenant', 't', true)`); err != nil {
		t.Fatal(err)
	}
	_, kept, err := store.InsertFanout(ctx, tx, notes, dels)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return kept
}

// TestDeliveryKeyRefusesDuplicateAcrossPartitions: the relay's fan-out
// of an event run twice writes its deliveries once, with the event's
// creation time as created_at, in the partition of the event's month (an
// old month, this one), by COPY (the owner, the worker) and by INSERT (a
// role bound by row-level security); a plain insert of the same
// (tenant, event, user, channel, created_at) is refused.
func TestDeliveryKeyRefusesDuplicateAcrossPartitions(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	worker, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 2, Role: store.RoleWorker})
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	// The worker's role bypasses row-level security in tests (COPY); the
	// API's role is bound by it (INSERT).
	api, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 2, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	old := time.Now().UTC().AddDate(0, -2, 0).Truncate(time.Microsecond)
	if _, err := db.Pool.Exec(ctx, `SELECT herald_ensure_partitions(t, $1, now()) FROM unnest($2::text[]) t`, old, store.PartitionedTables); err != nil {
		t.Fatal(err)
	}
	for i, at := range []time.Time{time.Now().UTC().Truncate(time.Microsecond), old} {
		for _, pool := range []*pgxpool.Pool{db.Pool, worker, api} {
			ev := fmt.Sprintf("e%d-%p", i, pool)
			if got := fanoutDeliveries(t, pool, ev, at, "u1", "u2"); len(got) != 2 || !got[0].CreatedAt.Equal(at) {
				t.Fatalf("first fan-out of %s wrote %+v, want 2 deliveries created at %s", ev, got, at)
			}
			if got := fanoutDeliveries(t, pool, ev, at, "u1", "u2"); len(got) != 0 {
				t.Fatalf("second fan-out of %s wrote %d deliveries, want none", ev, len(got))
			}
			var n int
			var parts string
			var created time.Time
			if err := db.Pool.QueryRow(ctx, `SELECT count(*), string_agg(DISTINCT tableoid::regclass::text, ','), min(created_at)
				FROM deliveries WHERE event_id = $1`, ev).Scan(&n, &parts, &created); err != nil {
				t.Fatal(err)
			}
			if n != 2 || parts != monthName("deliveries", at) || !created.Equal(at) {
				t.Fatalf("%s: %d deliveries in %s created at %s, want 2 in %s created at the event's %s",
					ev, n, parts, created, monthName("deliveries", at), at)
			}
			_, err := db.Pool.Exec(ctx, `INSERT INTO deliveries (tenant_id, notification_id, event_id, event_type, user_id, user_type, channel, created_at)
				VALUES ('t', gen_random_uuid(), $1, 'X', 'u1', 'CUSTOMER', 'EMAIL', $2)`, ev, at)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
				t.Fatalf("duplicate delivery of %s: want a unique violation, got %v", ev, err)
			}
		}
	}
	// The key is local to each partition: each has its own unique index
	// on (tenant_id, event_id, user_id, channel, created_at), and its
	// primary key on (delivery_id, created_at).
	var missing int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT partition_name FROM herald_partitions('deliveries')
			UNION ALL SELECT 'deliveries_default') p
		WHERE (SELECT count(*) FROM pg_index i WHERE i.indrelid = p.partition_name::regclass AND i.indisunique AND i.indnatts IN (2, 5)) <> 2`).
		Scan(&missing); err != nil || missing != 0 {
		t.Fatalf("%d partitions without their two unique keys (%v)", missing, err)
	}
}

// TestDeliveryPartitionsAreLikeTheTable: every partition of deliveries,
// the default one included, has the flat table's storage settings, the
// statistics targets of its wide columns, row-level security enabled and
// forced with the worker's policy, and the partial indexes of the waiting
// rows; the parent keeps its policies and grants.
func TestDeliveryPartitionsAreLikeTheTable(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	worker, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 1, Role: store.RoleWorker})
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	if _, err := store.EnsurePartitions(ctx, worker, time.Now().AddDate(1, 0, 0)); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Pool.Query(ctx, `SELECT c.relname, array_to_string(c.reloptions, ','), c.relrowsecurity AND c.relforcerowsecurity,
			(SELECT string_agg(polname, ',') FROM pg_policy WHERE polrelid = c.oid),
			(SELECT string_agg(attname || '=' || attstattarget, ',' ORDER BY attnum) FROM pg_attribute
				WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped AND attstattarget = 0),
			(SELECT string_agg(substr(x.relname, length(c.relname) + 2), ',' ORDER BY x.relname) FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid
				WHERE i.indrelid = c.oid AND NOT i.indisunique)
		FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid WHERE h.inhparent = 'deliveries'::regclass ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var name, opts, policies, stats, indexes string
		var rls bool
		if err := rows.Scan(&name, &opts, &rls, &policies, &stats, &indexes); err != nil {
			t.Fatal(err)
		}
		n++
		got := fmt.Sprintf("%s|%t|%s|%s|%s", opts, rls, policies, stats, indexes)
		want := "fillfactor=50,autovacuum_vacuum_scale_factor=0.02,autovacuum_vacuum_insert_scale_factor=0.05,autovacuum_analyze_scale_factor=0.05|true|worker_all|" +
			"recipient=0,content=0,provider_message_id=0,last_error=0|digest_items,due,leased,pending,waiting"
		if got != want {
			t.Errorf("partition %s:\n got %s\nwant %s", name, got, want)
		}
	}
	if err := rows.Err(); err != nil || n < 2*(store.PartitionsAhead+1)+1 {
		t.Fatalf("%d partitions of deliveries (%v), want this year's months ahead, next year's and the default", n, err)
	}
	var policies, grants string
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT string_agg(polname || ':' || array_to_string(polroles::regrole[], ','), ' ' ORDER BY polname)
			FROM pg_policy WHERE polrelid = 'deliveries'::regclass),
		(SELECT string_agg(grantee || ':' || privilege_type, ' ' ORDER BY grantee, privilege_type) FROM information_schema.role_table_grants
			WHERE table_name = 'deliveries' AND grantee LIKE 'herald_%')`).Scan(&policies, &grants); err != nil {
		t.Fatal(err)
	}
	if policies != "admin_read:herald_admin api_tenant:herald_api worker_all:herald_worker" {
		t.Errorf("policies of deliveries: %s", policies)
	}
	if grants != "herald_admin:SELECT herald_api:DELETE herald_api:INSERT herald_api:SELECT herald_api:UPDATE "+
		"herald_worker:DELETE herald_worker:INSERT herald_worker:SELECT herald_worker:UPDATE" {
		t.Errorf("grants of deliveries: %s", grants)
	}
	// The daemon's role analyzes a month of deliveries on its own
	// (store.AnalyzeStale, through herald_analyze).
	if _, err := worker.Exec(ctx, `SELECT herald_analyze($1)`, monthName("deliveries", time.Now())); err != nil {
		t.Errorf("herald_analyze of a month of deliveries: %v", err)
	}
	// A partition reached directly by the API's role is refused.
	api, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 1, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	if _, err := api.Exec(ctx, `SELECT count(*) FROM `+monthName("deliveries", time.Now())); err == nil {
		t.Error("herald_api read a partition of deliveries directly")
	}
}

// TestRetentionOfDeliveriesKeepsOwedOnes: retention of deliveries drops
// the months past it, but a delivery of such a month that is not final
// (RETRY, PUBLISHED and handed off, DEFERRED, WAITING) moves to the default
// partition with its id, status and attempts: it is then delivered (its
// outcome recorded, its attempt logged), a handoff naming it and a
// dropped delivery is claimed without error, and once final it goes with
// the default partition's next round. SKIPPED, CANCELLED and DIGESTED
// are final like SENT and FAILED: they go with their month.
func TestRetentionOfDeliveriesKeepsOwedOnes(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	worker, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 2, Role: store.RoleWorker})
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	old := now.AddDate(0, -4, 0)
	if _, err := worker.Exec(ctx, `SELECT herald_ensure_partitions(t, $1, $2) FROM unnest($3::text[]) t`, old, now, store.PartitionedTables); err != nil {
		t.Fatal(err)
	}
	oldOnes := fanoutDeliveries(t, worker, "old", old, "sent", "failed", "retry", "handed", "deferred", "gone-handed",
		"waiting", "skipped", "cancelled", "digested")
	newOnes := fanoutDeliveries(t, worker, "new", now, "sent", "retry")
	byUser := map[string]string{}
	for _, d := range append(oldOnes, newOnes...) {
		byUser[d.EventID+"/"+d.UserID] = d.ID
	}
	set := func(status string, keys ...string) {
		for _, k := range keys {
			if _, err := db.Pool.Exec(ctx, `UPDATE deliveries SET status = $2, attempts = CASE WHEN $2 IN ('SENT', 'FAILED', 'RETRY') THEN 1 ELSE 0 END
				WHERE delivery_id = $1`, byUser[k], status); err != nil {
				t.Fatal(err)
			}
		}
	}
	set(store.StatusSent, "old/sent", "new/sent", "old/gone-handed")
	set(store.StatusFailed, "old/failed")
	set(store.StatusRetry, "old/retry", "new/retry")
	set(store.StatusPublished, "old/handed")
	set(store.StatusDeferred, "old/deferred")
	set(store.StatusWaiting, "old/waiting")
	set(store.StatusSkipped, "old/skipped")
	set(store.StatusCancelled, "old/cancelled")
	set(store.StatusDigested, "old/digested")
	// One handoff names a delivery retention keeps and one it drops.
	tx, err := worker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.InsertHandoff(ctx, tx, []string{byUser["old/handed"], byUser["old/gone-handed"]}, -time.Second, 0); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	r := store.Retention{Deliveries: 60 * 24 * time.Hour}
	dropped, err := store.ApplyRetention(ctx, worker, r, now)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range dropped {
		names = append(names, p.Name)
		if p.Table != "deliveries" {
			t.Errorf("dropped %s with only deliveries' retention set", p.Name)
		}
	}
	if !strings.Contains(strings.Join(names, " "), monthName("deliveries", old)) {
		t.Fatalf("dropped %v, want %s among them", names, monthName("deliveries", old))
	}
	where := func() map[string]string {
		rows, err := db.Pool.Query(ctx, `SELECT event_id || '/' || user_id, status || '@' || tableoid::regclass::text FROM deliveries`)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			got[k] = v
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	cur := monthName("deliveries", now)
	want := map[string]string{
		"old/retry": "RETRY@deliveries_default", "old/handed": "PUBLISHED@deliveries_default", "old/deferred": "DEFERRED@deliveries_default",
		"old/waiting": "WAITING@deliveries_default",
		"new/sent":    "SENT@" + cur, "new/retry": "RETRY@" + cur,
	}
	if got := where(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("deliveries after retention:\n got %v\nwant %v", got, want)
	}

	// The handoff gives the publisher its delivery that is left; the
	// dropped one is not an error.
	tx, err = worker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	claimed, handoffs, err := store.ClaimHandoffs(ctx, tx, 10)
	if err != nil || handoffs != 1 || len(claimed) != 1 || claimed[0].ID != byUser["old/handed"] {
		t.Fatalf("claim handoffs: %+v, %d handoffs (%v); want old/handed of 1 handoff", claimed, handoffs, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The kept delivery is sent: loaded, its outcome recorded, its
	// attempt logged with the delivery's created_at.
	id := byUser["old/handed"]
	loaded, err := store.LoadForSend(ctx, worker, []store.Ref{{ID: id, Attempt: 1}})
	if err != nil || len(loaded) != 1 || !loaded[0].CreatedAt.Equal(oldOnes[0].CreatedAt) {
		t.Fatalf("load for send of the kept delivery: %+v (%v)", loaded, err)
	}
	out := store.Outcome{ID: id, Attempt: 1, Kind: "sent", Status: store.StatusSent, StartedAt: now}
	if n, err := store.RecordOutcomes(ctx, worker, []store.Outcome{out}); err != nil || n != 1 {
		t.Fatalf("outcome of the kept delivery: %d attempts logged (%v), want 1", n, err)
	}
	var status string
	var attempts int
	if err := db.Pool.QueryRow(ctx, `SELECT d.status, (SELECT count(*) FROM delivery_attempt_log a
			WHERE a.delivery_id = d.delivery_id AND a.delivery_created_at = d.created_at AND a.outcome = 'sent')
		FROM deliveries d WHERE d.delivery_id = $1`, id).Scan(&status, &attempts); err != nil || status != store.StatusSent || attempts != 1 {
		t.Fatalf("kept delivery after its outcome: %s with %d attempts (%v), want SENT with 1", status, attempts, err)
	}
	// The retry of an old month is claimed by the publisher as any other.
	tx, err = worker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE deliveries SET next_attempt_at = now() - interval '1 minute' WHERE queue = 'RETRY'`); err != nil {
		t.Fatal(err)
	}
	retries, err := store.ClaimForPublish(ctx, tx, store.ClaimRetry, 10, time.Minute)
	if err != nil || len(retries) != 2 {
		t.Fatalf("claim retries: %+v (%v), want old/retry and new/retry", retries, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The next round deletes the default partition's final rows past
	// retention, and keeps the others.
	if _, err := store.ApplyRetention(ctx, worker, r, now); err != nil {
		t.Fatal(err)
	}
	delete(want, "old/handed")
	if got := where(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("deliveries after the second round:\n got %v\nwant %v", got, want)
	}
}

// TestMigration0021PartitionsExistingDeliveries migrates a database at
// 0020 holding deliveries of an old month and of now, with attempts, and
// an event not yet fanned out of an older month: every delivery lands in
// its month's partition with its created_at (its attempts' partition key
// still matches), the event's month exists for its fan-out; then the down
// migration gives back the flat table with every row, and up again works.
func TestMigration0021PartitionsExistingDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.PostgresAt(t, 20)
	url, pool := db.URL, db.Pool
	if err := store.EnsureTenant(ctx, pool, "t", "t"); err != nil {
		t.Fatal(err)
	}
	old, older := time.Date(2025, 3, 31, 23, 0, 0, 0, time.UTC), time.Date(2024, 11, 2, 0, 0, 0, 0, time.UTC)
	const oldID, newID = "0190d0a0-0000-7000-8000-000000000001", "0190d0a0-0000-7000-8000-000000000002"
	for _, s := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO deliveries (delivery_id, tenant_id, notification_id, event_id, event_type, user_id, user_type, channel, status, attempts, created_at)
			VALUES ($1, 't', $1, 'e1', 'T', 'u', 'STAFF', 'EMAIL', 'SENT', 1, $2)`, []any{oldID, old}},
		{`INSERT INTO deliveries (delivery_id, tenant_id, notification_id, event_id, event_type, user_id, user_type, channel, status)
			VALUES ($1, 't', $1, 'e2', 'T', 'u', 'STAFF', 'EMAIL', 'RETRY')`, []any{newID}},
		{`SELECT herald_ensure_partitions('delivery_attempts', $1, $1)`, []any{old}},
		{`INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, started_at, delivery_created_at)
			SELECT tenant_id, delivery_id, 1, 'sent', now(), created_at FROM deliveries`, nil},
		{`INSERT INTO event_outbox (tenant_id, event_id, event_type, created_at) VALUES ('t', 'e4', 'T', $1)`, []any{older}},
	} {
		if _, err := pool.Exec(ctx, s.sql, s.args...); err != nil {
			t.Fatalf("%s: %v", s.sql, err)
		}
	}
	if err := store.MigrateUpTo(ctx, url, 21); err != nil {
		t.Fatal(err)
	}
	rows := func() string {
		rows, err := pool.Query(ctx, `SELECT d.event_id || ':' || d.tableoid::regclass::text || ':' || d.status || ':' || coalesce(d.queue, '-') || ':' ||
				(SELECT count(*) FROM delivery_attempts a WHERE a.delivery_id = d.delivery_id AND a.delivery_created_at = d.created_at)
			FROM deliveries d ORDER BY d.event_id`)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(got, " ")
	}
	cur := monthName("deliveries", time.Now())
	if got, want := rows(), "e1:deliveries_y2025m03:SENT:-:1 e2:"+cur+":RETRY:RETRY:1"; got != want {
		t.Fatalf("deliveries after the migration: %s, want %s", got, want)
	}
	names := strings.Join(partitionNames(t, pool, "deliveries"), " ")
	if !strings.Contains(names, "deliveries_y2024m11") || !strings.Contains(names, monthName("deliveries", time.Now().AddDate(0, store.PartitionsAhead, 0))) {
		t.Fatalf("partitions of deliveries after the migration: %s", names)
	}

	// Down: the flat table of 0020, every row, its keys and settings.
	if err := store.Migrate(ctx, url, "down"); err != nil {
		t.Fatal(err)
	}
	var kind, opts, keys string
	if err := pool.QueryRow(ctx, `SELECT relkind::text, array_to_string(reloptions, ','),
			(SELECT string_agg(pg_get_indexdef(indexrelid), '; ' ORDER BY indexrelid::regclass::text) FROM pg_index WHERE indrelid = c.oid AND indisunique)
		FROM pg_class c WHERE relname = 'deliveries'`).Scan(&kind, &opts, &keys); err != nil {
		t.Fatal(err)
	}
	if kind != "r" || !strings.HasPrefix(opts, "fillfactor=50") ||
		keys != "CREATE UNIQUE INDEX deliveries_pkey ON public.deliveries USING btree (delivery_id); "+
			"CREATE UNIQUE INDEX deliveries_tenant_id_event_id_user_id_channel_key ON public.deliveries USING btree (tenant_id, event_id, user_id, channel)" {
		t.Fatalf("deliveries after down: relkind %s, options %s, unique keys %s", kind, opts, keys)
	}
	if got, want := rows(), "e1:deliveries:SENT:-:1 e2:deliveries:RETRY:RETRY:1"; got != want {
		t.Fatalf("deliveries after down: %s, want %s", got, want)
	}
	if _, err := pool.Exec(ctx, `SELECT herald_ensure_partitions('deliveries', now(), now())`); err == nil {
		t.Fatal("herald_ensure_partitions accepts deliveries after down")
	}
	if err := store.Migrate(ctx, url, "up"); err != nil {
		t.Fatal(err)
	}
	if got, want := rows(), "e1:deliveries_y2025m03:SENT:-:1 e2:"+cur+":RETRY:RETRY:1"; got != want {
		t.Fatalf("deliveries after up again: %s, want %s", got, want)
	}
}

// TestDeliveriesOfAMonthWithoutPartition: a delivery of a month without a
// partition (an event enqueued for a month never created) waits in the
// default partition, and moves, waiting status and all, into its month
// when the daemon creates it; the month is attached with the keys,
// indexes and settings of the others.
func TestDeliveriesOfAMonthWithoutPartition(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	worker, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 2, Role: store.RoleWorker})
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	at := time.Date(2040, 1, 15, 0, 0, 0, 0, time.UTC)
	if got := fanoutDeliveries(t, worker, "future", at, "u1", "u2"); len(got) != 2 {
		t.Fatalf("fan-out of an event of a month without partition wrote %d deliveries, want 2", len(got))
	}
	where := func() string {
		var parts, queues string
		if err := db.Pool.QueryRow(ctx, `SELECT string_agg(DISTINCT tableoid::regclass::text, ','), string_agg(queue, ',')
			FROM deliveries WHERE event_id = 'future'`).Scan(&parts, &queues); err != nil {
			t.Fatal(err)
		}
		return parts + " " + queues
	}
	if got := where(); got != "deliveries_default PENDING,PENDING" {
		t.Fatalf("deliveries of 2040-01 in %s, want the default partition", got)
	}
	if _, err := store.EnsurePartitions(ctx, worker, at); err != nil {
		t.Fatal(err)
	}
	if got := where(); got != "deliveries_y2040m01 PENDING,PENDING" {
		t.Fatalf("deliveries of 2040-01 in %s after its month was created, want deliveries_y2040m01", got)
	}
	var opts, indexes string
	if err := db.Pool.QueryRow(ctx, `SELECT array_to_string(reloptions, ','), (SELECT string_agg(x.relname, ',' ORDER BY x.relname)
			FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid WHERE i.indrelid = c.oid AND (NOT i.indisunique OR i.indisprimary))
		FROM pg_class c WHERE relname = 'deliveries_y2040m01'`).Scan(&opts, &indexes); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(opts, "fillfactor=50,") || indexes != "deliveries_y2040m01_digest_items,deliveries_y2040m01_due,deliveries_y2040m01_leased,deliveries_y2040m01_pending,deliveries_y2040m01_pkey,deliveries_y2040m01_waiting" {
		t.Fatalf("the month attached with options %s and indexes %s", opts, indexes)
	}
	if got := fanoutDeliveries(t, worker, "future", at, "u1", "u2"); len(got) != 0 {
		t.Fatalf("fan-out run again wrote %d deliveries, want none", len(got))
	}
}

// TestWrittenAtReadsTheUUIDv7Time: the fan-out's time of a delivery is
// the millisecond its UUIDv7 id carries; an id of another version has
// none.
func TestWrittenAtReadsTheUUIDv7Time(t *testing.T) {
	t.Parallel()
	at, ok := store.WrittenAt("0190d0a0-0000-7000-8000-000000000001")
	if want := time.UnixMilli(0x0190d0a00000); !ok || !at.Equal(want) {
		t.Fatalf("WrittenAt = %s, %v; want %s", at, ok, want)
	}
	if _, ok := store.WrittenAt("6ba7b810-9dad-41d1-80b4-00c04fd430c8"); ok {
		t.Fatal("WrittenAt of a version 4 id")
	}
}

// TestFanoutWritesLargeBatches: a relay batch larger than one INSERT's
// chunk (a role bound by row-level security writes by INSERT, 500
// deliveries a statement) and the same batch by COPY (streamed row by row)
// write every delivery once, with its recipient and content as given (an
// empty one as {}), and a second run of the batch writes none.
func TestFanoutWritesLargeBatches(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	api, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 2, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	const users = 1234 // two full chunks and a partial one
	at := time.Now().UTC().Truncate(time.Microsecond)
	for k, pool := range []*pgxpool.Pool{api, db.Pool} {
		name := []string{"insert", "copy"}[k]
		event := "large-" + name
		notes := make([]store.NewNotification, users)
		dels := make([]store.NewDelivery, users)
		for i := range users {
			u := fmt.Sprintf("u%d", i)
			id := fmt.Sprintf("00000000-0000-4000-800%d-%012d", k, i)
			notes[i] = store.NewNotification{ID: id, TenantID: "t", EventID: event, UserID: u, EventType: "X", Severity: "info", CreatedAt: at}
			dels[i] = store.NewDelivery{NotificationID: id, TenantID: "t", EventID: event, EventType: "X", UserID: u, UserType: "CUSTOMER",
				Channel: "EMAIL", Severity: "info", Status: store.StatusPending, MaxAttempts: 3, NextAttemptAt: at,
				Recipient: []byte(fmt.Sprintf(`{"UserID": %q}`, u)), Content: []byte(fmt.Sprintf(`{"Title": "n%d"}`, i))}
			if i%2 == 1 {
				dels[i].Content = nil // stored as {}
			}
		}
		write := func() []store.NewDelivery {
			t.Helper()
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `SELECT set_config('herald.tenant', 't', true)`); err != nil {
				t.Fatal(err)
			}
			_, kept, err := store.InsertFanout(ctx, tx, notes, dels)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			return kept
		}
		if kept := write(); len(kept) != users {
			t.Fatalf("%s: first run wrote %d deliveries, want %d", name, len(kept), users)
		}
		if kept := write(); len(kept) != 0 {
			t.Fatalf("%s: second run wrote %d deliveries, want none", name, len(kept))
		}
		var n, ids, wrong int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT delivery_id),
				count(*) FILTER (WHERE recipient->>'UserID' <> user_id
					OR content <> CASE WHEN substr(user_id, 2)::int % 2 = 1 THEN '{}'::jsonb
						ELSE jsonb_build_object('Title', 'n' || substr(user_id, 2)) END)
			FROM deliveries WHERE event_id = $1`, event).Scan(&n, &ids, &wrong); err != nil {
			t.Fatal(err)
		}
		if n != users || ids != users || wrong != 0 {
			t.Errorf("%s: %d rows, %d ids, %d with the wrong recipient or content; want %d, %d, 0", name, n, ids, wrong, users, users)
		}
	}
}
