package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/jackc/pgx/v5/pgconn"
)

func monthName(table string, t time.Time) string {
	t = t.UTC()
	return fmt.Sprintf("%s_y%04dm%02d", table, t.Year(), int(t.Month()))
}

func partitionNames(t *testing.T, q store.Querier, table string) []string {
	t.Helper()
	parts, err := store.Partitions(context.Background(), q, table)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range parts {
		names = append(names, p.Name)
	}
	return names
}

// TestMigration0018PartitionsExistingAttempts migrates a database at
// version 0017 that holds attempts (of a delivery of last month's year
// before, of one of now, and one whose delivery is gone) and finds each in
// the partition of its delivery's month, and the months ahead created.
func TestMigration0018PartitionsExistingAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.PostgresAt(t, 17)
	url, pool := db.URL, db.Pool
	if err := store.EnsureTenant(ctx, pool, "t", "t"); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2025, 1, 15, 12, 0, 0, 0, time.UTC)
	const oldID, newID, goneID = "0190d0a0-0000-7000-8000-000000000001", "0190d0a0-0000-7000-8000-000000000002", "0190d0a0-0000-7000-8000-000000000003"
	for _, s := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO deliveries (delivery_id, tenant_id, notification_id, event_id, event_type, user_id, user_type, channel, created_at)
			VALUES ($1, 't', $1, 'e1', 'T', 'u', 'STAFF', 'EMAIL', $2)`, []any{oldID, old}},
		{`INSERT INTO deliveries (delivery_id, tenant_id, notification_id, event_id, event_type, user_id, user_type, channel)
			VALUES ($1, 't', $1, 'e2', 'T', 'u', 'STAFF', 'EMAIL')`, []any{newID}},
		{`INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, started_at) VALUES
			('t', $1, 1, 'retryable', $4), ('t', $1, 2, 'sent', $4), ('t', $2, 1, 'sent', now()), ('t', $3, 1, 'sent', $5)`,
			[]any{oldID, newID, goneID, old.Add(time.Hour), time.Date(2024, 6, 3, 0, 0, 0, 0, time.UTC)}},
	} {
		if _, err := pool.Exec(ctx, s.sql, s.args...); err != nil {
			t.Fatalf("%s: %v", s.sql, err)
		}
	}
	if err := store.MigrateUpTo(ctx, url, 18); err != nil {
		t.Fatal(err)
	}
	var kind string
	if err := pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE relname = 'delivery_attempts'`).Scan(&kind); err != nil || kind != "p" {
		t.Fatalf("delivery_attempts relkind %q (%v), want p (partitioned)", kind, err)
	}
	now := time.Now()
	want := map[string]string{
		oldID + "/1": monthName("delivery_attempts", old), oldID + "/2": monthName("delivery_attempts", old),
		newID + "/1": monthName("delivery_attempts", now), goneID + "/1": "delivery_attempts_y2024m06",
	}
	rows, err := pool.Query(ctx, `SELECT delivery_id::text || '/' || attempt, tableoid::regclass::text FROM delivery_attempts`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var k, part string
		if err := rows.Scan(&k, &part); err != nil {
			t.Fatal(err)
		}
		got[k] = part
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("attempts by partition after migration:\n got %v\nwant %v", got, want)
	}
	names := strings.Join(partitionNames(t, pool, "delivery_attempts"), " ")
	for m := range store.PartitionsAhead + 1 {
		if n := monthName("delivery_attempts", now.AddDate(0, m, 0)); !strings.Contains(names, n) {
			t.Errorf("partition %s (%d months ahead) missing: %s", n, m, names)
		}
	}
	// Months with no rows between the oldest and now are created too, so
	// no insert between them fails.
	if !strings.Contains(names, "delivery_attempts_y2024m12") {
		t.Errorf("partition of 2024-12 missing: %s", names)
	}
}

