package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// The kinds of sweep: retention that dropping whole partitions cannot
// give, applied by deleting short bounded batches (migration 0022,
// herald_sweep). Each names its key in the config's retention block.
const (
	// SweepEvents deletes PROCESSED and FAILED events of event_outbox
	// created longer ago than retention.events (never a PENDING one).
	SweepEvents = "events"
	// SweepArchivedNotifications deletes notifications archived longer
	// ago than retention.archived_notifications.
	SweepArchivedNotifications = "archived_notifications"
	// SweepNotifications deletes one tenant's notifications created
	// longer ago than its own, shorter, retention.tenant.T.notifications.
	SweepNotifications = "notifications"
	// SweepDeliveryAttempts deletes one tenant's attempts of deliveries
	// created longer ago than retention.tenant.T.delivery_attempts.
	SweepDeliveryAttempts = "delivery_attempts"
)

// SweepKinds lists the kinds of sweep in the order a pass runs them.
var SweepKinds = []string{SweepEvents, SweepArchivedNotifications, SweepNotifications, SweepDeliveryAttempts}

// TenantRetention is one tenant's own retention periods, each shorter
// than the global one (config refuses a longer one); zero keeps the
// global period.
type TenantRetention struct {
	Events                time.Duration
	Notifications         time.Duration
	ArchivedNotifications time.Duration
	DeliveryAttempts      time.Duration
}

// period returns t's period of a kind of sweep (zero: none of its own).
func (t TenantRetention) period(kind string) time.Duration {
	switch kind {
	case SweepEvents:
		return t.Events
	case SweepArchivedNotifications:
		return t.ArchivedNotifications
	case SweepNotifications:
		return t.Notifications
	case SweepDeliveryAttempts:
		return t.DeliveryAttempts
	}
	return 0
}

// sweptPeriod returns r's global period of a kind of sweep: events and
// archived notifications are only ever swept; the global notifications and
// delivery_attempts periods go by whole months (ApplyRetention), so they
// give no sweep (zero).
func (r Retention) sweptPeriod(kind string) time.Duration {
	switch kind {
	case SweepEvents:
		return r.Events
	case SweepArchivedNotifications:
		return r.ArchivedNotifications
	}
	return 0
}

// Sweep is one tenant's rows of one kind the sweeps delete: those older
// than Period.
type Sweep struct {
	Kind   string
	Tenant string
	Period time.Duration
	// Own is whether Period is the tenant's own (retention.tenant.T)
	// rather than the global one.
	Own bool
}

// Key is the config key Period comes from.
func (s Sweep) Key() string {
	if s.Own {
		return "retention.tenant." + s.Tenant + "." + s.Kind
	}
	return "retention." + s.Kind
}

// Table is the table the sweep deletes from.
func (s Sweep) Table() string {
	switch s.Kind {
	case SweepEvents:
		return "event_outbox"
	case SweepDeliveryAttempts:
		return "delivery_attempts"
	}
	return "notifications"
}

