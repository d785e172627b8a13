package relay_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/relay"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// confirmingHandoff is a handoff whose broker confirmed the handoff rows
// in confirmed: it hands them to the relay's transaction to delete and
// records what it was offered and what came back.
type confirmingHandoff struct {
	mu        sync.Mutex
	confirmed []int64
	returned  []int64
	offered   []int64
}

func (h *confirmingHandoff) Ready() bool          { return true }
func (h *confirmingHandoff) Grace() time.Duration { return time.Hour }
func (h *confirmingHandoff) Owner() int32         { return 0 }

func (h *confirmingHandoff) Offer(_ context.Context, id int64, _ []store.NewDelivery) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.offered = append(h.offered, id)
}

func (h *confirmingHandoff) TakeConfirmed() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := h.confirmed
	h.confirmed = nil
	return ids
}

func (h *confirmingHandoff) ReturnConfirmed(ids []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.returned = append(h.returned, ids...)
}

// confirmedRow writes a handoff row as one whose deliveries the broker
// confirmed and returns its id.
func confirmedRow(t *testing.T, db *testenv.DB) int64 {
	t.Helper()
	var id int64
	if err := db.Pool.QueryRow(context.Background(), `INSERT INTO delivery_handoffs (due_at, delivery_ids)
		VALUES (now() + interval '1 hour', '{}') RETURNING handoff_id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestRelayDeletesConfirmedHandoffsInItsTransaction: the handoff rows
// the broker confirmed go with the relay's next batch, in its
// transaction, and no transaction of their own.
func TestRelayDeletesConfirmedHandoffsInItsTransaction(t *testing.T) {
	t.Parallel()
	db, rs := setup(t)
	ctx := context.Background()
	old := confirmedRow(t, db)
	h := &confirmingHandoff{confirmed: []int64{old}}
	enqueue(t, db, "e1", "PING", `{"user": "u1"}`)
	r := relay.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(),
		relay.Config{BatchSize: 10, MaxAttempts: 3, Handoff: h})
	if n, err := r.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("RunOnce = %d, %v; want 1 event", n, err)
	}
	if len(h.offered) != 1 || len(h.returned) != 0 {
		t.Fatalf("offered %v, returned %v; want one batch offered and nothing returned", h.offered, h.returned)
	}
	if n := count(t, db, `SELECT count(*) FROM delivery_handoffs WHERE handoff_id = $1`, old); n != 0 {
		t.Fatal("the confirmed handoff row is still there")
	}
	if n := count(t, db, `SELECT count(*) FROM delivery_handoffs WHERE handoff_id = $1 AND cardinality(delivery_ids) > 0`, h.offered[0]); n != 1 {
		t.Fatal("the batch's own handoff row was not written")
	}
}

// TestRelayGivesConfirmedHandoffsBackWhenItRollsBack: a relay batch that
// does not commit deleted nothing, and gives the confirmed rows it took
// back to the handoff, to delete later.
func TestRelayGivesConfirmedHandoffsBackWhenItRollsBack(t *testing.T) {
	t.Parallel()
	db, rs := setup(t)
	ctx := context.Background()
	old := confirmedRow(t, db)
	// The commit fails: a deferred check on the batch's new handoff row.
	if _, err := db.Pool.Exec(ctx, `
		CREATE FUNCTION test_refuse_handoff() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused at commit'; END $$;
		CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON delivery_handoffs DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW EXECUTE FUNCTION test_refuse_handoff()`); err != nil {
		t.Fatal(err)
	}
	h := &confirmingHandoff{confirmed: []int64{old}}
	enqueue(t, db, "e1", "PING", `{"user": "u1"}`)
	r := relay.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(),
		relay.Config{BatchSize: 10, MaxAttempts: 3, Handoff: h})
	if _, err := r.RunOnce(ctx); err == nil {
		t.Fatal("RunOnce committed; the test's trigger should have refused the commit")
	}
	if !slices.Equal(h.returned, []int64{old}) || len(h.offered) != 0 {
		t.Fatalf("returned %v, offered %v; want %d returned and nothing offered", h.returned, h.offered, old)
	}
	if n := count(t, db, `SELECT count(*) FROM delivery_handoffs WHERE handoff_id = $1`, old); n != 1 {
		t.Fatal("the confirmed handoff row was deleted by a batch that rolled back")
	}
	if n := count(t, db, `SELECT count(*) FROM event_outbox WHERE status = 'PENDING'`); n != 1 {
		t.Fatal("the event is not PENDING again after the rollback")
	}
}