// TestAttemptKeyRefusesDuplicateAcrossPartitions: the primary key of the
// partitioned audit log includes the partition key, and still refuses a
// second row for the same attempt — a plain insert fails, and an outcome
// recorded again (after the delivery was set back, as a retried statement
// would see it) logs nothing.
func TestAttemptKeyRefusesDuplicateAcrossPartitions(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	id := insertOneDelivery(t, db, 3)
	out := store.Outcome{ID: id, Attempt: 1, Kind: "retryable", Error: "busy", Status: store.StatusRetry, NextAttemptAt: time.Now(), StartedAt: time.Now()}
	if n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{out}); err != nil || n != 1 {
		t.Fatalf("record attempt 1: %d %v", n, err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE deliveries SET attempts = 0 WHERE delivery_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{out}); err != nil || n != 0 {
		t.Fatalf("attempt 1 recorded again: %d attempts logged (%v), want 0", n, err)
	}
	_, err := db.Pool.Exec(ctx, `INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, started_at, delivery_created_at)
		SELECT tenant_id, delivery_id, 1, 'sent', now(), created_at FROM deliveries WHERE delivery_id = $1`, id)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("duplicate attempt insert: want unique violation, got %v", err)
	}
	var n int
	var part string
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), min(tableoid::regclass::text) FROM delivery_attempts WHERE delivery_id = $1`, id).
		Scan(&n, &part); err != nil {
		t.Fatal(err)
	}
	if n != 1 || part != monthName("delivery_attempts", time.Now()) {
		t.Fatalf("attempts of the delivery: %d in %s, want 1 in this month's partition", n, part)
	}
	// The key is local to each partition: every partition has its own
	// unique index on (delivery_id, attempt, delivery_created_at).
	var missing int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM herald_partitions('delivery_attempts') p
		WHERE NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = p.partition_name::regclass AND i.indisunique AND i.indnatts = 3)`).
		Scan(&missing); err != nil || missing != 0 {
		t.Fatalf("%d partitions without their unique key (%v)", missing, err)
	}
}

