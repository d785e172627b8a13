package delivery

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RetryPoller moves deliveries whose time has come: SENDING ones (left by
// versions that claimed before sending) whose lease expired go to RETRY (or
// FAILED), DEFERRED ones whose quiet hours
// ended go to PENDING; then it kicks the publisher, which republishes due
// RETRY deliveries and publishes the released ones. Every few seconds it
// also refreshes stale planner statistics (store.AnalyzeStale).
type RetryPoller struct {
	pool     *pgxpool.Pool
	interval time.Duration
	kick     func()
	log      hclog.Logger
	analyzed time.Time // the last store.AnalyzeStale round
}

// analyzeEvery is how often the poller refreshes stale planner statistics
// (store.AnalyzeStale).
const analyzeEvery = 5 * time.Second

// NewRetryPoller returns a poller that runs every interval and calls kick
// when it released work for the publisher.
func NewRetryPoller(pool *pgxpool.Pool, interval time.Duration, kick func(), log hclog.Logger) *RetryPoller {
	if interval <= 0 {
		interval = time.Second
	}
	return &RetryPoller{pool: pool, interval: interval, kick: kick, log: log.Named("retry")}
}

// Run polls until ctx ends.
func (p *RetryPoller) Run(ctx context.Context) error {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		p.Tick(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Tick does one round.
func (p *RetryPoller) Tick(ctx context.Context) {
	lost, err := store.ExpireLeases(ctx, p.pool)
	if err != nil && ctx.Err() == nil {
		p.log.Warn("expire leases", "error", err)
	}
	if lost > 0 {
		p.log.Warn("attempts lost mid-send moved to RETRY", "count", lost)
	}
	if _, err := store.ReleaseDeferred(ctx, p.pool); err != nil && ctx.Err() == nil {
		p.log.Warn("release deferred", "error", err)
	}
	// Due RETRY deliveries are claimed by the publisher; kick it every round.
	p.kick()
	if time.Since(p.analyzed) >= analyzeEvery {
		p.analyzed = time.Now()
		tables, err := store.AnalyzeStale(ctx, p.pool)
		if err != nil && ctx.Err() == nil {
			p.log.Warn("refreshing planner statistics failed", "error", err)
		}
		if len(tables) > 0 {
			p.log.Debug("planner statistics refreshed", "tables", tables)
		}
	}
}
