package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// writeOwned writes n EMAIL deliveries as the relay does with a handoff
// owned by owner (PUBLISHED, handoff row due after grace), or, when
// pending, as PENDING deliveries with no handoff.
func (f *handoffFixture) writeOwned(t *testing.T, event string, n int, grace time.Duration, owner int32, pending bool) []store.NewDelivery {
	t.Helper()
	ctx := context.Background()
	tx, err := f.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	status := store.StatusPublished
	if pending {
		status = store.StatusPending
	}
	var notes []store.NewNotification
	var dels []store.NewDelivery
	for i := range n {
		nid := fmt.Sprintf("0190d0a0-0000-7000-8000-%012d", len(event)*100000+int(event[len(event)-1])*1000+i)
		user := fmt.Sprintf("u%d", i)
		notes = append(notes, store.NewNotification{ID: nid, TenantID: "t", EventID: event, UserID: user, EventType: "X", Severity: "info", CreatedAt: time.Now()})
		dels = append(dels, store.NewDelivery{NotificationID: nid, TenantID: "t", EventID: event, EventType: "X", UserID: user,
			UserType: "CUSTOMER", Channel: "EMAIL", Severity: "info", Status: status, MaxAttempts: 3,
			NextAttemptAt: time.Now(), Recipient: json.RawMessage(`{"user_id":"` + user + `"}`),
			Content: json.RawMessage(`{"subject":"hello"}`)})
	}
	_, written, err := store.InsertFanout(ctx, tx, notes, dels)
	if err != nil {
		t.Fatal(err)
	}
	if !pending {
		ids := make([]string, len(written))
		for i, d := range written {
			ids[i] = d.ID
		}
		if _, err := store.InsertHandoff(ctx, tx, ids, grace, owner); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return written
}

// claimHandoffsNow runs one ClaimHandoffs and rolls it back; it returns
// how many handoffs it would take.
func (f *handoffFixture) claimHandoffsNow(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	tx, err := f.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	_, taken, err := store.ClaimHandoffs(ctx, tx, 10)
	if err != nil {
		t.Fatal(err)
	}
	return taken
}

// TestLivenessIDsAreDistinct: two daemons on one database never share an
// id, and a closed daemon's id is free again.
func TestLivenessIDsAreDistinct(t *testing.T) {
	f := newHandoffFixture(t)
	ctx := context.Background()
	cfg := f.db.Pool.Config().ConnConfig
	a, err := NewLiveness(ctx, cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := NewLiveness(ctx, cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.ID() == 0 || a.ID() == b.ID() {
		t.Fatalf("liveness ids %d and %d; want two distinct non-zero ids", a.ID(), b.ID())
	}
	// b cannot take a's id while a lives.
	if err := b.acquire(ctx, a.ID()); err != nil {
		t.Fatal(err)
	}
	if b.ID() == a.ID() {
		t.Fatalf("b took live daemon a's id %d", a.ID())
	}
	a.Close()
	if err := b.acquire(ctx, a.ID()); err != nil || b.ID() != a.ID() {
		t.Fatalf("b took id %d (%v) after a closed; want a's id %d, now free", b.ID(), err, a.ID())
	}
}

// TestHandoffOfLiveOwnerIsLeftAloneDeadOwnerTakenOver plays two daemons:
// A wrote a handoff and is alive but slow (its handoff never publishes
// it), B's publisher runs. While A holds its liveness lock, B publishes
// other work but leaves A's handoff alone (nothing stolen, nothing
// published twice); the moment A's session ends (the process died), B
// takes the handoff over, long before its grace period.
func TestHandoffOfLiveOwnerIsLeftAloneDeadOwnerTakenOver(t *testing.T) {
	f := newHandoffFixture(t)
	ctx := context.Background()
	a, err := NewLiveness(ctx, f.db.Pool.Config().ConnConfig, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	owned := f.writeOwned(t, "live-a", 3, time.Hour, a.ID(), false)
	if n := f.claimHandoffsNow(t); n != 0 {
		t.Fatalf("a live owner's handoff was claimable (%d)", n)
	}

	runCtx, cancel := context.WithCancel(ctx)
	p := NewPublisher(f.db.Pool, f.conn, hclog.NewNullLogger(), PublisherConfig{Workers: 1, PollInterval: 50 * time.Millisecond})
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	// B's publisher works: each of its rounds claims handoffs first, then
	// PENDING deliveries. Three rounds of other work go out while A lives.
	ownedIDs := map[string]bool{}
	for _, d := range owned {
		ownedIDs[d.ID] = true
	}
	for round := range 3 {
		other := f.writeOwned(t, fmt.Sprintf("other-%d", round), 2, 0, 0, true)
		p.Kick()
		for _, env := range f.consume(t, len(other)) {
			for _, w := range env.Deliveries {
				if ownedIDs[w.ID] {
					t.Fatalf("delivery %s of live daemon A's handoff was published by B", w.ID)
				}
			}
		}
	}
	if n := f.handoffRows(t); n != 1 {
		t.Fatalf("%d handoff rows while A lives; want A's one", n)
	}

	a.Close() // A's process died: PostgreSQL drops its lock
	p.Kick()
	got := map[string]bool{}
	for _, env := range f.consume(t, len(owned)) {
		for _, w := range env.Deliveries {
			got[w.ID] = true
		}
	}
	for id := range ownedIDs {
		if !got[id] {
			t.Fatalf("delivery %s of dead daemon A's handoff was not taken over", id)
		}
	}
	// The claim's transaction commits (deleting the row) once the broker
	// confirmed what the consumer may already have.
	testenv.Eventually(t, 10*time.Second, func() bool { return f.handoffRows(t) == 0 }, "dead owner's handoff row not deleted after the takeover")
}

// TestLivenessTakesItsLockAgainAfterLosingItsSession: when the liveness
// session ends under a living daemon (here terminated by the server, as a
// database restart would), Run connects again and holds the same id.
func TestLivenessTakesItsLockAgainAfterLosingItsSession(t *testing.T) {
	f := newHandoffFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	l, err := NewLiveness(ctx, f.db.Pool.Config().ConnConfig, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	id := l.ID()
	holder := func() int {
		var pid int
		err := f.db.Pool.QueryRow(context.Background(), `SELECT coalesce(max(pid), 0) FROM pg_locks
			WHERE locktype = 'advisory' AND classid = $1 AND objid = $2 AND objsubid = 2 AND granted`,
			uint32(store.LivenessLockClass), uint32(id)).Scan(&pid)
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	old := holder()
	if old == 0 {
		t.Fatal("no session holds the liveness lock")
	}
	var ok bool
	if err := f.db.Pool.QueryRow(context.Background(), `SELECT pg_terminate_backend($1)`, old).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate the liveness session: %v %v", ok, err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool {
		pid := holder()
		return pid != 0 && pid != old
	}, "the liveness lock held again on a new session")
	if l.ID() != id {
		t.Fatalf("liveness id changed from %d to %d; nobody else held it", id, l.ID())
	}
}
