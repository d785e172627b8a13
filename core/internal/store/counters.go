package store

import (
	"context"
	"fmt"
)

// Drift is a counter that did not match its notifications.
type Drift struct {
	TenantID  string `json:"tenant_id"`
	UserID    string `json:"user_id"`
	ProjectID string `json:"project_id"`
	// Was is what the counter said; Is is what the rows say.
	Was int64 `json:"was"`
	Is  int64 `json:"is"`
}

// RepairCounters recomputes the unread counters of tenant (every tenant
// when empty) from the notifications, fixes the ones that drifted and
// returns them. Run it in a transaction: the counters are locked first,
// so a relay batch or an inbox change running meanwhile waits and is
// counted once. (A user whose counter row does not exist yet is not
// locked: a first notification committed while the repair counts may be
// counted as of before it; running the repair again settles it.)
func RepairCounters(ctx context.Context, tx Querier, tenant string) ([]Drift, error) {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM notification_counters WHERE ($1 = '' OR tenant_id = $1)
		ORDER BY tenant_id, user_id, project_id FOR UPDATE`, tenant); err != nil {
		return nil, fmt.Errorf("repair counters: lock: %w", err)
	}
	rows, err := tx.Query(ctx, `WITH actual AS (
			SELECT tenant_id, user_id, project_id, count(*) FILTER (WHERE read_at IS NULL AND archived_at IS NULL) AS n
			FROM notifications WHERE ($1 = '' OR tenant_id = $1) GROUP BY 1, 2, 3
		), drift AS (
			SELECT coalesce(a.tenant_id, c.tenant_id) AS tenant_id, coalesce(a.user_id, c.user_id) AS user_id,
				coalesce(a.project_id, c.project_id) AS project_id, coalesce(c.unread, 0)::bigint AS was_n, coalesce(a.n, 0)::bigint AS is_n
			FROM actual a FULL JOIN (SELECT * FROM notification_counters WHERE ($1 = '' OR tenant_id = $1)) c
				USING (tenant_id, user_id, project_id)
			WHERE coalesce(c.unread, 0) <> coalesce(a.n, 0)
		), fix AS (
			INSERT INTO notification_counters (tenant_id, user_id, project_id, unread)
			SELECT tenant_id, user_id, project_id, is_n FROM drift
			ON CONFLICT (tenant_id, user_id, project_id) DO UPDATE SET unread = EXCLUDED.unread
		)
		SELECT tenant_id, user_id, project_id, was_n, is_n FROM drift ORDER BY 1, 2, 3`, tenant)
	if err != nil {
		return nil, fmt.Errorf("repair counters: %w", err)
	}
	defer rows.Close()
	var out []Drift
	for rows.Next() {
		var d Drift
		if err := rows.Scan(&d.TenantID, &d.UserID, &d.ProjectID, &d.Was, &d.Is); err != nil {
			return nil, fmt.Errorf("repair counters: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}
