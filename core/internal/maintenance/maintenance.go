// Package maintenance is the daemon's housekeeping stage: one loop that,
// every interval, does a few small duties on the deliveries table, one
// duty a file:
//
//   - leases.go: attempts lost mid-send (a SENDING lease that ran out
//     because the daemon or the plugin died) go back to RETRY under the
//     LostAttempts retry policy;
//   - deferred.go: DEFERRED deliveries whose quiet hours ended are
//     released to PENDING;
//   - escalations.go: due escalations (WAITING, hold 'escalation') go to
//     PENDING, or to CANCELLED when their notification was read or acted
//     on;
//   - analyze.go: stale planner statistics are refreshed (ANALYZE), every
//     few seconds.
//
// Each round then kicks the publisher, which claims the due RETRY and
// PENDING deliveries: maintenance moves rows between states, it sends
// nothing. The SQL lives in package store; the scheduling lives here.
// Partition drops and retention sweeps have their own loop
// (core/internal/server/partitions.go).
package maintenance

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultInterval is the time between two rounds when none is given.
const DefaultInterval = time.Second

// Maintenance runs the duties in rounds. Create it with New.
type Maintenance struct {
	db       *pgxpool.Pool
	interval time.Duration
	kick     func()
	log      hclog.Logger
	analyzed time.Time // the last analyze round
}

// New returns the stage: it runs every interval (DefaultInterval when
// zero or less) against db and calls kick after each round, so the
// publisher claims what the round released.
func New(db *pgxpool.Pool, interval time.Duration, kick func(), log hclog.Logger) *Maintenance {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Maintenance{db: db, interval: interval, kick: kick, log: log.Named("maintenance")}
}

// Run does a round every interval until ctx ends.
func (m *Maintenance) Run(ctx context.Context) error {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		m.Tick(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Tick does one round: every duty, then the publisher's kick. A duty that
// fails is logged and tried again next round.
func (m *Maintenance) Tick(ctx context.Context) {
	m.expireLeases(ctx)
	m.releaseDeferred(ctx)
	m.releaseEscalations(ctx)
	// Due RETRY deliveries are claimed by the publisher; kick it every round.
	m.kick()
	m.analyze(ctx)
}
