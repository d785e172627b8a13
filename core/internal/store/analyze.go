package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// analyzed lists the tables whose planner statistics AnalyzeStale keeps
// fresh: the ones the hot path writes or joins. Their wide columns
// (rendered content, recipients' JSON, errors) are left out of every
// ANALYZE (migration 0006).
var analyzed = []string{"event_outbox", "notifications", "notification_counters", "deliveries", "delivery_attempts",
	"delivery_handoffs", "status_events", "recipients", "recipient_devices", "groups", "group_members", "user_preferences", "group_settings"}

// analyzeLock keeps concurrent daemons from analyzing at the same time.
const analyzeLock = 0x6865726c6461 // "herlda"

// AnalyzeStale runs a light ANALYZE (a 3,000-row sample) on Herald's
// tables whose statistics lag behind their contents: changed rows since the last analyze reach 500 plus a
// tenth of the rows the statistics know of (autovacuum's rule, with a
// higher floor), checked as often as the caller calls.
//
// The hot path's statements are prepared, and PostgreSQL keeps a generic
// plan made from the statistics of the moment. A table that grew from
// empty without an analyze (a fresh install under its first burst, or a
// server running with autovacuum off) keeps plans that scan the whole
// table for a handful of rows, per message, until an analyze invalidates
// them. Autovacuum's own analyze comes at most once per naptime (a minute
// by default) and not at all when it is off.
//
// One daemon analyzes at a time; the others skip the round. It returns the
// tables it analyzed.
func AnalyzeStale(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}) ([]string, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var mine bool
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, int64(analyzeLock)).Scan(&mine); err != nil || !mine {
		if err != nil {
			return nil, fmt.Errorf("analyze: %w", err)
		}
		return nil, nil
	}
	// A partitioned table (migration 0018) has no rows of its own: it is
	// stale when its partitions together are, and then an ANALYZE of it
	// samples the whole and recurses into every partition. Otherwise a
	// partition that is stale on its own (the new month, filling from
	// empty) is analyzed alone.
	rows, err := tx.Query(ctx, `WITH rel AS (
			SELECT p.relname AS name, x.mods, x.tuples, p.relkind = 'p' AS parent, p.oid
			FROM pg_class p CROSS JOIN LATERAL (
				SELECT coalesce(sum(s.n_mod_since_analyze), 0) AS mods, coalesce(sum(greatest(c.reltuples, 0)), 0) AS tuples
				FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
				WHERE (p.relkind <> 'p' AND c.oid = p.oid)
				   OR (p.relkind = 'p' AND c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = p.oid))) x
			WHERE p.relnamespace = current_schema()::regnamespace AND p.relname = ANY($1) AND p.relkind IN ('r', 'p')
		), stale AS (
			SELECT name, parent, oid FROM rel WHERE mods >= 500 + 0.1 * tuples
		)
		SELECT name FROM stale
		UNION ALL
		SELECT c.relname FROM rel JOIN pg_inherits i ON i.inhparent = rel.oid JOIN pg_class c ON c.oid = i.inhrelid
			JOIN pg_stat_user_tables s ON s.relid = c.oid
		WHERE rel.parent AND rel.name NOT IN (SELECT name FROM stale)
		  AND s.n_mod_since_analyze >= 500 + 0.1 * greatest(c.reltuples, 0)
		ORDER BY 1`, analyzed)
	if err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}
	stale, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}
	if len(stale) == 0 {
		return nil, nil
	}
	// A sample of 3,000 rows sizes a table well enough.
	if _, err := tx.Exec(ctx, `SET LOCAL default_statistics_target = 10`); err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}
	for _, t := range stale {
		// herald_analyze runs ANALYZE as the tables' owner: the daemon's
		// role (herald_worker) may not.
		if _, err := tx.Exec(ctx, `SELECT herald_analyze($1)`, t); err != nil {
			return nil, fmt.Errorf("analyze %s: %w", t, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}
	return stale, nil
}

// AutovacuumWarning is what herald serve logs and herald doctor shows when
// the server runs with autovacuum off.
const AutovacuumWarning = "PostgreSQL runs with autovacuum = off: the dead rows every event, delivery and unread count " +
	"leaves behind are never reclaimed, so the outbox, deliveries and notification_counters tables and their indexes grow " +
	"and every pass over them gets slower (herald bench's soak lost a quarter of its rate by 5 M deliveries this way); " +
	"turn autovacuum on in postgresql.conf, or VACUUM those tables on a schedule"

// AutovacuumOff reports whether the server runs with autovacuum off.
// Herald analyzes its tables itself (AnalyzeStale) but does not vacuum
// them: that is the server's job.
func AutovacuumOff(ctx context.Context, q Querier) (bool, error) {
	var v string
	if err := q.QueryRow(ctx, "SHOW autovacuum").Scan(&v); err != nil {
		return false, fmt.Errorf("show autovacuum: %w", err)
	}
	return v == "off", nil
}
