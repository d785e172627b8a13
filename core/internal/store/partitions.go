package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PartitionedTables lists Herald's tables partitioned by month:
// delivery_attempts by the created_at of the attempt's delivery (migration
// 0018), notifications by the created_at of their event (0019), and
// deliveries by the created_at of their event (0021).
var PartitionedTables = []string{"delivery_attempts", "notifications", "deliveries"}

// PartitionsAhead is how many months past the current one EnsurePartitions
// keeps created.
const PartitionsAhead = 3

// EnsurePartitions creates the monthly partitions of every partitioned
// table from the month of now to PartitionsAhead months after it, those
// that do not exist yet (idempotent; concurrent daemons serialize on a
// lock in herald_ensure_partitions). It returns how many it created.
func EnsurePartitions(ctx context.Context, q Querier, now time.Time) (int, error) {
	created := 0
	for _, t := range PartitionedTables {
		var n int
		if err := q.QueryRow(ctx, `SELECT herald_ensure_partitions($1, $2, $3)`,
			t, now, now.AddDate(0, PartitionsAhead, 0)).Scan(&n); err != nil {
			return created, fmt.Errorf("ensure partitions of %s: %w", t, err)
		}
		created += n
	}
	return created, nil
}

// Partition is one monthly partition of a partitioned table.
type Partition struct {
	Table string
	Name  string
	// From and To bound the partition key: From <= key < To.
	From, To time.Time
	// EstimatedRows is the planner's estimate (from the last analyze);
	// Bytes the partition's size with its indexes.
	EstimatedRows, Bytes int64
}

// Partitions lists the partitions of table, oldest first.
func Partitions(ctx context.Context, q Querier, table string) ([]Partition, error) {
	rows, err := q.Query(ctx, `SELECT partition_name, lower_bound, upper_bound, estimated_rows, bytes
		FROM herald_partitions($1) ORDER BY upper_bound`, table)
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", table, err)
	}
	parts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Partition, error) {
		p := Partition{Table: table}
		return p, r.Scan(&p.Name, &p.From, &p.To, &p.EstimatedRows, &p.Bytes)
	})
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", table, err)
	}
	return parts, nil
}

// Retention is how long the rows of each partitioned table are kept, by
// the time of their partition key (for delivery_attempts, the creation of
// the attempt's delivery). Zero keeps them forever.
type Retention struct {
	DeliveryAttempts time.Duration
	// Notifications: dropping a month of notifications also takes its
	// unread rows off the unread counters, in the same transaction.
	Notifications time.Duration
	// Deliveries: dropping a month of deliveries keeps the ones not final
	// yet (PENDING, PUBLISHED, SENDING, RETRY, DEFERRED, WAITING: still
	// owed to their user), moved to the default partition in the same
	// transaction; they go once they are final (SENT, FAILED, SKIPPED,
	// CANCELLED or DIGESTED).
	Deliveries time.Duration
	// Events keeps PROCESSED and FAILED events of event_outbox (not
	// partitioned) this long after their creation; ApplySweeps deletes
	// the older ones in bounded batches. Zero keeps them forever.
	Events time.Duration
	// ArchivedNotifications keeps archived notifications this long after
	// they were archived (ApplySweeps); zero: as long as the others.
	ArchivedNotifications time.Duration
	// Tenants holds the tenants' own, shorter, periods (ApplySweeps).
	Tenants map[string]TenantRetention
}

// For returns the retention of table (zero: kept forever).
func (r Retention) For(table string) time.Duration {
	switch table {
	case "delivery_attempts":
		return r.DeliveryAttempts
	case "notifications":
		return r.Notifications
	case "deliveries":
		return r.Deliveries
	}
	return 0
}

// DropAt returns when retention drops partition p: once every row of it
// is older than the retention, at p.To + retention. ok is false when the
// table's rows are kept forever.
func (r Retention) DropAt(p Partition) (at time.Time, ok bool) {
	keep := r.For(p.Table)
	if keep <= 0 {
		return time.Time{}, false
	}
	return p.To.Add(keep), true
}

// ApplyRetention detaches and drops, whole, the partitions whose every
// row is past its table's retention at now (never a DELETE). It returns
// the partitions it dropped.
func ApplyRetention(ctx context.Context, q Querier, r Retention, now time.Time) ([]Partition, error) {
	var dropped []Partition
	for _, t := range PartitionedTables {
		keep := r.For(t)
		if keep <= 0 {
			continue
		}
		parts, err := Partitions(ctx, q, t)
		if err != nil {
			return dropped, err
		}
		before := now.Add(-keep)
		rows, err := q.Query(ctx, `SELECT herald_drop_partitions($1, $2)`, t, before)
		if err != nil {
			return dropped, fmt.Errorf("retention of %s: %w", t, err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return dropped, fmt.Errorf("retention of %s: %w", t, err)
		}
		var upTo time.Time
		for _, n := range names {
			for _, p := range parts {
				if p.Name == n {
					dropped = append(dropped, p)
					if p.To.After(upTo) {
						upTo = p.To
					}
				}
			}
		}
		if t == "delivery_attempts" && !upTo.IsZero() {
			if err := RaiseAttemptLogFloor(ctx, q, "", upTo); err != nil {
				return dropped, err
			}
		}
	}
	return dropped, nil
}

// RaiseAttemptLogFloor records that the attempt log of scope (a tenant id,
// or "" for every tenant) holds no attempt of a delivery created before
// since, so that delivery_attempt_log rebuilds no first-try success
// retention has taken (migration 0115). A floor only rises.
func RaiseAttemptLogFloor(ctx context.Context, q Querier, scope string, since time.Time) error {
	_, err := q.Exec(ctx, `INSERT INTO attempt_log_floors (scope, since) VALUES ($1, $2)
		ON CONFLICT (scope) DO UPDATE SET since = greatest(attempt_log_floors.since, excluded.since)`, scope, since)
	if err != nil {
		return fmt.Errorf("retention of delivery_attempts: raise the attempt log's floor: %w", err)
	}
	return nil
}