// TestEnsurePartitionsAhead: the daemon's role creates the months ahead
// of any date, once: a second round creates none, and daemons racing
// create each partition once.
func TestEnsurePartitionsAhead(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	worker, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 4, Role: store.RoleWorker})
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	at := time.Date(2031, 11, 20, 23, 30, 0, 0, time.UTC)
	perRound := (store.PartitionsAhead + 1) * len(store.PartitionedTables)
	if n, err := store.EnsurePartitions(ctx, worker, at); err != nil || n != perRound {
		t.Fatalf("first round created %d (%v), want %d", n, err, perRound)
	}
	if n, err := store.EnsurePartitions(ctx, worker, at); err != nil || n != 0 {
		t.Fatalf("second round created %d (%v), want 0", n, err)
	}
	var names string
	for _, table := range store.PartitionedTables {
		names += " " + strings.Join(partitionNames(t, worker, table), " ")
	}
	for _, m := range []string{"y2031m11", "y2031m12", "y2032m01", "y2032m02"} {
		for _, table := range store.PartitionedTables {
			if !strings.Contains(names, table+"_"+m) {
				t.Errorf("partition %s_%s missing: %s", table, m, names)
			}
		}
	}
	// Four daemons at once, a year later.
	var wg sync.WaitGroup
	counts := make([]int, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[i], errs[i] = store.EnsurePartitions(ctx, worker, at.AddDate(1, 0, 0))
		}()
	}
	wg.Wait()
	total := 0
	for i := range 4 {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		total += counts[i]
	}
	if total != perRound {
		t.Fatalf("racing daemons created %d partitions, want %d", total, perRound)
	}
	// The daemon's role writes an attempt of a delivery of 2032-01 into
	// its partition; a partition it did not create refuses it.
	if _, err := worker.Exec(ctx, `INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, started_at, delivery_created_at)
		VALUES ('t', gen_random_uuid(), 1, 'sent', now(), '2032-01-31 23:59:59Z')`); err != nil {
		t.Fatal(err)
	}
	// A row of a month without a partition waits in the default
	// partition (migration 0020), and moves into its month when the month
	// is created.
	if _, err := worker.Exec(ctx, `INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, started_at, delivery_created_at)
		VALUES ('t', gen_random_uuid(), 1, 'sent', now(), '2040-01-15Z')`); err != nil {
		t.Fatalf("insert beyond the partitions: %v", err)
	}
	where := func() string {
		var part string
		if err := worker.QueryRow(ctx, `SELECT tableoid::regclass::text FROM delivery_attempts WHERE delivery_created_at = '2040-01-15Z'`).Scan(&part); err != nil {
			t.Fatal(err)
		}
		return part
	}
	if p := where(); p != "delivery_attempts_default" {
		t.Fatalf("row of 2040-01 in %s, want the default partition", p)
	}
	if _, err := store.EnsurePartitions(ctx, worker, time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if p := where(); p != "delivery_attempts_y2040m01" {
		t.Fatalf("row of 2040-01 in %s after its month was created, want delivery_attempts_y2040m01", p)
	}
	var pk int
	if err := worker.QueryRow(ctx, `SELECT count(*) FROM pg_index WHERE indrelid = 'delivery_attempts_y2040m01'::regclass AND indisprimary`).Scan(&pk); err != nil || pk != 1 {
		t.Fatalf("the month attached with %d primary keys (%v)", pk, err)
	}
	// Nothing but Herald's partitioned tables, nor an absurd range.
	for _, args := range [][]any{{"recipients", at, at}, {"delivery_attempts", at, at.AddDate(-1, 0, 0)}, {"delivery_attempts", at, at.AddDate(50, 0, 0)}} {
		if _, err := worker.Exec(ctx, `SELECT herald_ensure_partitions($1, $2, $3)`, args...); err == nil {
			t.Errorf("herald_ensure_partitions%v: no error", args)
		}
	}
}

