package source

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sql/outbox"
)

// sourceDB creates a second database on the test server, a service's own,
// with the outbox installed, and returns its URL and a pool on it.
func sourceDB(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, drop, err := store.CreateDatabase(ctx, testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL), testenv.RandomName("herald_src_"))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := drop(ctx); err != nil {
			t.Log(err)
		}
	})
	install(t, pool)
	if _, err := pool.Exec(ctx, `CREATE TABLE reservation (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return url, pool
}

// install runs sql/outbox/install.sql as `herald outbox install` does.
func install(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if _, err := c.Conn().PgConn().Exec(ctx, outbox.InstallSQL).ReadAll(); err != nil {
		t.Fatalf("install.sql: %v", err)
	}
}

// heraldDB is Herald's database with the tenants acme and globex.
func heraldDB(t *testing.T) *testenv.DB {
	t.Helper()
	db := testenv.Postgres(t)
	for _, tn := range []string{"acme", "globex"} {
		if err := store.EnsureTenant(context.Background(), db.Pool, tn, ""); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// produce writes n events for tenant in one transaction of the service's
// database, with a business row beside them, committed or rolled back.
func produce(t *testing.T, pool *pgxpool.Pool, tenant, prefix string, n int, commit bool) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if _, err := tx.Exec(ctx, `INSERT INTO reservation VALUES ($1)`, tenant+"/"+id); err != nil {
			t.Fatal(err)
		}
		var outcome string
		if err := tx.QueryRow(ctx, `SELECT outcome FROM herald_enqueue($1, $2, 'ReservationRequested', $3::jsonb)`,
			tenant, id, fmt.Sprintf(`{"pax": %d}`, i+1)).Scan(&outcome); err != nil {
			t.Fatal(err)
		}
		if outcome != "new" {
			t.Fatalf("herald_enqueue %s: outcome %s", id, outcome)
		}
	}
	if commit {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func count(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := q.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func newForwarder(t *testing.T, name, url string, herald *pgxpool.Pool, m *Metrics, tenants ...string) *Forwarder {
	t.Helper()
	f, err := NewForwarder(name, Config{URL: url, Tenants: tenants, BatchSize: 50, PollInterval: 100 * time.Millisecond}, herald,
		hclog.NewNullLogger(), m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

func run(t *testing.T, fs ...*Forwarder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, f := range fs {
		wg.Go(func() { f.Run(ctx) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// Committed events reach event_outbox once, with their payload and hash;
// a rolled-back transaction leaves nothing; rows for a tenant the source
// may not write for, or a project the tenant lacks, stay in the source
// refused with words that name the field, and the rows around them flow.
func TestForwardExactlyOnceAndRefusals(t *testing.T) {
	db := heraldDB(t)
	url, src := sourceDB(t)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	f := newForwarder(t, "orders", url, db.Pool, m, "acme")

	produce(t, src, "acme", "kept", 120, true)
	produce(t, src, "acme", "rolled-back", 5, false)
	produce(t, src, "globex", "other-tenant", 2, true)
	if _, err := src.Exec(context.Background(), `SELECT herald_enqueue('acme', 'no-project', 'X', '{}', project_id => 'nope')`); err != nil {
		t.Fatal(err)
	}
	produce(t, src, "acme", "after", 3, true)
	run(t, f)

	testenv.Eventually(t, 30*time.Second, func() bool {
		return count(t, src, `SELECT count(*) FROM herald_outbox WHERE refused_at IS NULL`) == 0 &&
			count(t, db.Pool, `SELECT count(*) FROM event_outbox`) == 123
	}, "the committed acme events forwarded")
	if n := count(t, db.Pool, `SELECT count(*) FROM event_outbox WHERE event_id LIKE 'rolled-back-%' OR tenant_id <> 'acme'`); n != 0 {
		t.Fatalf("%d rolled-back or other-tenant events reached Herald", n)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM event_outbox WHERE event_id = 'kept-7' AND payload = '{"pax": 8}'
			AND payload_sha256 = sha256(convert_to(payload::text, 'UTF8')) AND status = 'PENDING' AND project_id = 'default'`); n != 1 {
		t.Fatalf("kept-7 in event_outbox: %d rows with its payload and hash", n)
	}
	rows, err := src.Query(context.Background(), `SELECT event_id, refusal FROM herald_outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var id, why string
		if err := rows.Scan(&id, &why); err != nil {
			t.Fatal(err)
		}
		got[id] = why
	}
	want := map[string]string{
		"other-tenant-0": `tenant_id: the source "orders" may not write events for tenant "globex" (its tenants: acme)`,
		"other-tenant-1": `tenant_id: the source "orders" may not write events for tenant "globex" (its tenants: acme)`,
		"no-project":     `project_id: tenant "acme" has no project "nope" (create it with: herald projects create --tenant acme nope)`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("left in the source:\n%v\nwant\n%v", got, want)
	}
	if v := testutil.ToFloat64(m.forwarded.WithLabelValues("orders")); v != 123 {
		t.Errorf("herald_source_forwarded_total = %v, want 123", v)
	}
	if v := testutil.ToFloat64(m.refused.WithLabelValues("orders", "tenant")); v != 2 {
		t.Errorf("herald_source_refused_total{reason=tenant} = %v, want 2", v)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		st := f.Status()
		return st.State == "up" && st.Backlog == 0 && st.Refused == 3
	}, "status up, backlog 0, 3 refused")
	if v := testutil.ToFloat64(m.up.WithLabelValues("orders")); v != 1 {
		t.Errorf("herald_source_up = %v", v)
	}

	// A refused row sent again after the fix (the operator clears
	// refused_at once the project exists) flows.
	if err := store.EnsureProject(context.Background(), db.Pool, "acme", "nope", "nope"); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Exec(context.Background(), `UPDATE herald_outbox SET refused_at = NULL, refusal = NULL WHERE event_id = 'no-project'`); err != nil {
		t.Fatal(err)
	}
	f.Kick()
	testenv.Eventually(t, 30*time.Second, func() bool {
		return count(t, db.Pool, `SELECT count(*) FROM event_outbox WHERE event_id = 'no-project' AND project_id = 'nope'`) == 1
	}, "the refused row forwarded once its project exists")
}

// A crash after Herald's commit and before the source's: the rows are in
// event_outbox and still in herald_outbox. The next pass finds them
// repeats, deletes them, and nothing is doubled; an event_id the tenant
// holds for another event is refused as a conflict.
func TestCrashBetweenTheTwoCommits(t *testing.T) {
	db := heraldDB(t)
	url, src := sourceDB(t)
	f := newForwarder(t, "orders", url, db.Pool, nil, "acme")
	produce(t, src, "acme", "e", 10, true)
	ctx := context.Background()

	// Steps 1 and 2 of a batch, then the "crash": the source transaction
	// rolls back.
	stx, err := f.src.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var claimed []*row
	rs, err := stx.Query(ctx, `SELECT id, tenant_id, project_id, event_id, event_type, aggregate_type, aggregate_id, payload::text, available_at
		FROM herald_outbox ORDER BY id FOR UPDATE SKIP LOCKED`)
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		r := &row{}
		if err := rs.Scan(&r.id, &r.tenant, &r.project, &r.eventID, &r.typ, &r.aggType, &r.aggID, &r.payload, &r.availableAt); err != nil {
			t.Fatal(err)
		}
		claimed = append(claimed, r)
	}
	if err := f.enqueue(ctx, claimed); err != nil {
		t.Fatal(err)
	}
	// While the first batch holds its rows, a second claim gets none.
	if n, err := f.ForwardOnce(ctx); err != nil || n != 0 {
		t.Fatalf("a second claim while the rows are held: %d rows, %v", n, err)
	}
	if err := stx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM event_outbox`); n != 10 {
		t.Fatalf("event_outbox after the crash: %d rows", n)
	}
	// The event e-3 was meanwhile reused for another payload in the
	// source (it had been forwarded and deleted).
	if _, err := src.Exec(ctx, `SELECT herald_enqueue('acme', 'e-20', 'ReservationRequested', '{"pax": 1}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `SELECT herald_enqueue('acme', 'e-20', 'ReservationRequested', '{"pax": 2}')`); err != nil {
		t.Fatal(err)
	}

	n, err := f.ForwardOnce(ctx)
	if err != nil || n != 11 {
		t.Fatalf("ForwardOnce after the crash: %d rows, %v", n, err)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM event_outbox`); n != 11 {
		t.Fatalf("event_outbox after the re-forward: %d rows, want 11 (10 once each, and e-20 from Herald's side)", n)
	}
	var why string
	if err := src.QueryRow(ctx, `SELECT refusal FROM herald_outbox WHERE refused_at IS NOT NULL`).Scan(&why); err != nil {
		t.Fatal(err)
	}
	if want := `event_id: tenant "acme" already has an event "e-20" with another type, project or payload`; why != want {
		t.Fatalf("refusal %q, want %q", why, want)
	}
	if n := count(t, src, `SELECT count(*) FROM herald_outbox`); n != 1 {
		t.Fatalf("herald_outbox keeps %d rows, want only the refused one", n)
	}
}

