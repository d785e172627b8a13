package source_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sql/outbox"
)

// The check functions are migration 0045's text, word for word: the file
// holds 0045's herald_refuse and herald_check_event as they are written
// there, and the tenant and project checks of herald_enqueue as migration
// 0095 (the latest to define it) writes them.
func TestInstallHoldsMigration0045sChecks(t *testing.T) {
	up := migrationUp(t, "0045")
	for _, fn := range []string{"herald_refuse", "herald_check_event"} {
		i := strings.Index(up, "FUNCTION "+fn+"(")
		if i < 0 {
			t.Fatalf("0045 has no %s", fn)
		}
		end := strings.Index(up[i:], "\n$$;")
		body := up[i : i+end+4]
		if !strings.Contains(outbox.InstallSQL, "CREATE OR REPLACE "+body) {
			t.Errorf("install.sql does not hold 0045's %s word for word; copy it from the migration", fn)
		}
	}
	up = migrationUp(t, "0095")
	const from, to = "    -- One test for the common case", "    -- Herald's own roles"
	i, j := strings.Index(up, from), strings.Index(up, to)
	if i < 0 || j < i {
		t.Fatalf("0095's herald_enqueue has no tenant and project checks between %q and %q", from, to)
	}
	if !strings.Contains(outbox.InstallSQL, up[i:j]) {
		t.Errorf("install.sql's herald_enqueue does not hold 0095's tenant and project checks word for word; copy them from the migration")
	}
}

// migrationUp returns the Up part of the migration numbered n.
func migrationUp(t *testing.T, n string) string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(testenv.RepoRoot(t), "migrations", n+"_*.sql"))
	if err != nil || len(matches) != 1 {
		t.Fatalf("migration %s: %v %v", n, matches, err)
	}
	b, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	up, _, _ := strings.Cut(string(b), "-- +goose Down")
	return up
}

func installDatabases(t *testing.T) (herald, src *pgxpool.Pool) {
	t.Helper()
	db := testenv.Postgres(t)
	if err := store.EnsureTenant(context.Background(), db.Pool, "acme", ""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, drop, err := store.CreateDatabase(ctx, testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL), testenv.RandomName("herald_src_"))
	if err != nil {
		t.Fatal(err)
	}
	src, err = pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		src.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = drop(ctx)
	})
	return db.Pool, src
}

func installOutbox(ctx context.Context, pool *pgxpool.Pool) error {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	_, err = c.Conn().PgConn().Exec(ctx, outbox.InstallSQL).ReadAll()
	return err
}

