package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/sdk/producer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestEnqueueFunctionRefusesWithTheAPIWords sends each event the API
// refuses (400, 413 or 422 naming a field) to POST /v1/events and, as a
// producer login granted the tenant, to herald_enqueue: the database
// refuses it with the problem's detail word for word (the field type is
// the function's event_type), the field in the error's COLUMN, and
// writes nothing. Then the refusals PostgreSQL makes before the function
// runs, and the savepoint that keeps the caller's transaction.
func TestEnqueueFunctionRefusesWithTheAPIWords(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	role := "svc_" + strings.TrimPrefix(w.db.Name, "herald_test_")
	svc := producerLogin(t, w, role, "a")
	deep := func(n int) string { return strings.Repeat(`{"a": `, n-1) + `{}` + strings.Repeat(`}`, n-1) }
	// Written as jsonb prints it, so that its size as sent is its size as
	// stored.
	large := `{"a": "` + strings.Repeat("x", producer.MaxPayloadBytes) + `"}`
	tests := map[string]struct {
		ev       map[string]any
		status   int
		sqlstate string
	}{
		"event_id empty":       {ev: map[string]any{"event_id": "", "type": "T"}},
		"event_id too long":    {ev: map[string]any{"event_id": strings.Repeat("e", 201), "type": "T"}},
		"event_id space":       {ev: map[string]any{"event_id": "e 1", "type": "T"}},
		"event_id CR LF":       {ev: map[string]any{"event_id": "e1\r\nX-Injected: 1", "type": "T"}},
		"event_id non-ASCII":   {ev: map[string]any{"event_id": "évt", "type": "T"}},
		"type empty":           {ev: map[string]any{"event_id": "e1", "type": ""}},
		"type too long":        {ev: map[string]any{"event_id": "e1", "type": strings.Repeat("T", 201)}},
		"type control":         {ev: map[string]any{"event_id": "e1", "type": "T\u0085x"}},
		"aggregate_id tab":     {ev: map[string]any{"event_id": "e1", "type": "T", "aggregate_id": "a\tb"}},
		"aggregate_type long":  {ev: map[string]any{"event_id": "e1", "type": "T", "aggregate_type": strings.Repeat("t", 201)}},
		"payload array":        {ev: map[string]any{"event_id": "e1", "type": "T", "payload": json.RawMessage(`[1]`)}},
		"payload string":       {ev: map[string]any{"event_id": "e1", "type": "T", "payload": json.RawMessage(`"s"`)}},
		"payload null":         {ev: map[string]any{"event_id": "e1", "type": "T", "payload": json.RawMessage(`null`)}},
		"payload number":       {ev: map[string]any{"event_id": "e1", "type": "T", "payload": json.RawMessage(`7`)}},
		"payload 33 deep":      {ev: map[string]any{"event_id": "e1", "type": "T", "payload": json.RawMessage(deep(33))}},
		"payload 40 deep":      {ev: map[string]any{"event_id": "e1", "type": "T", "payload": json.RawMessage(deep(40))}},
		"payload huge number":  {ev: map[string]any{"event_id": "e1", "type": "T", "payload": json.RawMessage(`{"a": 1e400}`)}},
		"payload too large":    {ev: map[string]any{"event_id": "e1", "type": "T", "payload": json.RawMessage(large)}, status: 413},
		"project_id malformed": {ev: map[string]any{"event_id": "e1", "type": "T", "project_id": "no/slash"}},
		"project_id unknown":   {ev: map[string]any{"event_id": "e1", "type": "T", "project_id": "nope"}, status: 422, sqlstate: "23503"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b, _ := json.Marshal(tc.ev)
			body := string(b)
			if raw, ok := tc.ev["payload"].(json.RawMessage); ok {
				// As written, not compacted: its size as sent is its
				// size as stored.
				compact, _ := json.Marshal(raw)
				body = strings.Replace(body, string(compact), string(raw), 1)
			}
			r := w.do(t, "POST", "/v1/events", w.keys["a"], body)
			status := tc.status
			if status == 0 {
				status = 400
			}
			if r.code != status {
				t.Fatalf("API: %d %s, want %d", r.code, r.body, status)
			}
			p := r.problem(t)
			str := func(k string) string { s, _ := tc.ev[k].(string); return s }
			payload := "{}"
			if raw, ok := tc.ev["payload"].(json.RawMessage); ok {
				payload = string(raw)
			}
			project := str("project_id")
			if project == "" {
				project = "default"
			}
			var outcome string
			err := svc.QueryRow(ctx, `SELECT outcome FROM herald_enqueue(tenant_id => 'a', event_id => $1, event_type => $2, payload => $3::jsonb,
				aggregate_type => $4, aggregate_id => $5, project_id => $6)`,
				str("event_id"), str("type"), payload, str("aggregate_type"), str("aggregate_id"), project).Scan(&outcome)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) {
				t.Fatalf("herald_enqueue: %q, %v; want an error", outcome, err)
			}
			field, words := p.Field, p.Detail
			if field == "type" {
				field, words = "event_type", "event_type"+strings.TrimPrefix(words, "type")
			}
			want := tc.sqlstate
			if want == "" {
				want = "23514"
			}
			if pe.Code != want || pe.ColumnName != field || pe.Message != words {
				t.Fatalf("herald_enqueue: SQLSTATE %s column %q %q\nthe API: field %q %q\nwant SQLSTATE %s and the same words", pe.Code, pe.ColumnName, pe.Message, p.Field, p.Detail, want)
			}
		})
	}
	var n int
	if err := w.db.Pool.QueryRow(ctx, `SELECT count(*) FROM event_outbox`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d events written (%v), want none", n, err)
	}

	// What PostgreSQL refuses before herald_enqueue runs (the API refuses
	// the same with 400 naming the field): its own SQLSTATE and words.
	for name, c := range map[string]struct {
		id, payload, code string
	}{
		"event_id NUL":           {id: "e\x00", payload: `{}`, code: "22021"},
		"event_id invalid UTF-8": {id: "e\xff", payload: `{}`, code: "22021"},
		"payload NUL escape":     {id: "e1", payload: `{"a": "\u0000"}`, code: "22P05"},
		"payload lone surrogate": {id: "e1", payload: `{"a": "\ud800"}`, code: "22P02"},
		"payload not JSON":       {id: "e1", payload: `{"a": }`, code: "22P02"},
	} {
		_, err := svc.Exec(ctx, `SELECT herald_enqueue('a', $1, 'T', $2::jsonb)`, c.id, c.payload)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != c.code {
			t.Errorf("%s: want SQLSTATE %s, got %v", name, c.code, err)
		}
	}

	// Any error aborts the caller's transaction; a SAVEPOINT before the
	// call keeps the business row written before it.
	err := pgx.BeginFunc(ctx, svc, func(tx pgx.Tx) error {
		for _, q := range []string{`CREATE TEMP TABLE reservation (id int) ON COMMIT DROP`, `INSERT INTO reservation VALUES (42)`, `SAVEPOINT enqueue`} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `SELECT herald_enqueue('a', 'e 1', 'T')`); err == nil {
			t.Fatal("a bad event_id was accepted")
		}
		if _, err := tx.Exec(ctx, `SELECT count(*) FROM reservation`); !isSQLState(err, "25P02") {
			t.Fatalf("after the error, before ROLLBACK TO SAVEPOINT: want 25P02 (transaction aborted), got %v", err)
		}
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT enqueue`); err != nil {
			return err
		}
		var outcome string
		if err := tx.QueryRow(ctx, `SELECT outcome FROM herald_enqueue('a', 'reservation-42', 'T', '{"id": 42}')`).Scan(&outcome); err != nil || outcome != "new" {
			t.Fatalf("after ROLLBACK TO SAVEPOINT: %q, %v", outcome, err)
		}
		var rows int
		return tx.QueryRow(ctx, `SELECT count(*) FROM reservation`).Scan(&rows)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.db.Pool.QueryRow(ctx, `SELECT count(*) FROM event_outbox WHERE event_id = 'reservation-42'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the event after the savepoint: %d rows, %v", n, err)
	}
}

func isSQLState(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}

// producerLogin creates the producer login role granted tenants and
// returns a pool logged in as it.
func producerLogin(t *testing.T, w *world, role string, tenants ...string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	if err := store.EnsureProducerRole(ctx, w.db.Pool, role, "pw-"+role, tenants); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = w.db.Pool.Exec(context.Background(), `DELETE FROM herald_producer_roles WHERE role_name = $1`, role)
		_, _ = w.db.Pool.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = w.db.Pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	cfg, err := pgxpool.ParseConfig(w.db.URL)
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