// Two daemons forward the same source while producers write: every event
// reaches Herald once, and each forwarder did part of the work.
func TestTwoForwardersShareASource(t *testing.T) {
	db := heraldDB(t)
	url, src := sourceDB(t)
	reg1, reg2 := prometheus.NewRegistry(), prometheus.NewRegistry()
	m1, m2 := NewMetrics(reg1), NewMetrics(reg2)
	run(t, newForwarder(t, "orders", url, db.Pool, m1, "acme"), newForwarder(t, "orders", url, db.Pool, m2, "acme"))
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for b := range 10 {
				produce(t, src, "acme", fmt.Sprintf("w%d-b%d", w, b), 25, true)
			}
		})
	}
	wg.Wait()
	forwarded := func() (float64, float64) {
		return testutil.ToFloat64(m1.forwarded.WithLabelValues("orders")), testutil.ToFloat64(m2.forwarded.WithLabelValues("orders"))
	}
	// The counter moves after the source commit that deleted the row: wait
	// for it too, then check it did not count any row twice.
	testenv.Eventually(t, 60*time.Second, func() bool {
		f1, f2 := forwarded()
		return count(t, src, `SELECT count(*) FROM herald_outbox`) == 0 && count(t, db.Pool, `SELECT count(*) FROM event_outbox`) == 1000 && f1+f2 >= 1000
	}, "1000 events forwarded by two forwarders")
	f1, f2 := forwarded()
	// A row is counted by the forwarder whose source commit deleted it:
	// exactly once in all.
	if f1+f2 != 1000 {
		t.Fatalf("forwarded %v + %v, want 1000 in all", f1, f2)
	}
	t.Logf("forwarder 1: %v rows, forwarder 2: %v rows", f1, f2)
}