// TestAttemptQueriesPrunePartitions: the daemon's read of a delivery's
// attempts (ExpireLeases' count of lost attempts) names the partition key
// and reads one partition through its primary key.
func TestAttemptQueriesPrunePartitions(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `SELECT herald_ensure_partitions('delivery_attempts', now() - interval '7 months', now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, started_at, delivery_created_at)
		SELECT 't', gen_random_uuid(), 1, 'sent', now(), now() - (i % 180) * interval '1 day' FROM generate_series(1, 5000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE delivery_attempts`); err != nil {
		t.Fatal(err)
	}
	var plan []string
	rows, err := db.Pool.Query(ctx, `EXPLAIN (COSTS OFF) SELECT count(*) FROM delivery_attempts a
		WHERE a.delivery_id = '0190d0a0-0000-7000-8000-000000000001' AND a.delivery_created_at = now() - interval '40 days' AND a.outcome = 'lost'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, l)
	}
	text := strings.Join(plan, "\n")
	if len(partitionNames(t, db.Pool, "delivery_attempts")) < 7 {
		t.Fatalf("want at least 7 partitions: %v", partitionNames(t, db.Pool, "delivery_attempts"))
	}
	// now() is stable, not immutable: the planner keeps every partition
	// and prunes at executor start-up, so EXPLAIN shows the removed ones.
	if !strings.Contains(text, "Subplans Removed") || !strings.Contains(text, "_pkey") || strings.Contains(text, "Seq Scan") {
		t.Fatalf("lost-attempt count is not pruned to one partition's key:\n%s", text)
	}
}

// TestAnalyzeStaleSeesPartitions: a partitioned table whose partitions
// grew is analyzed as a whole (the statistics of it and of its
// partitions), and a later round finds it fresh.
func TestAnalyzeStaleSeesPartitions(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, started_at, delivery_created_at)
		SELECT 't', gen_random_uuid(), 1, 'sent', now(), now() FROM generate_series(1, 3000)`); err != nil {
		t.Fatal(err)
	}
	var got []string
	testenv.Eventually(t, 20*time.Second, func() bool {
		tables, err := store.AnalyzeStale(ctx, db.Pool)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, tables...)
		return strings.Contains(strings.Join(got, " "), "delivery_attempts")
	}, "delivery_attempts never analyzed after 3,000 inserts (analyzed: %v)", got)
	var parent, part float64
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT reltuples FROM pg_class WHERE relname = 'delivery_attempts'),
		(SELECT reltuples FROM pg_class WHERE relname = $1)`, monthName("delivery_attempts", time.Now())).Scan(&parent, &part); err != nil {
		t.Fatal(err)
	}
	if parent != 3000 || part != 3000 {
		t.Fatalf("statistics know of %.0f attempts in the table and %.0f in this month's partition, want 3000 and 3000", parent, part)
	}
	if tables, err := store.AnalyzeStale(ctx, db.Pool); err != nil || strings.Contains(strings.Join(tables, " "), "delivery_attempts") {
		t.Fatalf("second round analyzed %v (%v); delivery_attempts is fresh", tables, err)
	}
}

// TestRetentionDropsWholeMonths: with attempts kept 30 days, the months
// whose every row is older go (detached and dropped, as the daemon's
// role), the month that straddles the limit and the newer ones stay with
// every row, and a round later drops nothing more.
func TestRetentionDropsWholeMonths(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	worker, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 2, Role: store.RoleWorker})
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	now := time.Date(2031, 5, 10, 12, 0, 0, 0, time.UTC)
	if _, err := worker.Exec(ctx, `SELECT herald_ensure_partitions('delivery_attempts', $1, $2)`, now.AddDate(0, -4, 0), now); err != nil {
		t.Fatal(err)
	}
	// 100 attempts a day from 2031-01-10 to 2031-05-10.
	if _, err := worker.Exec(ctx, `INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, started_at, delivery_created_at)
		SELECT 't', gen_random_uuid(), 1, 'sent', d, d FROM generate_series($1::timestamptz, $2::timestamptz, interval '864 seconds') d`,
		now.AddDate(0, -4, 0), now); err != nil {
		t.Fatal(err)
	}
	count := func(from, to time.Time) int {
		var n int
		if err := worker.QueryRow(ctx, `SELECT count(*) FROM delivery_attempts WHERE delivery_created_at >= $1 AND delivery_created_at < $2`,
			from, to).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	april := time.Date(2031, 4, 1, 0, 0, 0, 0, time.UTC)
	keptBefore := count(april, now.AddDate(1, 0, 0))
	r := store.Retention{DeliveryAttempts: 30 * 24 * time.Hour}
	// Dropped: January to March (every row before April 1, older than 30
	// days on May 10). April has rows of April 10 and later: it stays.
	dropped, err := store.ApplyRetention(ctx, worker, r, now)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range dropped {
		names = append(names, p.Name)
	}
	// (and the months of today the migration made: every one before 2031)
	got := strings.Join(names, " ")
	if !strings.HasSuffix(got, "delivery_attempts_y2031m01 delivery_attempts_y2031m02 delivery_attempts_y2031m03") ||
		strings.Contains(got, "y2031m04") {
		t.Fatalf("dropped %q", got)
	}
	if left := strings.Join(partitionNames(t, worker, "delivery_attempts"), " "); left != "delivery_attempts_y2031m04 delivery_attempts_y2031m05" {
		t.Fatalf("left %q after dropping %q", left, got)
	}
	if n := count(time.Time{}, april); n != 0 {
		t.Fatalf("%d attempts before April left", n)
	}
	if n := count(april, now.AddDate(1, 0, 0)); n != keptBefore || n == 0 {
		t.Fatalf("%d attempts from April on after the drop, want all %d", n, keptBefore)
	}
	if again, err := store.ApplyRetention(ctx, worker, r, now); err != nil || len(again) != 0 {
		t.Fatalf("second round dropped %v (%v)", again, err)
	}
	// April goes once its last row is 30 days old: on May 31.
	parts, err := store.Partitions(ctx, worker, "delivery_attempts")
	if err != nil {
		t.Fatal(err)
	}
	at, ok := r.DropAt(parts[0])
	if parts[0].Name != "delivery_attempts_y2031m04" || !ok || !at.Equal(time.Date(2031, 5, 31, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("oldest partition %s drops at %s (%v), want April at 2031-05-31", parts[0].Name, at, ok)
	}
	// No retention: nothing dropped; the API role may not drop anything.
	if d, err := store.ApplyRetention(ctx, worker, store.Retention{}, now.AddDate(10, 0, 0)); err != nil || len(d) != 0 {
		t.Fatalf("no retention dropped %v (%v)", d, err)
	}
	api, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 1, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	if _, err := api.Exec(ctx, `SELECT herald_drop_partitions('delivery_attempts', now() + interval '10 years')`); err == nil {
		t.Fatal("herald_api dropped partitions")
	}
	if _, err := worker.Exec(ctx, `SELECT herald_drop_partitions('recipients', now())`); err == nil {
		t.Fatal("herald_drop_partitions accepted recipients")
	}
}

// fanout writes one notification (and no delivery) per user for an event
// created at at, with fresh notification ids, as the relay does.
func fanout(t *testing.T, db *testenv.DB, event string, at time.Time, users ...string) int {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var notes []store.NewNotification
	for _, u := range users {
		var id string
		if err := tx.QueryRow(ctx, `SELECT gen_random_uuid()::text`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		notes = append(notes, store.NewNotification{ID: id, TenantID: "t", EventID: event, UserID: u, EventType: "X", Severity: "info", CreatedAt: at})
	}
	n, _, err := store.InsertFanout(ctx, tx, notes, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFanoutKeyRefusesRetriedEventAcrossPartitions: a fan-out of an event
// run again (new notification ids, the event's same creation time) writes
// nothing, in this month's partition and in an older one; the rows go to
// the partition of the event's month.
func TestFanoutKeyRefusesRetriedEventAcrossPartitions(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	old := time.Now().UTC().AddDate(0, -2, 0)
	if _, err := db.Pool.Exec(ctx, `SELECT herald_ensure_partitions('notifications', $1, now())`, old); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{time.Now(), old} {
		ev := "e-" + at.Format("200601")
		if n := fanout(t, db, ev, at, "u1", "u2"); n != 2 {
			t.Fatalf("first fan-out of %s wrote %d, want 2", ev, n)
		}
		if n := fanout(t, db, ev, at, "u1", "u2", "u3"); n != 1 {
			t.Fatalf("retried fan-out of %s wrote %d, want 1 (u3 only)", ev, n)
		}
		var n int
		var parts string
		if err := db.Pool.QueryRow(ctx, `SELECT count(*), string_agg(DISTINCT tableoid::regclass::text, ',') FROM notifications WHERE event_id = $1`, ev).
			Scan(&n, &parts); err != nil {
			t.Fatal(err)
		}
		if n != 3 || parts != monthName("notifications", at) {
			t.Fatalf("%s: %d notifications in %s, want 3 in %s", ev, n, parts, monthName("notifications", at))
		}
	}
	var unread int
	if err := db.Pool.QueryRow(ctx, `SELECT sum(unread) FROM notification_counters WHERE tenant_id = 't'`).Scan(&unread); err != nil || unread != 6 {
		t.Fatalf("unread counters sum to %d (%v), want 6", unread, err)
	}
}

// TestRetentionOfNotificationsKeepsCountersExact: dropping the months of
// notifications past retention takes their unread rows off the counters
// in the same transaction: afterwards every counter equals a recount
// (store.RepairCounters finds no drift), and the rows left are the newer
// months' whole.
func TestRetentionOfNotificationsKeepsCountersExact(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Now().UTC()
	if _, err := db.Pool.Exec(ctx, `SELECT herald_ensure_partitions('notifications', $1, now())`, now.AddDate(0, -5, 0)); err != nil {
		t.Fatal(err)
	}
	users := []string{"u1", "u2", "u3"}
	for back := range 6 {
		for e := range 4 {
			fanout(t, db, fmt.Sprintf("e%d-%d", back, e), now.AddDate(0, -back, 0), users...)
		}
	}
	// Some read, some archived, in old and new months.
	if _, err := db.Pool.Exec(ctx, `WITH r AS (UPDATE notifications SET read_at = now() WHERE event_id LIKE '%-1' AND user_id <> 'u3'
			RETURNING tenant_id, user_id, project_id, archived_at IS NULL AS counted),
		a AS (UPDATE notifications SET archived_at = now() WHERE event_id LIKE '%-2' AND user_id = 'u1'
			RETURNING tenant_id, user_id, project_id, read_at IS NULL AS counted)
		UPDATE notification_counters c SET unread = c.unread - x.n FROM (
			SELECT tenant_id, user_id, project_id, count(*) AS n FROM (SELECT * FROM r UNION ALL SELECT * FROM a) y WHERE counted GROUP BY 1, 2, 3) x
		WHERE c.tenant_id = x.tenant_id AND c.user_id = x.user_id AND c.project_id = x.project_id`); err != nil {
		t.Fatal(err)
	}
	drift := func() []store.Drift {
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
	if d := drift(); len(d) != 0 {
		t.Fatalf("counters drift before the drop: %+v", d)
	}
	var before int
	if err := db.Pool.QueryRow(ctx, `SELECT sum(unread) FROM notification_counters`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	worker, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 2, Role: store.RoleWorker})
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	// Kept 60 days: the months ending more than 60 days ago go (at least
	// the three oldest of the six written).
	dropped, err := store.ApplyRetention(ctx, worker, store.Retention{Notifications: 60 * 24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	var gone int
	for _, p := range dropped {
		if p.Table == "notifications" {
			gone++
		}
		if p.Table != "notifications" || p.To.After(now.Add(-60*24*time.Hour)) {
			t.Errorf("dropped %s (to %s) with notifications kept 60 days at %s", p.Name, p.To, now)
		}
	}
	if gone < 3 {
		t.Fatalf("dropped %d months of notifications, want at least 3", gone)
	}
	if d := drift(); len(d) != 0 {
		t.Fatalf("counters drift after dropping %d months: %+v", gone, d)
	}
	var after, rows int
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT sum(unread) FROM notification_counters), (SELECT count(*) FROM notifications)`).Scan(&after, &rows); err != nil {
		t.Fatal(err)
	}
	if after >= before || rows != (6-gone)*4*3 {
		t.Fatalf("after the drop: %d unread (was %d), %d rows (want %d)", after, before, rows, (6-gone)*4*3)
	}
}

