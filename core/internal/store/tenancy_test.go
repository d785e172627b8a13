package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk/producer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// tenantTables lists every table that holds a tenant_id column; the test
// below fails when a migration adds one without row-level security.
func tenantTables(t *testing.T, ctx context.Context, q store.Querier) []string {
	t.Helper()
	rows, err := q.Query(ctx, `SELECT c.table_name FROM information_schema.columns c
		JOIN information_schema.tables t USING (table_schema, table_name)
		WHERE c.table_schema = current_schema() AND c.column_name = 'tenant_id' AND t.table_type = 'BASE TABLE'
		  AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = format('%I.%I', c.table_schema, c.table_name)::regclass)
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// seedTwoTenants writes one row of every tenant table for tenants a and b
// (as the owner, who is a member of herald_worker).
func seedTwoTenants(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	for _, ten := range []string{"a", "b"} {
		if err := store.EnsureTenant(ctx, pool, ten, ten); err != nil {
			t.Fatal(err)
		}
		if _, err := store.CreateAPIKey(ctx, pool, ten, "k", "hk_"+ten+"_isolation_key_000000000"); err != nil {
			t.Fatal(err)
		}
		nid := map[string]string{"a": "0190d0a0-0000-7000-8000-00000000000a", "b": "0190d0a0-0000-7000-8000-00000000000b"}[ten]
		stmts := []string{
			`INSERT INTO event_outbox (tenant_id, event_id, event_type) VALUES ($1, 'ev-' || $1, 'T')`,
			`INSERT INTO recipients (tenant_id, user_id, user_type) VALUES ($1, 'u-' || $1, 'STAFF')`,
			`INSERT INTO recipient_devices (tenant_id, user_id, token) VALUES ($1, 'u-' || $1, 'tok')`,
			`INSERT INTO groups (tenant_id, group_key, group_type) VALUES ($1, 'g', 'restaurant')`,
			`INSERT INTO group_members (tenant_id, group_key, user_id) VALUES ($1, 'g', 'u-' || $1)`,
			`INSERT INTO user_preferences (tenant_id, user_id, channel, enabled) VALUES ($1, 'u-' || $1, 'EMAIL', true)`,
			`INSERT INTO group_settings (tenant_id, group_key, channel, enabled) VALUES ($1, 'g', 'EMAIL', true)`,
			`INSERT INTO notifications (notification_id, tenant_id, event_id, user_id, event_type) VALUES ('` + nid + `', $1, 'ev-' || $1, 'u-' || $1, 'T')`,
			`INSERT INTO notification_counters (tenant_id, user_id, unread) VALUES ($1, 'u-' || $1, 1)`,
			`INSERT INTO notification_actions (tenant_id, share_key, notification_id, user_id, action) VALUES ($1, 's', '` + nid + `', 'u-' || $1, 'CONFIRMED')`,
			`INSERT INTO deliveries (delivery_id, tenant_id, notification_id, event_id, event_type, user_id, user_type, channel)
			 VALUES ('` + nid + `', $1, '` + nid + `', 'ev-' || $1, 'T', 'u-' || $1, 'STAFF', 'EMAIL')`,
			`INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, started_at, delivery_created_at) VALUES ($1, '` + nid + `', 1, 'SENT', now(), now())`,
			`INSERT INTO token_keys (tenant_id, kid, alg, issuer, key) VALUES ($1, 'k1', 'HS256', 'iss', '\x00')`,
			`INSERT INTO live_tickets (ticket_hash, tenant_id, user_id, expires_at) VALUES (decode(md5($1), 'hex'), $1, 'u-' || $1, now() + interval '1 hour')`,
			`INSERT INTO tenant_origins (tenant_id, origin) VALUES ($1, 'https://' || $1 || '.example')`,
			`INSERT INTO tenant_webhooks (tenant_id, url, kinds, secret) VALUES ($1, 'https://' || $1 || '.example/hook',
			 '{delivery.sent}', 'whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=')`,
			`INSERT INTO digest_windows (tenant_id, user_id, channel, event_type, digest_key, max_items, closes_at) VALUES ($1, 'u-' || $1, 'EMAIL', 'T', 'k', 10, now())`,
			`INSERT INTO throttle_counters (tenant_id, user_id, channel, event_type, throttle_key, window_start, window_end, sent) VALUES ($1, 'u-' || $1, 'EMAIL', 'T', 'k', now(), now(), 1)`,
		}
		for _, s := range stmts {
			if _, err := pool.Exec(ctx, s, ten); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
}

func TestRowLevelSecurityIsForcedOnEveryTable(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, `SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
			(SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid)
		FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
		  AND c.relname <> 'goose_db_version' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	type rel struct {
		name            string
		enabled, forced bool
		policies        int
	}
	rels, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (rel, error) {
		var x rel
		return x, r.Scan(&x.name, &x.enabled, &x.forced, &x.policies)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rels) < 15 {
		t.Fatalf("only %d tables found", len(rels))
	}
	for _, r := range rels {
		if !r.enabled || !r.forced || r.policies == 0 {
			t.Errorf("table %s: row level security enabled=%v forced=%v, %d policies; every table needs all three", r.name, r.enabled, r.forced, r.policies)
		}
	}
}

