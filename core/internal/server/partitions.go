package server

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PartitionKeeper is the daemon stage that keeps the monthly partitions of
// Herald's partitioned tables created ahead (store.EnsurePartitions) and,
// when retention is configured, drops the months past it
// (store.ApplyRetention). It runs a round at start and every `every`; a
// round that fails (the database away) is logged and retried a minute
// later. Rounds are idempotent, so any number of daemons may run it.
type PartitionKeeper struct {
	Pool  *pgxpool.Pool
	Log   hclog.Logger
	Every time.Duration
	// Retention drops old partitions when it is not nil.
	Retention *store.Retention
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Rounds, when not nil, receives the result of every round.
	Rounds chan<- error
}

// Round creates the partitions ahead and applies retention once.
func (k *PartitionKeeper) Round(ctx context.Context) error {
	now := time.Now
	if k.Now != nil {
		now = k.Now
	}
	n, err := store.EnsurePartitions(ctx, k.Pool, now())
	if err != nil {
		return err
	}
	if n > 0 {
		k.Log.Info("created partitions ahead", "count", n)
	}
	if k.Retention != nil {
		dropped, err := store.ApplyRetention(ctx, k.Pool, *k.Retention, now())
		if err != nil {
			return err
		}
		for _, p := range dropped {
			k.Log.Info("retention: dropped partition", "table", p.Table, "partition", p.Name, "to", p.To)
		}
	}
	return nil
}

// Run runs rounds until ctx ends.
func (k *PartitionKeeper) Run(ctx context.Context) error {
	every := k.Every
	if every <= 0 {
		every = time.Hour
	}
	for {
		err := k.Round(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := every
		if err != nil {
			k.Log.Error("partition round failed; retrying in a minute", "error", err)
			wait = min(time.Minute, every)
		}
		if k.Rounds != nil {
			select {
			case k.Rounds <- err:
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}