// TestMigration0019PartitionsExistingNotifications migrates a database at
// 0018 holding notifications of two months and a pending event of an
// older one: every row lands in its month's partition, the event's month
// exists for its fan-out, and the counters still match a recount.
func TestMigration0019PartitionsExistingNotifications(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.PostgresAt(t, 18)
	url, pool := db.URL, db.Pool
	if err := store.EnsureTenant(ctx, pool, "t", "t"); err != nil {
		t.Fatal(err)
	}
	old, older := time.Date(2025, 3, 31, 23, 0, 0, 0, time.UTC), time.Date(2024, 11, 2, 0, 0, 0, 0, time.UTC)
	for _, s := range []struct {
		sql string
		arg time.Time
	}{
		{`INSERT INTO notifications (tenant_id, event_id, user_id, event_type, created_at, read_at) VALUES
			('t', 'e1', 'u', 'T', $1, NULL), ('t', 'e2', 'u', 'T', now(), NULL), ('t', 'e3', 'u', 'T', now(), now())`, old},
		{`INSERT INTO notification_counters (tenant_id, user_id, unread) SELECT 't', 'u', 2 WHERE $1::timestamptz IS NOT NULL`, old},
		{`INSERT INTO event_outbox (tenant_id, event_id, event_type, created_at) VALUES ('t', 'e4', 'T', $1)`, older},
	} {
		if _, err := pool.Exec(ctx, s.sql, s.arg); err != nil {
			t.Fatalf("%s: %v", s.sql, err)
		}
	}
	if err := store.MigrateUpTo(ctx, url, 19); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT event_id || ':' || tableoid::regclass::text FROM notifications ORDER BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	cur := monthName("notifications", time.Now())
	if want := []string{"e1:notifications_y2025m03", "e2:" + cur, "e3:" + cur}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("notifications by partition: %v, want %v", got, want)
	}
	names := strings.Join(partitionNames(t, pool, "notifications"), " ")
	if !strings.Contains(names, "notifications_y2024m11") {
		t.Fatalf("no partition for the pending event of 2024-11: %s", names)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if d, err := store.RepairCounters(ctx, tx, ""); err != nil || len(d) != 0 {
		t.Fatalf("counters drift after the migration: %+v (%v)", d, err)
	}
}