// Sweeps lists the sweeps r asks for, by kind and tenant: the global
// events and archived_notifications periods for every tenant with such
// rows (and each tenant's own period where it has one), and the tenants'
// own notifications and delivery_attempts periods (the global ones are
// applied by dropping whole months, ApplyRetention).
func (r Retention) Sweeps(ctx context.Context, q Querier) ([]Sweep, error) {
	var out []Sweep
	for _, kind := range SweepKinds {
		global := r.sweptPeriod(kind)
		tenants := map[string]bool{}
		if global > 0 {
			rows, err := q.Query(ctx, `SELECT herald_sweep_tenants($1)`, kind)
			if err != nil {
				return nil, fmt.Errorf("sweeps: tenants with %s: %w", kind, err)
			}
			ts, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return nil, fmt.Errorf("sweeps: tenants with %s: %w", kind, err)
			}
			for _, t := range ts {
				tenants[t] = true
			}
		}
		for t, tr := range r.Tenants {
			if tr.period(kind) > 0 {
				tenants[t] = true
			}
		}
		names := make([]string, 0, len(tenants))
		for t := range tenants {
			names = append(names, t)
		}
		slices.Sort(names)
		for _, t := range names {
			s := Sweep{Kind: kind, Tenant: t, Period: global}
			if own := r.Tenants[t].period(kind); own > 0 && (global <= 0 || own < global) {
				s.Period, s.Own = own, true
			}
			if s.Period > 0 {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// SweepLimits bound the work of one pass of sweeps.
type SweepLimits struct {
	// BatchSize is the most rows one statement (and transaction)
	// deletes (default 5,000).
	BatchSize int
	// MaxStatements is the most statements one pass runs, over every
	// sweep (default 200: a million rows at the default batch size).
	MaxStatements int
	// Budget is how long a pass may run: no statement starts after it
	// (default one minute).
	Budget time.Duration
}

func (l SweepLimits) withDefaults() SweepLimits {
	if l.BatchSize <= 0 {
		l.BatchSize = 5000
	}
	if l.MaxStatements <= 0 {
		l.MaxStatements = 200
	}
	if l.Budget <= 0 {
		l.Budget = time.Minute
	}
	return l
}

// SweepResult is what one pass did of one sweep.
type SweepResult struct {
	Sweep
	// Deleted counts the rows deleted; Statements the batches run.
	Deleted    int64
	Statements int
	// Done is false when the pass stopped on its limits before a batch
	// found fewer rows than BatchSize: the next pass goes on.
	Done bool
}

// ErrSweepBudget is returned by ApplySweeps when a pass stopped on its
// limits with rows left: the next pass (an hour later in the daemon)
// goes on from the oldest.
var ErrSweepBudget = errors.New("retention sweep: the pass reached its limits; the next pass goes on")

// ApplySweeps runs the sweeps r asks for at now: for each, batches of at
// most l.BatchSize rows, the oldest first, each its own statement (on a
// pool, its own transaction) starting where the one before ended, until
// a batch deletes fewer than l.BatchSize. The pass as a whole runs at most l.MaxStatements
// statements and starts none after l.Budget; stopping there, it returns
// what it did and ErrSweepBudget. A batch that deadlocked with a writer of
// the same counters is run again (up to three times). q should be a pool:
// in one transaction the batches would hold every row lock until the end.
func ApplySweeps(ctx context.Context, q Querier, r Retention, now time.Time, l SweepLimits) ([]SweepResult, error) {
	l = l.withDefaults()
	sweeps, err := r.Sweeps(ctx, q)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(l.Budget)
	statements := 0
	var out []SweepResult
	for _, s := range sweeps {
		res := SweepResult{Sweep: s}
		before := now.Add(-s.Period)
		if s.Kind == SweepDeliveryAttempts {
			// The first-try successes kept on the delivery rows leave the
			// log with the logged attempts (migration 0115).
			if err := RaiseAttemptLogFloor(ctx, q, s.Tenant, before); err != nil {
				return out, err
			}
		}
		var after *time.Time
		for {
			if statements >= l.MaxStatements || !time.Now().Before(deadline) {
				out = append(out, res)
				return out, ErrSweepBudget
			}
			n, last, err := sweepBatch(ctx, q, s, before, l.BatchSize, after)
			statements++
			res.Statements++
			if err != nil {
				out = append(out, res)
				return out, fmt.Errorf("retention sweep of %s (%s): %w", s.Table(), s.Key(), err)
			}
			res.Deleted += int64(n)
			after = last
			if n < l.BatchSize {
				res.Done = true
				break
			}
		}
		out = append(out, res)
	}
	return out, nil
}

// sweepBatch deletes one batch from after (nil: from the oldest row),
// again when it deadlocked. It returns the rows deleted and the time key
// of the last, where the next batch starts (nil when none was deleted).
func sweepBatch(ctx context.Context, q Querier, s Sweep, before time.Time, limit int, after *time.Time) (int, *time.Time, error) {
	var n int
	var last *time.Time
	err := RetryRaces(func() error {
		return q.QueryRow(ctx, `SELECT deleted, last_key FROM herald_sweep($1, $2, $3, $4, $5)`, s.Kind, s.Tenant, before, limit, after).
			Scan(&n, &last)
	})
	return n, last, err
}

// SweepDue counts the rows of s past its period at now, up to limit (the
// count stops there).
func SweepDue(ctx context.Context, q Querier, s Sweep, now time.Time, limit int) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, `SELECT herald_sweep_due($1, $2, $3, $4)`, s.Kind, s.Tenant, now.Add(-s.Period), limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("rows due of %s (%s): %w", s.Table(), s.Key(), err)
	}
	return n, nil
}