// TestAPIRoleSeesOnlyItsTenant connects as herald_api with tenant a set and
// reads every tenant table with no WHERE clause at all, then tries to write
// rows of tenant b.
func TestAPIRoleSeesOnlyItsTenant(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	seedTwoTenants(t, ctx, db.Pool)
	api, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 2, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	if err := store.CheckAPIRole(ctx, api, "test"); err != nil {
		t.Fatalf("herald_api refused: %v", err)
	}
	tables := tenantTables(t, ctx, db.Pool)
	if len(tables) < 13 {
		t.Fatalf("tenant tables: %v", tables)
	}
	for _, tbl := range tables {
		if tbl == "herald_producer_roles" {
			continue // closed to herald_api altogether (below)
		}
		t.Run(tbl, func(t *testing.T) {
			// No tenant set: nothing.
			var n int
			if err := api.QueryRow(ctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("with no tenant set, %s shows %d rows", tbl, n)
			}
			err := store.InTenant(ctx, api, "a", "", func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, "SELECT DISTINCT tenant_id FROM "+tbl)
				if err != nil {
					return err
				}
				seen, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					return err
				}
				if len(seen) != 1 || seen[0] != "a" {
					t.Errorf("tenant a sees tenants %v in %s", seen, tbl)
				}
				// Updating b's rows touches nothing.
				tag, err := tx.Exec(ctx, "UPDATE "+tbl+" SET tenant_id = tenant_id WHERE tenant_id = 'b'")
				if err != nil {
					return err
				}
				if tag.RowsAffected() != 0 {
					t.Errorf("tenant a updated %d of b's rows in %s", tag.RowsAffected(), tbl)
				}
				// Moving a's rows to b is refused.
				_, err = tx.Exec(ctx, "UPDATE "+tbl+" SET tenant_id = 'b' WHERE tenant_id = 'a'")
				if !isRLSRefusal(err) {
					t.Errorf("moving a's rows of %s to b: want a row-level security refusal, got %v", tbl, err)
				}
				return errRollback
			})
			if !errors.Is(err, errRollback) {
				t.Fatal(err)
			}
		})
	}
	// The partitions of a partitioned table are reached through it: read
	// directly, they refuse herald_api (no privilege), whatever the tenant.
	var parts []store.Partition
	for _, table := range store.PartitionedTables {
		ps, err := store.Partitions(ctx, db.Pool, table)
		if err != nil || len(ps) == 0 {
			t.Fatalf("partitions of %s: %v %v", table, ps, err)
		}
		parts = append(parts, ps...)
	}
	for _, p := range parts {
		err := store.InTenant(ctx, api, "a", "", func(tx pgx.Tx) error {
			var n int
			return tx.QueryRow(ctx, "SELECT count(*) FROM "+p.Name).Scan(&n)
		})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("herald_api reading partition %s directly: want permission denied, got %v", p.Name, err)
		}
	}
	// Inserting for b is refused on every table the API writes.
	inserts := map[string]string{
		"event_outbox":  `INSERT INTO event_outbox (tenant_id, event_id, event_type) VALUES ('b', 'x', 'T')`,
		"recipients":    `INSERT INTO recipients (tenant_id, user_id, user_type) VALUES ('b', 'x', 'STAFF')`,
		"notifications": `INSERT INTO notifications (tenant_id, event_id, user_id, event_type) VALUES ('b', 'x', 'x', 'T')`,
		"counters":      `INSERT INTO notification_counters (tenant_id, user_id) VALUES ('b', 'x')`,
		"api_keys":      `INSERT INTO api_keys (key_id, tenant_id, key_hash) VALUES ('x', 'b', '\x00')`,
		"projects":      `INSERT INTO projects (tenant_id, project_id) VALUES ('b', 'x')`,
	}
	for name, ins := range inserts {
		err := store.InTenant(ctx, api, "a", "", func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, ins)
			return err
		})
		if !isRLSRefusal(err) {
			t.Errorf("insert into %s for tenant b as tenant a: want a row-level security refusal, got %v", name, err)
		}
	}
	// The worker-only tables are closed to the API role altogether.
	for _, tbl := range []string{"delivery_handoffs", "superadmins", "herald_producer_roles", "herald_secrets"} {
		err := store.InTenant(ctx, api, "a", "", func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "SELECT 1 FROM "+tbl)
			return err
		})
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("herald_api reading %s: want permission denied, got %v", tbl, err)
		}
	}
	// Authentication crosses tenants only through herald_authenticate.
	p, err := store.Authenticate(ctx, api, "hk_b_isolation_key_000000000")
	if err != nil || p.Tenant != "b" {
		t.Fatalf("authenticate b's key as herald_api: %+v %v", p, err)
	}
}