// TestRowsOfMonthsWithoutPartition: the outcome of a delivery whose month
// has no partition (dropped by retention, or never made) is still recorded,
// in the default partition, and so is the fan-out of such an event;
// retention then deletes those rows with the rest, the unread counters
// staying equal to a recount.
func TestRowsOfMonthsWithoutPartition(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Now()
	id := insertOneDelivery(t, db, 3)
	if _, err := db.Pool.Exec(ctx, `UPDATE deliveries SET created_at = now() - interval '400 days' WHERE delivery_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	// A failure (a first-try success would log no row: migration 0115).
	failed := store.Outcome{ID: id, Attempt: 1, Kind: "permanent", Error: "rejected", Status: store.StatusFailed, StartedAt: now}
	if n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{failed}); err != nil || n != 1 {
		t.Fatalf("outcome of a delivery of a month without partition: %d logged, %v", n, err)
	}
	if n := fanout(t, db, "old-event", now.AddDate(0, 0, -400), "u1", "u2"); n != 2 {
		t.Fatalf("fan-out of an event of a month without partition wrote %d, want 2", n)
	}
	if n := fanout(t, db, "old-event", now.AddDate(0, 0, -400), "u1", "u2"); n != 0 {
		t.Fatalf("retried fan-out of that event wrote %d, want 0", n)
	}
	count := func(table string) int {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if a, n := count("delivery_attempts_default"), count("notifications_default"); a != 1 || n != 2 {
		t.Fatalf("default partitions hold %d attempts and %d notifications, want 1 and 2", a, n)
	}
	if _, err := store.ApplyRetention(ctx, db.Pool, store.Retention{DeliveryAttempts: 30 * 24 * time.Hour, Notifications: 30 * 24 * time.Hour}, now); err != nil {
		t.Fatal(err)
	}
	if a, n := count("delivery_attempts_default"), count("notifications_default"); a != 0 || n != 0 {
		t.Fatalf("after retention the default partitions hold %d attempts and %d notifications, want none", a, n)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if d, err := store.RepairCounters(ctx, tx, ""); err != nil || len(d) != 0 {
		t.Fatalf("counters drift after retention of the default partition: %+v (%v)", d, err)
	}
	// The current month's rows stay.
	if n := count("notifications"); n != 1 {
		t.Fatalf("%d notifications left, want 1 (the delivery's, of now)", n)
	}
}
