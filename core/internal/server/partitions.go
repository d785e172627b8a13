package server

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/config"
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
	// Sweeps bounds the retention sweeps of a round (store.ApplySweeps:
	// the rows of event_outbox, archived notifications and tenants'
	// shorter periods, deleted in batches); zero values take its
	// defaults (5,000 rows a statement, 200 statements or a minute a
	// round, whichever comes first).
	Sweeps store.SweepLimits
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
		if err := k.sweep(ctx, now()); err != nil {
			return err
		}
	}
	return nil
}

// sweep runs the retention sweeps once, within k.Sweeps. A round that
// stops on its limits is not a failure: the next round goes on.
func (k *PartitionKeeper) sweep(ctx context.Context, now time.Time) error {
	res, err := store.ApplySweeps(ctx, k.Pool, *k.Retention, now, k.Sweeps)
	for _, r := range res {
		if r.Deleted > 0 || !r.Done {
			k.Log.Info("retention: swept", "table", r.Table(), "tenant", r.Tenant, "key", r.Key(), "period", r.Period,
				"deleted", r.Deleted, "statements", r.Statements, "done", r.Done)
		}
	}
	if errors.Is(err, store.ErrSweepBudget) {
		k.Log.Info("retention: sweep round reached its limits; the next round goes on")
		return nil
	}
	return err
}

// RetentionFromConfig returns the retention the config's retention block
// asks for, and whether it asks for any.
func RetentionFromConfig(c config.RetentionConfig) (store.Retention, bool) {
	r := store.Retention{DeliveryAttempts: c.DeliveryAttempts, Notifications: c.Notifications, Deliveries: c.Deliveries,
		Events: c.Events, ArchivedNotifications: c.ArchivedNotifications}
	for t, tc := range c.Tenants {
		tr := store.TenantRetention{Events: tc.Events, Notifications: tc.Notifications,
			ArchivedNotifications: tc.ArchivedNotifications, DeliveryAttempts: tc.DeliveryAttempts}
		if tr == (store.TenantRetention{}) {
			continue
		}
		if r.Tenants == nil {
			r.Tenants = map[string]store.TenantRetention{}
		}
		r.Tenants[t] = tr
	}
	set := r.DeliveryAttempts > 0 || r.Notifications > 0 || r.Deliveries > 0 || r.Events > 0 || r.ArchivedNotifications > 0 ||
		len(r.Tenants) > 0
	return r, set
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
