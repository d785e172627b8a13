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

// loginAs returns a pool of the producer login role, granted tenants, with
// the role dropped when the test ends.
func loginAs(t *testing.T, ctx context.Context, db *testenv.DB, role string, tenants ...string) *pgxpool.Pool {
	t.Helper()
	if err := store.EnsureProducerRole(ctx, db.Pool, role, "pw-"+role, tenants); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), `DELETE FROM herald_producer_roles WHERE role_name = $1`, role)
		_, _ = db.Pool.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = db.Pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User, cfg.ConnConfig.Password = role, "pw-"+role
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// enqueueSQL is the call a producer in any language makes.
const enqueueSQL = `SELECT outcome, id FROM herald_enqueue(tenant_id => $1, event_id => $2, event_type => $3, payload => $4::jsonb)`

func enqueueIn(ctx context.Context, q store.Querier, tenant, id, typ, payload string) (string, int64, error) {
	var outcome string
	var rowID int64
	err := q.QueryRow(ctx, enqueueSQL, tenant, id, typ, payload).Scan(&outcome, &rowID)
	return outcome, rowID, err
}

// TestEnqueueFunctionForTwoTenants: one producer login granted tenants a
// and b enqueues for both through herald_enqueue, with no herald.tenant
// set; tenant c is refused with 42501 naming tenant_id and the fix; a
// repeat and a reused id are answers that leave the transaction usable;
// and every direct write is refused.
func TestEnqueueFunctionForTwoTenants(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	for _, ten := range []string{"a", "b", "c"} {
		if err := store.EnsureTenant(ctx, db.Pool, ten, ""); err != nil {
			t.Fatal(err)
		}
	}
	role := "svc_" + strings.TrimPrefix(db.Name, "herald_test_")
	svc := loginAs(t, ctx, db, role, "a", "b")
	if got, err := store.ProducerTenants(ctx, db.Pool, role); err != nil || strings.Join(got, ",") != "a,b" {
		t.Fatalf("ProducerTenants = %v, %v; want [a b]", got, err)
	}
	for _, ten := range []string{"a", "b"} {
		err := pgx.BeginFunc(ctx, svc, func(tx pgx.Tx) error {
			outcome, id, err := enqueueIn(ctx, tx, ten, "order-1", "ORDER_PLACED", `{"n": 1, "who": "Rossi"}`)
			if err != nil || outcome != "new" || id == 0 {
				t.Fatalf("tenant %s: outcome %q id %d, %v; want new", ten, outcome, id, err)
			}
			// The same event again, keys in another order: a repeat of
			// the same row, and the transaction goes on.
			again, againID, err := enqueueIn(ctx, tx, ten, "order-1", "ORDER_PLACED", `{"who": "Rossi", "n": 1}`)
			if err != nil || again != "repeat" || againID != id {
				t.Fatalf("tenant %s again: outcome %q id %d (first %d), %v; want repeat", ten, again, againID, id, err)
			}
			for name, c := range map[string][2]string{"other payload": {"ORDER_PLACED", `{"n": 2}`}, "other type": {"ORDER_PAID", `{"n": 1, "who": "Rossi"}`}} {
				o, oid, err := enqueueIn(ctx, tx, ten, "order-1", c[0], c[1])
				if err != nil || o != "conflict" || oid != id {
					t.Fatalf("tenant %s, %s: outcome %q id %d, %v; want conflict on %d", ten, name, o, oid, err, id)
				}
			}
			_, err = tx.Exec(ctx, `SELECT 1`)
			return err
		})
		if err != nil {
			t.Fatalf("tenant %s: %v", ten, err)
		}
	}
	// Tenant c, which exists, and an unknown tenant: refused alike.
	for _, ten := range []string{"c", "zz"} {
		_, _, err := enqueueIn(ctx, svc, ten, "order-1", "ORDER_PLACED", `{}`)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42501" || pe.ColumnName != "tenant_id" ||
			pe.Message != `tenant_id: the login `+role+` may not enqueue events for tenant "`+ten+`"` ||
			!strings.Contains(pe.Hint, "herald db producer "+role+" --tenant "+ten) {
			t.Fatalf("tenant %s: want 42501 naming tenant_id and the fix, got %v (hint %q)", ten, err, hintOf(err))
		}
	}
	var perTenant string
	if err := db.Pool.QueryRow(ctx, `SELECT string_agg(tenant_id || '=' || status || '/' || encode(payload_sha256, 'hex'), ' ' ORDER BY tenant_id)
		FROM event_outbox WHERE event_id = 'order-1'`).Scan(&perTenant); err != nil {
		t.Fatal(err)
	}
	// The hash is sdk/producer's: SHA-256 of jsonb's text.
	var want string
	if err := db.Pool.QueryRow(ctx, `SELECT encode(sha256(convert_to('{"n": 1, "who": "Rossi"}'::jsonb::text, 'UTF8')), 'hex')`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if perTenant != "a=PENDING/"+want+" b=PENDING/"+want {
		t.Fatalf("events: %s; want one PENDING per tenant a and b with hash %s", perTenant, want)
	}

	// Direct writes: no INSERT (not even with herald.tenant set), no
	// UPDATE of a status, no DELETE, no sequence.
	for name, stmt := range map[string]string{
		"insert":         `INSERT INTO event_outbox (tenant_id, event_id, event_type) VALUES ('a', 'by-hand', 'T')`,
		"insert PENDING": `INSERT INTO event_outbox (tenant_id, event_id, event_type, status) VALUES ('a', 'by-hand', 'T', 'PROCESSED')`,
		"update status":  `UPDATE event_outbox SET status = 'PROCESSED' WHERE tenant_id = 'a'`,
		"update payload": `UPDATE event_outbox SET payload = '{}' WHERE tenant_id = 'a'`,
		"delete":         `DELETE FROM event_outbox WHERE tenant_id = 'a'`,
		"nextval":        `SELECT nextval('event_outbox_id_seq')`,
		"projects":       `INSERT INTO projects (tenant_id, project_id) VALUES ('a', 'p2')`,
		"grant itself":   `INSERT INTO herald_producer_roles (role_name, tenant_id) VALUES (current_user, 'c')`,
		"check helper":   `SELECT herald_producer_may(current_user, 'c')`,
	} {
		err := pgx.BeginFunc(ctx, svc, func(tx pgx.Tx) error {
			if err := store.SetTenant(ctx, tx, "a", ""); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, stmt)
			return err
		})
		var pe *pgconn.PgError
		if name == "check helper" {
			// The read policies call it; it tells the role only about
			// itself.
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("%s as a producer: want 42501 permission denied, got %v", name, err)
		}
	}
	// It reads its own tenants' events, without setting herald.tenant,
	// and nothing of c's.
	var seen string
	if err := svc.QueryRow(ctx, `SELECT string_agg(DISTINCT tenant_id, ',' ORDER BY tenant_id) FROM event_outbox`).Scan(&seen); err != nil || seen != "a,b" {
		t.Fatalf("the producer reads tenants %q (%v); want a,b", seen, err)
	}
	// A login of the API's own (database.api_url, a member of herald_api
	// only) enqueues for the tenant and project its transaction set, and
	// for no other.
	apiRole := "api_" + strings.TrimPrefix(db.Name, "herald_test_")
	if _, err := db.Pool.Exec(ctx, "CREATE ROLE "+apiRole+" LOGIN PASSWORD 'pw' IN ROLE herald_api"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+apiRole) })
	apiCfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	apiCfg.ConnConfig.User, apiCfg.ConnConfig.Password = apiRole, "pw"
	apiLogin, err := pgxpool.NewWithConfig(ctx, apiCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer apiLogin.Close()
	for _, c := range []struct {
		set, project, tenant, code string
	}{{"a", "", "a", ""}, {"a", "", "b", "42501"}, {"", "", "a", "42501"}, {"a", "shop", "a", "42501"}} {
		err := pgx.BeginFunc(ctx, apiLogin, func(tx pgx.Tx) error {
			if err := store.SetTenant(ctx, tx, c.set, c.project); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT herald_enqueue($1, 'from-api-login', 'T')`, c.tenant)
			return err
		})
		if (c.code == "" && err != nil) || (c.code != "" && !isCode(err, c.code)) {
			t.Errorf("herald_api login, herald.tenant %q project %q, enqueue for %q: %v, want %q", c.set, c.project, c.tenant, err, c.code)
		}
	}
	// Granting again with one tenant takes b away.
	if err := store.EnsureProducerRole(ctx, db.Pool, role, "", []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := enqueueIn(ctx, svc, "b", "order-2", "ORDER_PLACED", `{}`); !isCode(err, "42501") {
		t.Fatalf("b after it was taken away: want 42501, got %v", err)
	}
}

func isCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}

func hintOf(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Hint
	}
	return ""
}

// TestEnqueueSameIDFromTwoTransactions: two transactions enqueue one
// event_id at once. The second waits on the first's row; when the first
// commits, it answers repeat (same payload) or conflict (another); when
// the first rolls back, the second's event is the new one. Exactly one row
// each time.
func TestEnqueueSameIDFromTwoTransactions(t *testing.T) {
	db := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := store.EnsureTenant(ctx, db.Pool, "a", ""); err != nil {
		t.Fatal(err)
	}
	role := "svc_" + strings.TrimPrefix(db.Name, "herald_test_")
	svc := loginAs(t, ctx, db, role, "a")
	cases := map[string]struct {
		second  string
		commit  bool
		outcome string
	}{
		"same payload, first commits":    {second: `{"n": 1}`, commit: true, outcome: "repeat"},
		"other payload, first commits":   {second: `{"n": 2}`, commit: true, outcome: "conflict"},
		"same payload, first rolls back": {second: `{"n": 1}`, commit: false, outcome: "new"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			id := "race-" + strings.ReplaceAll(name, " ", "-")
			id = strings.ReplaceAll(id, ",", "")
			first, err := svc.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback(context.Background())
			if o, _, err := enqueueIn(ctx, first, "a", id, "T", `{"n": 1}`); err != nil || o != "new" {
				t.Fatalf("first: %q %v", o, err)
			}
			second, err := svc.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer second.Rollback(context.Background())
			var pid int
			if err := second.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				t.Fatal(err)
			}
			type answer struct {
				outcome string
				err     error
			}
			got := make(chan answer, 1)
			go func() {
				o, _, err := enqueueIn(ctx, second, "a", id, "T", tc.second)
				got <- answer{o, err}
			}()
			// The second waits on the first's uncommitted key.
			waitFor(t, ctx, db.Pool, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)`, pid)
			select {
			case a := <-got:
				t.Fatalf("the second did not wait: %q, %v", a.outcome, a.err)
			default:
			}
			if tc.commit {
				err = first.Commit(ctx)
			} else {
				err = first.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			a := <-got
			if a.err != nil || a.outcome != tc.outcome {
				t.Fatalf("second: %q, %v; want %s", a.outcome, a.err, tc.outcome)
			}
			if err := second.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			var n int
			var payload string
			if err := db.Pool.QueryRow(ctx, `SELECT count(*), max(payload::text) FROM event_outbox WHERE event_id = $1`, id).Scan(&n, &payload); err != nil || n != 1 {
				t.Fatalf("%d rows (%v), want exactly one", n, err)
			}
			if want := map[bool]string{true: `{"n": 1}`, false: tc.second}[tc.commit]; payload != want {
				t.Fatalf("the row holds %s, want %s", payload, want)
			}
		})
	}
}

