package delivery

import (
	"context"
	"github.com/heraldhq/herald/core/internal/store"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestInflightKeepsOneHolderPerAttempt plays two daemons (two guards on
// the same database): an attempt held by one is refused to the other and
// to a second caller of the same guard, until it is released or the
// holder's session ends.
func TestInflightKeepsOneHolderPerAttempt(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	a := newInflight(db.Pool.Config().ConnConfig, hclog.NewNullLogger())
	b := newInflight(db.Pool.Config().ConnConfig, hclog.NewNullLogger())
	defer a.close(ctx)
	defer b.close(ctx)

	k1, k2, k1next := attemptKey("d1", 1), attemptKey("d2", 1), attemptKey("d1", 2)
	if got := a.acquire(ctx, []string{k1, k2}); !slices.Equal(sorted(got), []string{k1, k2}) {
		t.Fatalf("a acquires %v, want both", got)
	}
	if got := a.acquire(ctx, []string{k1}); len(got) != 0 {
		t.Fatalf("a second caller in the same daemon got %v", got)
	}
	if got := b.acquire(ctx, []string{k1, k2, k1next}); !slices.Equal(got, []string{k1next}) {
		t.Fatalf("b acquires %v, want only the next attempt %s", got, k1next)
	}
	a.release(ctx, []string{k1})
	if got := b.acquire(ctx, []string{k1}); !slices.Equal(got, []string{k1}) {
		t.Fatalf("after a released %s, b acquires %v", k1, got)
	}
	// a's daemon dies: its session ends and its locks with it (the server
	// ends the session a moment after the client hangs up).
	a.close(ctx)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return slices.Equal(b.acquire(ctx, []string{k2}), []string{k2})
	}, "b acquires %s after a's session ended", k2)
	b.release(ctx, []string{k1, k2, k1next})
	c := newInflight(db.Pool.Config().ConnConfig, hclog.NewNullLogger())
	defer c.close(ctx)
	if got := c.acquire(ctx, []string{k1, k2, k1next}); len(got) != 3 {
		t.Fatalf("after b released everything, a new daemon acquires %v", got)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestTakeChecksWhatIsStillDue: taking a message's attempts also says, in
// the same round trip and after the locks, which are still due; an
// attempt already recorded is held but not due, and one another daemon
// holds is neither.
func TestTakeChecksWhatIsStillDue(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var notes []store.NewNotification
	var dels []store.NewDelivery
	for i, u := range []string{"u1", "u2", "u3"} {
		nid := "0190d0a0-0000-7000-8000-00000000010" + strconv.Itoa(i)
		notes = append(notes, store.NewNotification{ID: nid, TenantID: "t", EventID: "e", UserID: u, EventType: "X", Severity: "info", CreatedAt: time.Now()})
		dels = append(dels, store.NewDelivery{NotificationID: nid, TenantID: "t", EventID: "e", EventType: "X", UserID: u,
			UserType: "CUSTOMER", Channel: "EMAIL", Severity: "info", Status: store.StatusPublished, MaxAttempts: 3, NextAttemptAt: time.Now()})
	}
	_, written, err := store.InsertFanout(ctx, tx, notes, dels)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	sent := store.Outcome{ID: written[0].ID, Attempt: 1, Kind: "sent", Status: store.StatusSent, StartedAt: time.Now()}
	if _, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{sent}); err != nil {
		t.Fatal(err)
	}
	refs := make([]store.Ref, len(written))
	keys := make([]string, len(written))
	for i, d := range written {
		refs[i] = store.Ref{ID: d.ID, Attempt: 1}
		keys[i] = attemptKey(d.ID, 1)
	}
	other := newInflight(db.Pool.Config().ConnConfig, hclog.NewNullLogger())
	defer other.close(ctx)
	if got := other.acquire(ctx, keys[2:]); len(got) != 1 {
		t.Fatalf("other daemon acquires %v", got)
	}
	g := newInflight(db.Pool.Config().ConnConfig, hclog.NewNullLogger())
	defer g.close(ctx)
	held, due, checked := g.take(ctx, keys, refs)
	if !checked {
		t.Fatal("the check did not run")
	}
	if !slices.Equal(sorted(held), sorted(keys[:2])) {
		t.Fatalf("held %v, want the two attempts the other daemon does not hold", held)
	}
	if len(due) != 2 || due[written[0].ID] || !due[written[1].ID] {
		t.Fatalf("due %v: want %s (not the recorded %s)", due, written[1].ID, written[0].ID)
	}
	g.releaseLater(held)
	other.release(ctx, keys[2:])
	testenv.Eventually(t, 10*time.Second, func() bool {
		got := other.acquire(ctx, keys[:2])
		other.release(ctx, got)
		return len(got) == 2
	}, "the batched release never dropped the locks")
}

// acquire is take without the check: the keys this caller now holds.
func (f *inflight) acquire(ctx context.Context, keys []string) []string {
	held, _, _ := f.take(ctx, keys, nil)
	return held
}
