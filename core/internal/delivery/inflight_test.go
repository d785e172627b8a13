package delivery

import (
	"context"
	"slices"
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