// waitFor polls query (one boolean) until it is true, failing the test at
// ctx's deadline.
func waitFor(t *testing.T, ctx context.Context, q store.Querier, query string, args ...any) {
	t.Helper()
	for {
		var ok bool
		if err := q.QueryRow(ctx, query, args...).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", query, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestMigration0045RoundTrip: 0045 goes down (one tenant per role again,
// the direct insert back) and up again.
func TestMigration0045RoundTrip(t *testing.T) {
	t.Parallel()
	db := testenv.PostgresAt(t, 45)
	ctx := context.Background()
	fn := func() (n int) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE proname = 'herald_enqueue'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var out strings.Builder
	if err := store.MigrateTo(ctx, db.URL, "down", &out); err != nil {
		t.Fatal(err)
	}
	var insert bool
	if err := db.Pool.QueryRow(ctx, `SELECT has_column_privilege('herald_producer', 'event_outbox', 'event_id', 'INSERT')`).Scan(&insert); err != nil || !insert || fn() != 0 {
		t.Fatalf("after down: producer INSERT %v, herald_enqueue %d (%v)", insert, fn(), err)
	}
	if err := store.MigrateTo(ctx, db.URL, "up", &out); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT has_column_privilege('herald_producer', 'event_outbox', 'event_id', 'INSERT')`).Scan(&insert); err != nil || insert || fn() != 1 {
		t.Fatalf("after up: producer INSERT %v, herald_enqueue %d (%v)", insert, fn(), err)
	}
}

// Migration 0095 goes down to 0045's herald_enqueue and up again, and the
// function writes an event at both levels.
func TestMigration0095RoundTrip(t *testing.T) {
	t.Parallel()
	db := testenv.PostgresAt(t, 95)
	ctx := context.Background()
	if err := store.EnsureTenant(ctx, db.Pool, "acme", ""); err != nil {
		t.Fatal(err)
	}
	check := func(step string, want045 bool, eventID string) {
		t.Helper()
		var src, outcome string
		if err := db.Pool.QueryRow(ctx, `SELECT prosrc FROM pg_proc WHERE proname = 'herald_enqueue'`).Scan(&src); err != nil {
			t.Fatal(err)
		}
		if is045 := strings.Contains(src, "{0,99}"); is045 != want045 {
			t.Errorf("after %s: herald_enqueue is 0045's: %v, want %v", step, is045, want045)
		}
		if err := db.Pool.QueryRow(ctx, `SELECT outcome FROM herald_enqueue('acme', $1, 'T', '{"a": 1}')`, eventID).Scan(&outcome); err != nil || outcome != "new" {
			t.Errorf("after %s: herald_enqueue answered %q (%v), want new", step, outcome, err)
		}
	}
	check("up to 0095", false, "rt-1")
	var out strings.Builder
	if err := store.MigrateTo(ctx, db.URL, "down", &out); err != nil {
		t.Fatal(err)
	}
	check("down", true, "rt-2")
	if err := store.MigrateTo(ctx, db.URL, "up", &out); err != nil {
		t.Fatal(err)
	}
	check("up again", false, "rt-3")
}

// TestEnqueueManyInOneTransactionLooksOnce: a producer enqueuing many
// events in one transaction (one herald_enqueue call each) pays for the
// relay's wake-up check once (migration 0136), not once per call over
// all of its own earlier rows: the rows the transaction's index scans
// fetch stay linear in the events, where they were quadratic. The relay
// is still woken once per transaction: by a transaction into an idle
// outbox, not by one while an older event waits, and again after a
// savepoint that took the first look back.
func TestEnqueueManyInOneTransactionLooksOnce(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	if err := store.EnsureTenant(ctx, db.Pool, "acme", ""); err != nil {
		t.Fatal(err)
	}
	prod := loginAs(t, ctx, db, "many_events_producer", "acme")
	listen, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Close(ctx)
	if _, err := listen.Exec(ctx, "LISTEN herald_events"); err != nil {
		t.Fatal(err)
	}
	// notified waits for a notification (up to wait) and reports whether
	// one came.
	notified := func(wait time.Duration) bool {
		c, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		_, err := listen.WaitForNotification(c)
		return err == nil
	}
	const n = 400
	var fetched int64
	err = pgx.BeginFunc(ctx, prod, func(tx pgx.Tx) error {
		for i := range n {
			if outcome, _, err := enqueueIn(ctx, tx, "acme", fmt.Sprintf("many-%d", i), "T", `{"i": 1}`); err != nil || outcome != "new" {
				return fmt.Errorf("event %d: %q, %v", i, outcome, err)
			}
		}
		return tx.QueryRow(ctx, `SELECT coalesce(sum(idx_tup_fetch), 0)::bigint FROM pg_stat_xact_user_tables WHERE relname = 'event_outbox'`).Scan(&fetched)
	})
	if err != nil {
		t.Fatal(err)
	}
	// Each call's own insert checks its key; the wake-up check looked
	// once. Looking at every call would fetch about n²/2 = 80,000 rows.
	if fetched > 4*n {
		t.Errorf("one transaction of %d events fetched %d event_outbox rows by index: the wake-up check looks at each call", n, fetched)
	}
	if !notified(10 * time.Second) {
		t.Fatal("a transaction into an idle outbox did not wake the relay")
	}
	// The 400 events wait: a transaction behind them does not notify.
	if _, _, err := enqueueIn(ctx, prod, "acme", "behind", "T", `{}`); err != nil {
		t.Fatal(err)
	}
	if notified(500 * time.Millisecond) {
		t.Error("a transaction behind waiting events woke the relay")
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE event_outbox SET status = 'PROCESSED', processed_at = now()`); err != nil {
		t.Fatal(err)
	}
	// A savepoint rolled back takes the look with it: the next insert of
	// the transaction looks again, and the commit notifies.
	err = pgx.BeginFunc(ctx, prod, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
			return err
		}
		if _, _, err := enqueueIn(ctx, tx, "acme", "rolled-back", "T", `{}`); err != nil {
			return err
		}
		var mark string
		if err := tx.QueryRow(ctx, `SELECT coalesce(current_setting('herald.event_notify_checked', true), '')`).Scan(&mark); err != nil || mark != "on" {
			return fmt.Errorf("after the first insert the mark is %q (%v), want on", mark, err)
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT coalesce(current_setting('herald.event_notify_checked', true), '')`).Scan(&mark); err != nil || mark != "" {
			return fmt.Errorf("after the rollback to the savepoint the mark is %q (%v), want none", mark, err)
		}
		_, _, err := enqueueIn(ctx, tx, "acme", "kept", "T", `{}`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !notified(10 * time.Second) {
		t.Error("the transaction after a rolled-back savepoint did not wake the relay")
	}
	var mark string
	if err := prod.QueryRow(ctx, `SELECT coalesce(current_setting('herald.event_notify_checked', true), '')`).Scan(&mark); err != nil || mark != "" {
		t.Errorf("the mark outlived its transaction: %q (%v)", mark, err)
	}
}
