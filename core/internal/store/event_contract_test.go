package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// nested is a JSON object nested depth levels deep (the object itself is
// level 1).
func nested(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + `{}` + strings.Repeat(`}`, depth-1)
}

// A role that inserts into the outbox with SQL of its own (the API's;
// producers write through herald_enqueue, which inserts under the same
// trigger): the database refuses what sdk/producer and the API refuse,
// naming the field, and the bookkeeping columns stay Herald's.
func TestDatabaseEnforcesTheEventContract(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	seedTwoTenants(t, ctx, db.Pool)
	svc, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 2, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	insert := func(cols, vals string, args ...any) error {
		return pgx.BeginFunc(ctx, svc, func(tx pgx.Tx) error {
			if err := store.SetTenant(ctx, tx, "a", ""); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO event_outbox (tenant_id, event_type, `+cols+`) VALUES ('a', 'T', `+vals+`)`, args...)
			return err
		})
	}
	big := `{"x":"` + strings.Repeat("a", 2<<20) + `"}`
	tests := map[string]struct {
		cols, vals string
		args       []any
		column     string
		msg        string
	}{
		"status PROCESSED": {cols: "event_id, status", vals: "'e1', 'PROCESSED'", column: "status",
			msg: "event_outbox.status: set by Herald; a producer leaves it to its default (status PENDING)"},
		"status FAILED":   {cols: "event_id, status", vals: "'e1', 'FAILED'", column: "status", msg: "event_outbox.status: set by Herald"},
		"attempts":        {cols: "event_id, attempts", vals: "'e1', 9", column: "attempts", msg: "event_outbox.attempts: set by Herald"},
		"last_error":      {cols: "event_id, last_error", vals: "'e1', 'x'", column: "last_error", msg: "event_outbox.last_error: set by Herald"},
		"processed_at":    {cols: "event_id, processed_at", vals: "'e1', now()", column: "processed_at", msg: "event_outbox.processed_at: set by Herald"},
		"created_at":      {cols: "event_id, created_at", vals: "'e1', '1970-01-01'", column: "created_at", msg: "event_outbox.created_at: set by Herald"},
		"2 MiB payload":   {cols: "event_id, payload", vals: "'e1', $1", args: []any{big}, column: "payload", msg: "payload: is 2097161 bytes, more than 262144"},
		"array payload":   {cols: "event_id, payload", vals: "'e1', '[1]'", column: "payload", msg: "payload: must be a JSON object, not array"},
		"string payload":  {cols: "event_id, payload", vals: `'e1', '"s"'`, column: "payload", msg: "payload: must be a JSON object, not string"},
		"null payload":    {cols: "event_id, payload", vals: "'e1', 'null'", column: "payload", msg: "payload: must be a JSON object, not null"},
		"33 deep":         {cols: "event_id, payload", vals: "'e1', $1", args: []any{nested(33)}, column: "payload", msg: "payload: is nested deeper than 32 levels"},
		"33 deep array":   {cols: "event_id, payload", vals: "'e1', $1", args: []any{`{"a":` + strings.Repeat("[", 32) + strings.Repeat("]", 32) + `}`}, column: "payload", msg: "payload: is nested deeper than 32"},
		"event_id CR LF":  {cols: "event_id", vals: "$1", args: []any{"e1\r\nX-Injected: 1"}, column: "event_id", msg: "event_id: byte 2 is 0x0d; an event_id is printable ASCII without spaces (0x21-0x7E)"},
		"event_id LF":     {cols: "event_id", vals: "$1", args: []any{"e1\n"}, column: "event_id", msg: "event_id: byte 2 is 0x0a"},
		"event_id space":  {cols: "event_id", vals: "$1", args: []any{"e 1"}, column: "event_id", msg: "event_id: byte 1 is 0x20"},
		"event_id é":      {cols: "event_id", vals: "$1", args: []any{"évt"}, column: "event_id", msg: "event_id: byte 0 is 0xc3"},
		"event_id empty":  {cols: "event_id", vals: "''", column: "event_id", msg: "event_id: is required"},
		"event_id long":   {cols: "event_id", vals: "$1", args: []any{strings.Repeat("e", 201)}, column: "event_id", msg: "event_id: is longer than 200 bytes"},
		"aggregate_id":    {cols: "event_id, aggregate_id", vals: "'e1', $1", args: []any{"a\tb"}, column: "aggregate_id", msg: "aggregate_id: holds the control character U+0009 at byte 1"},
		"aggregate_type":  {cols: "event_id, aggregate_type", vals: "'e1', $1", args: []any{strings.Repeat("t", 201)}, column: "aggregate_type", msg: "aggregate_type: is longer than 200 bytes"},
		"tracestate long": {cols: "event_id, traceparent, tracestate", vals: "'e1', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', $1", args: []any{strings.Repeat("t", 513)}, column: "tracestate", msg: "tracestate: is longer than 512 bytes"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := insert(tc.cols, tc.vals, tc.args...)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) {
				t.Fatalf("want a PostgreSQL error, got %v", err)
			}
			if pe.Code != "23514" || pe.ColumnName != tc.column || pe.TableName != "event_outbox" || pe.ConstraintName != "event_outbox_contract" {
				t.Fatalf("got SQLSTATE %s, table %q, column %q, constraint %q (%s); want 23514 on event_outbox.%s, event_outbox_contract",
					pe.Code, pe.TableName, pe.ColumnName, pe.ConstraintName, pe.Message, tc.column)
			}
			if !strings.HasPrefix(pe.Message, tc.msg) {
				t.Fatalf("message %q, want it to start with %q", pe.Message, tc.msg)
			}
		})
	}
	// At the limits the insert goes through, PENDING.
	limit := `{"x":"` + strings.Repeat("a", 262144-len(`{"x": ""}`)) + `"}`
	if err := insert("event_id, payload, aggregate_id", "$1, $2, $3", strings.Repeat("~", 200), nested(32), "é"); err != nil {
		t.Fatalf("an event at the depth and id limits: %v", err)
	}
	if err := insert("event_id, payload, status", "'at-size', $1, 'PENDING'", limit); err != nil {
		t.Fatalf("a payload of exactly 262144 bytes as stored: %v", err)
	}
	var status string
	if err := db.Pool.QueryRow(ctx, `SELECT status FROM event_outbox WHERE event_id = 'at-size'`).Scan(&status); err != nil || status != "PENDING" {
		t.Fatalf("good event: %q, %v", status, err)
	}
	// Herald's own roles keep their bookkeeping writes (the sweep's and
	// the relay's tests insert PROCESSED rows as the owner).
	if _, err := db.Pool.Exec(ctx, `INSERT INTO event_outbox (tenant_id, event_id, event_type, status) VALUES ('a', 'by-owner', 'T', 'PROCESSED')`); err != nil {
		t.Fatalf("owner inserting a PROCESSED event: %v", err)
	}
	// The owner too is held to the value contract.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO event_outbox (tenant_id, event_id, event_type, payload) VALUES ('a', 'big', 'T', $1)`, big); err == nil {
		t.Fatal("the owner inserted a 2 MiB payload")
	}
}

// TestMigration0023RoundTrip: 0023 goes down (the contract and the column
// grants go) and up again.
func TestMigration0023RoundTrip(t *testing.T) {
	t.Parallel()
	db := testenv.PostgresAt(t, 23) // "down" undoes the last one applied
	ctx := context.Background()
	contract := func() (n int) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname = 'event_outbox_contract'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var out strings.Builder
	if err := store.MigrateTo(ctx, db.URL, "down", &out); err != nil {
		t.Fatal(err)
	}
	var insert bool
	if err := db.Pool.QueryRow(ctx, `SELECT has_table_privilege('herald_producer', 'event_outbox', 'INSERT')`).Scan(&insert); err != nil || !insert || contract() != 0 {
		t.Fatalf("after down: producer INSERT %v, contract triggers %d (%v)", insert, contract(), err)
	}
	if err := store.MigrateTo(ctx, db.URL, "up", &out); err != nil {
		t.Fatal(err)
	}
	var id bool
	if err := db.Pool.QueryRow(ctx, `SELECT has_column_privilege('herald_producer', 'event_outbox', 'id', 'INSERT')`).Scan(&id); err != nil || id || contract() != 1 {
		t.Fatalf("after up: producer INSERT on id %v, contract triggers %d (%v)", id, contract(), err)
	}
}