func TestProjectScopeNarrowsTheTenant(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	seedTwoTenants(t, ctx, db.Pool)
	if err := store.EnsureProject(ctx, db.Pool, "a", "shop", "Shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO event_outbox (tenant_id, project_id, event_id, event_type) VALUES ('a', 'shop', 'ev-shop', 'T')`); err != nil {
		t.Fatal(err)
	}
	api, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 1, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	count := func(project string) (n int) {
		if err := store.InTenant(ctx, api, "a", project, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT count(*) FROM event_outbox`).Scan(&n)
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if all, shop, def := count(""), count("shop"), count("default"); all != 2 || shop != 1 || def != 1 {
		t.Fatalf("events seen: every project %d (want 2), shop %d (want 1), default %d (want 1)", all, shop, def)
	}
	err = store.InTenant(ctx, api, "a", "shop", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO event_outbox (tenant_id, project_id, event_id, event_type) VALUES ('a', 'default', 'x', 'T')`)
		return err
	})
	if !isRLSRefusal(err) {
		t.Fatalf("project-scoped insert into another project: want refusal, got %v", err)
	}
}

func TestProducerRoleEnqueuesOnlyForItsTenant(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	seedTwoTenants(t, ctx, db.Pool)
	role := "svc_" + strings.TrimPrefix(db.Name, "herald_test_")
	if err := store.CreateProducerRole(ctx, db.Pool, "a", role, "pw-"+role); err != nil {
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
	svc, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	enqueue := func(ev producer.Event) error {
		return pgx.BeginFunc(ctx, svc, func(tx pgx.Tx) error { return producer.Enqueue(ctx, tx, ev) })
	}
	ev := producer.Event{TenantID: "a", EventID: "from-svc", Type: "T", Payload: json.RawMessage(`{"x":1}`)}
	if err := enqueue(ev); err != nil {
		t.Fatalf("enqueue for its own tenant: %v", err)
	}
	if err := enqueue(ev); !errors.Is(err, producer.ErrDuplicate) {
		t.Fatalf("enqueue again: want ErrDuplicate, got %v", err)
	}
	for name, bad := range map[string]producer.Event{
		"other tenant":     {TenantID: "b", EventID: "sneaky", Type: "T"},
		"unknown tenant":   {TenantID: "zz", EventID: "sneaky", Type: "T"},
		"unknown project":  {TenantID: "a", ProjectID: "nope", EventID: "sneaky", Type: "T"},
		"other's projects": {TenantID: "b", ProjectID: "default", EventID: "sneaky", Type: "T"},
	} {
		if err := enqueue(bad); !errors.Is(err, producer.ErrNotPermitted) {
			t.Errorf("%s: want ErrNotPermitted, got %v", name, err)
		}
	}
	// Setting the tenant by hand does not help: a producer role writes
	// through herald_enqueue only (migration 0045).
	err = pgx.BeginFunc(ctx, svc, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('herald.tenant', 'b', true)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO event_outbox (tenant_id, event_id, event_type) VALUES ('b', 'by-hand', 'T')`)
		return err
	})
	if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.Code != "42501" {
		t.Fatalf("insert for b with herald.tenant = b: want permission denied, got %v", err)
	}
	// The producer reads its own tenant's events only (whatever
	// herald.tenant says), and nothing else.
	var n, others int
	err = pgx.BeginFunc(ctx, svc, func(tx pgx.Tx) error {
		if err := store.SetTenant(ctx, tx, "b", ""); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE tenant_id <> 'a') FROM event_outbox`).Scan(&n, &others)
	})
	if err != nil || n != 2 || others != 0 {
		t.Fatalf("producer of a reading with tenant b set: %d rows, %d of other tenants, %v; want a's 2", n, others, err)
	}
	if _, err := svc.Exec(ctx, `SELECT 1 FROM notifications`); err == nil {
		t.Fatal("a producer role may read notifications")
	}
	var got int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM event_outbox WHERE tenant_id = 'b'`).Scan(&got); err != nil || got != 1 {
		t.Fatalf("tenant b has %d events (want only its seed), %v", got, err)
	}
}

func TestAPIRoleCheckRefusesRolesThatCrossTenants(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	cases := map[string]struct {
		role string
		want string
	}{
		"owner":  {role: "", want: "owner"},
		"worker": {role: store.RoleWorker, want: "herald_worker"},
		"admin":  {role: store.RoleAdmin, want: "herald_admin"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pool, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 1, Role: tc.role})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			err = store.CheckAPIRole(ctx, pool, "database.api_url")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want a refusal naming %q, got %v", tc.want, err)
			}
		})
	}
	// A superuser is refused too.
	su, err := pgxpool.New(ctx, testenv.SuperuserURL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close()
	if err := store.CheckAPIRole(ctx, su, "database.api_url"); err == nil || !strings.Contains(err.Error(), "superuser") {
		t.Fatalf("superuser: want a refusal, got %v", err)
	}
}

var errRollback = errors.New("rollback")

func isRLSRefusal(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501" && strings.Contains(pe.Message, "row-level security")
}

// TestFanoutWritesTheSameRowsWithAndWithoutRLS runs InsertFanout once in a
// session that row-level security binds (INSERT ... unnest) and once with
// RLS off on deliveries (COPY), and compares what they wrote.
func TestFanoutWritesTheSameRowsWithAndWithoutRLS(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	if err := store.EnsureTenant(ctx, db.Pool, "t", ""); err != nil {
		t.Fatal(err)
	}
	next := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	write := func(event, nid string, rlsOff bool) {
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if rlsOff {
				if _, err := tx.Exec(ctx, `ALTER TABLE deliveries DISABLE ROW LEVEL SECURITY`); err != nil {
					return err
				}
			}
			note := store.NewNotification{ID: nid, TenantID: "t", ProjectID: "default", EventID: event, UserID: "u", EventType: "X", Severity: "warning", CreatedAt: time.Now()}
			var dels []store.NewDelivery
			for _, ch := range []string{"EMAIL", "SMS"} {
				dels = append(dels, store.NewDelivery{NotificationID: nid, TenantID: "t", EventID: event, EventType: "X", UserID: "u",
					UserType: "CUSTOMER", Channel: ch, Severity: "warning", Status: store.StatusPending, BestEffort: ch == "SMS",
					MaxAttempts: 4, NextAttemptAt: next, Recipient: json.RawMessage(`{"email":"u@example.com"}`),
					Content: json.RawMessage(`{"subject":"héllo \u2028"}`)})
			}
			n, written, err := store.InsertFanout(ctx, tx, []store.NewNotification{note}, dels)
			if err != nil {
				return err
			}
			if n != 1 || len(written) != 2 || written[0].ID == "" {
				return fmt.Errorf("wrote %d notifications, %d deliveries", n, len(written))
			}
			if rlsOff {
				_, err = tx.Exec(ctx, `ALTER TABLE deliveries ENABLE ROW LEVEL SECURITY`)
			}
			return err
		})
		if err != nil {
			t.Fatalf("rls off %v: %v", rlsOff, err)
		}
	}
	write("e-insert", "0190d0a0-0000-7000-8000-0000000000a1", false)
	write("e-copy", "0190d0a0-0000-7000-8000-0000000000a2", true)
	rows, err := db.Pool.Query(ctx, `SELECT event_id, channel, tenant_id, user_id, user_type, severity, status, best_effort,
			max_attempts, next_attempt_at, recipient::text, content::text, created_at = updated_at
		FROM deliveries ORDER BY channel, event_id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		vals, err := r.Values()
		return fmt.Sprint(vals[1:]), err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0] != got[1] || got[2] != got[3] {
		t.Fatalf("COPY and INSERT wrote different rows:\n%s", strings.Join(got, "\n"))
	}
}

// TestReadInTenantScopesOneRoundTrip: the tenant set at the head of the
// pipeline binds its reads, and nothing of it is left on the connection.
func TestReadInTenantScopesOneRoundTrip(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	seedTwoTenants(t, ctx, db.Pool)
	api, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 1, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	for _, ten := range []string{"a", "b", "a"} {
		b := &pgx.Batch{}
		b.Queue(`SELECT DISTINCT tenant_id FROM event_outbox`)
		b.Queue(`SELECT count(*) FROM notifications`)
		var seen []string
		var n int
		err := store.ReadInTenant(ctx, api, ten, "", b, func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			if seen, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return err
			}
			return br.QueryRow().Scan(&n)
		})
		if err != nil || len(seen) != 1 || seen[0] != ten || n != 1 {
			t.Fatalf("tenant %s: saw %v, %d notifications, %v", ten, seen, n, err)
		}
		var left int
		if err := api.QueryRow(ctx, `SELECT count(*) FROM event_outbox`).Scan(&left); err != nil || left != 0 {
			t.Fatalf("after the pipeline the connection still sees %d rows (%v)", left, err)
		}
	}
}