// The source's connections are cut while it forwards: the forwarder says
// it is down, then comes back and forwards the rest, once each. A source
// that cannot be reached at all does not stop the other one.
func TestSourceConnectionLost(t *testing.T) {
	db := heraldDB(t)
	url, src := sourceDB(t)
	m := NewMetrics(prometheus.NewRegistry())
	f := newForwarder(t, "orders", url, db.Pool, m, "acme")
	// A source whose database does not exist (the server answers).
	badURL := strings.Replace(url, "/herald_src_", "/herald_missing_", 1)
	bad := newForwarder(t, "gone", badURL, db.Pool, m, "acme")
	run(t, f, bad)
	ctx := context.Background()
	for round := range 5 {
		produce(t, src, "acme", fmt.Sprintf("r%d", round), 100, true)
		var name string
		if err := src.QueryRow(ctx, `SELECT current_database()`).Scan(&name); err != nil {
			t.Fatal(err)
		}
		// Terminate the forwarder's sessions (it names itself in
		// application_name), mid-forward or idle.
		if _, err := src.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = $1 AND application_name = 'herald source orders'`, name); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 60*time.Second, func() bool {
		return count(t, src, `SELECT count(*) FROM herald_outbox`) == 0 && count(t, db.Pool, `SELECT count(*) FROM event_outbox`) == 500
	}, "500 events forwarded across lost connections")
	testenv.Eventually(t, 30*time.Second, func() bool { return f.Status().State == "up" }, "orders up again")
	st := bad.Status()
	if st.State != "down" || st.Reason != "unreachable" || !strings.Contains(st.Error, "herald_missing_") || strings.Contains(st.Error, "herald:herald") {
		t.Fatalf("the missing source's status %+v", st)
	}
	if v := testutil.ToFloat64(m.up.WithLabelValues("gone")); v != 0 {
		t.Fatalf("herald_source_up{source=gone} = %v", v)
	}
}

// A database without the outbox, or with an older one, is a source down
// with words that say to run herald outbox install.
func TestSourceNotInstalled(t *testing.T) {
	db := heraldDB(t)
	url, src := sourceDB(t)
	if _, err := src.Exec(context.Background(), `DROP TABLE herald_outbox`); err != nil {
		t.Fatal(err)
	}
	f := newForwarder(t, "orders", url, db.Pool, nil, "acme")
	_, err := f.ForwardOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "run herald outbox install") {
		t.Fatalf("ForwardOnce on a database without the outbox: %v", err)
	}
	install(t, src)
	if _, err := src.Exec(context.Background(), `UPDATE herald_outbox_version SET version = 0`); err != nil {
		t.Fatal(err)
	}
	if err := f.drain(context.Background()); err == nil || !strings.Contains(err.Error(), "run herald outbox install") {
		t.Fatalf("drain with an older outbox: %v", err)
	}
}

// A stage without sources runs until its context ends, as the supervisor
// wants of every stage, and so does one whose only source is down.
func TestStageRunsUntilStopped(t *testing.T) {
	for name, sources := range map[string]map[string]Config{
		"none": nil,
		"down": {"gone": {URL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", Tenants: []string{"acme"}}},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := NewStage(nil, sources, hclog.NewNullLogger(), NewMetrics(prometheus.NewRegistry()))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			// Give it the chance to return early: the down source fails
			// at least one pass first.
			if name == "down" {
				testenv.Eventually(t, 10*time.Second, func() bool { return s.Status()[0].State == "down" }, "the source down")
			}
			select {
			case err := <-done:
				t.Fatalf("Run returned before its context ended: %v", err)
			default:
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return after its context ended")
			}
		})
	}
}