// The source's herald_enqueue and Herald's accept and refuse the same
// events with the same SQLSTATE, message and COLUMN; the file installs
// twice (an upgrade in place), refuses a Herald database and a newer
// outbox.
func TestEnqueueAgreesWithHeralds(t *testing.T) {
	herald, src := installDatabases(t)
	ctx := context.Background()
	if err := installOutbox(ctx, src); err != nil {
		t.Fatal(err)
	}
	if err := installOutbox(ctx, src); err != nil {
		t.Fatalf("second install: %v", err)
	}
	var v int
	if err := src.QueryRow(ctx, `SELECT version FROM herald_outbox_version`).Scan(&v); err != nil || v != outbox.Version {
		t.Fatalf("version %d (%v), want %d", v, err, outbox.Version)
	}
	for _, fn := range []string{"herald_refuse", "herald_check_event"} {
		var a, b string
		q := `SELECT prosrc FROM pg_proc WHERE proname = $1`
		if err := herald.QueryRow(ctx, q, fn).Scan(&a); err != nil {
			t.Fatal(err)
		}
		if err := src.QueryRow(ctx, q, fn).Scan(&b); err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Errorf("%s differs between Herald's database and the source's", fn)
		}
	}

	deep := strings.Repeat(`{"a":`, 40) + "1" + strings.Repeat("}", 40)
	cases := []struct {
		name string
		args []any
	}{
		{"fine", []any{"acme", "ok-1", "T", `{"a": 1}`, "", "", "default", nil, nil}},
		{"empty tenant", []any{"", "x", "T", `{}`, "", "", "default", nil, nil}},
		{"bad tenant", []any{"a b", "x", "T", `{}`, "", "", "default", nil, nil}},
		{"bad project", []any{"acme", "x", "T", `{}`, "", "", "-p", nil, nil}},
		{"empty event_id", []any{"acme", "", "T", `{}`, "", "", "default", nil, nil}},
		{"long event_id", []any{"acme", strings.Repeat("x", 201), "T", `{}`, "", "", "default", nil, nil}},
		{"space in event_id", []any{"acme", "a b", "T", `{}`, "", "", "default", nil, nil}},
		{"non-ASCII event_id", []any{"acme", "é", "T", `{}`, "", "", "default", nil, nil}},
		{"no type", []any{"acme", "x", "", `{}`, "", "", "default", nil, nil}},
		{"control in type", []any{"acme", "x", "T\x01", `{}`, "", "", "default", nil, nil}},
		{"long aggregate_id", []any{"acme", "x", "T", `{}`, "", strings.Repeat("y", 201), "default", nil, nil}},
		{"array payload", []any{"acme", "x", "T", `[1]`, "", "", "default", nil, nil}},
		{"number payload", []any{"acme", "x", "T", `7`, "", "", "default", nil, nil}},
		{"deep payload", []any{"acme", "x", "T", deep, "", "", "default", nil, nil}},
		{"huge payload", []any{"acme", "x", "T", `{"s": "` + strings.Repeat("z", 262200) + `"}`, "", "", "default", nil, nil}},
		{"huge number", []any{"acme", "x", "T", `{"n": 1` + strings.Repeat("0", 320) + `}`, "", "", "default", nil, nil}},
		{"bad traceparent", []any{"acme", "x", "T", `{}`, "", "", "default", "00-zz", nil}},
		{"tracestate alone", []any{"acme", "x", "T", `{}`, "", "", "default", nil, "a=b"}},
		{"NUL-free invalid jsonb is refused by the cast alike", []any{"acme", "x", "T", `{"a": }`, "", "", "default", nil, nil}},
	}
	const q = `SELECT outcome FROM herald_enqueue($1, $2, $3, $4::jsonb, $5, $6, $7, traceparent => $8, tracestate => $9)`
	call := func(pool *pgxpool.Pool, args []any) (string, error) {
		var outcome string
		err := pool.QueryRow(ctx, q, args...).Scan(&outcome)
		return outcome, err
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o1, e1 := call(herald, tc.args)
			o2, e2 := call(src, tc.args)
			if o1 != o2 {
				t.Fatalf("outcome: Herald %q, source %q", o1, o2)
			}
			var p1, p2 *pgconn.PgError
			errors.As(e1, &p1)
			errors.As(e2, &p2)
			if (p1 == nil) != (p2 == nil) {
				t.Fatalf("Herald: %v; source: %v", e1, e2)
			}
			if p1 != nil && (p1.Code != p2.Code || p1.Message != p2.Message || p1.ColumnName != p2.ColumnName) {
				t.Fatalf("Herald: %s %s (%s); source: %s %s (%s)", p1.Code, p1.Message, p1.ColumnName, p2.Code, p2.Message, p2.ColumnName)
			}
			if tc.name == "fine" {
				if o1 != "new" {
					t.Fatalf("outcome %q", o1)
				}
				// Again: a repeat on both; with another payload: a conflict.
				o1, _ = call(herald, tc.args)
				o2, _ = call(src, tc.args)
				if o1 != "repeat" || o2 != "repeat" {
					t.Fatalf("repeat: Herald %q, source %q", o1, o2)
				}
				other := append([]any{}, tc.args...)
				other[3] = `{"a": 2}`
				o1, _ = call(herald, other)
				o2, _ = call(src, other)
				if o1 != "conflict" || o2 != "conflict" {
					t.Fatalf("conflict: Herald %q, source %q", o1, o2)
				}
			}
		})
	}

	// Herald's own database is refused, and so is a newer outbox.
	if err := installOutbox(ctx, herald); err == nil || !strings.Contains(err.Error(), "this is a Herald database") {
		t.Fatalf("install into Herald's database: %v", err)
	}
	if _, err := src.Exec(ctx, `UPDATE herald_outbox_version SET version = version + 1`); err != nil {
		t.Fatal(err)
	}
	if err := installOutbox(ctx, src); err == nil || !strings.Contains(err.Error(), "newer than this file") {
		t.Fatalf("install over a newer outbox: %v", err)
	}
}
