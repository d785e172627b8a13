package store

import (
	"context"
	"time"
)

// BacklogCap bounds each count of Backlog: past it the figure reads as the
// cap, so the query stays cheap however large the backlog grows.
const BacklogCap = 100000

// Backlog is what waits in the pipeline's tables: each count is capped at
// BacklogCap, the ages are of the oldest row already due (0: none).
type Backlog struct {
	EventsPending            int64
	OldestEventAge           time.Duration
	Pending, Retry, Deferred int64
	OldestPendingAge         time.Duration
	// DigestWindows counts digest windows not yet flushed;
	// OldestDueDigestAge is how long the oldest due one has waited.
	DigestWindows      int64
	OldestDueDigestAge time.Duration
}

// backlogSQL reads every figure through the partial indexes of the waiting
// rows (event_outbox_pending, deliveries_pending, deliveries_due; the
// deliveries' through queue, migration 0017), each
// count bounded by $1, so it never scans the processed history.
const backlogSQL = `SELECT
	(SELECT count(*) FROM (SELECT 1 FROM event_outbox WHERE status = 'PENDING' LIMIT $1) e),
	(SELECT COALESCE(EXTRACT(EPOCH FROM greatest(now() - min(available_at), '0'::interval)), 0)::float8
		FROM (SELECT available_at FROM event_outbox WHERE status = 'PENDING' ORDER BY available_at LIMIT 1) e),
	(SELECT count(*) FROM (SELECT 1 FROM deliveries WHERE queue = 'PENDING' LIMIT $1) d),
	(SELECT count(*) FROM (SELECT 1 FROM deliveries WHERE queue = 'RETRY' LIMIT $1) d),
	(SELECT count(*) FROM (SELECT 1 FROM deliveries WHERE queue = 'DEFERRED' LIMIT $1) d),
	(SELECT COALESCE(EXTRACT(EPOCH FROM greatest(now() - min(next_attempt_at), '0'::interval)), 0)::float8
		FROM (SELECT next_attempt_at FROM deliveries WHERE queue = 'PENDING' ORDER BY next_attempt_at LIMIT 1) d),
	(SELECT count(*) FROM (SELECT 1 FROM digest_windows LIMIT $1) w),
	(SELECT COALESCE(EXTRACT(EPOCH FROM greatest(now() - min(closes_at), '0'::interval)), 0)::float8
		FROM (SELECT closes_at FROM digest_windows WHERE closes_at <= now() ORDER BY closes_at LIMIT 1) w)`

// ReadBacklog returns the backlog as q (the pipeline's role: every tenant)
// sees it.
func ReadBacklog(ctx context.Context, q Querier) (Backlog, error) {
	var (
		b                             Backlog
		eventAge, delivAge, digestAge float64
	)
	err := q.QueryRow(ctx, backlogSQL, BacklogCap).Scan(&b.EventsPending, &eventAge, &b.Pending, &b.Retry, &b.Deferred, &delivAge, &b.DigestWindows, &digestAge)
	b.OldestEventAge = time.Duration(eventAge * float64(time.Second))
	b.OldestPendingAge = time.Duration(delivAge * float64(time.Second))
	b.OldestDueDigestAge = time.Duration(digestAge * float64(time.Second))
	return b, err
}
