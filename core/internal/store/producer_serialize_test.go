package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk/producer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestEnqueueSerializationFailureIsAPgError makes two SERIALIZABLE
// transactions write-skew through the outbox: each counts the tenant's
// events, then enqueues one. The second enqueue fails with SQLSTATE 40001,
// and the caller sees it with errors.As, as a retry loop must.
func TestEnqueueSerializationFailureIsAPgError(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := store.EnsureTenant(ctx, db.Pool, "a", ""); err != nil {
		t.Fatal(err)
	}
	begin := func() pgx.Tx {
		tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT set_config('herald.tenant', 'a', true)) s, event_outbox WHERE tenant_id = 'a'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	ev := func(id string) producer.Event {
		return producer.Event{TenantID: "a", EventID: id, Type: "T", Payload: json.RawMessage(`{}`)}
	}
	t1, t2 := begin(), begin()
	if err := producer.Enqueue(ctx, t1, ev("first")); err != nil {
		t.Fatal(err)
	}
	if err := t1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err := producer.Enqueue(ctx, t2, ev("second"))
	if err == nil {
		// PostgreSQL may only find the conflict at commit; then Enqueue's
		// own wrapping is not what this test is about.
		t.Fatalf("the second SERIALIZABLE enqueue succeeded; commit says: %v", t2.Commit(ctx))
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("enqueue error %q (%T): want a *pgconn.PgError with SQLSTATE 40001", err, err)
	}
	if errors.Is(err, producer.ErrNotPermitted) || errors.Is(err, producer.ErrDuplicate) {
		t.Errorf("a serialization failure matched another sentinel: %v", err)
	}
	t.Logf("enqueue: %v (SQLSTATE %s)", err, pgErr.Code)
}
