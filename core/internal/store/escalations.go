package store

import (
	"context"
	"fmt"
)

// HoldEscalation is the hold of a WAITING delivery that is an escalation:
// sent when due unless its in-app notification was read or acted on
// (deliveries.escalate_unless says which).
const HoldEscalation = "escalation"

// What cancels an escalation (deliveries.escalate_unless), as the rules
// name it.
const (
	EscalateUnlessRead  = "read"
	EscalateUnlessActed = "acted"
)

// utcStamp formats a timestamptz column as RFC 3339 in UTC, for reasons in
// last_error.
func utcStamp(col string) string {
	return `to_char(` + col + ` AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')`
}

// Released counts what ReleaseEscalations did.
type Released struct {
	// Pending moved to PENDING: unread when due, sent now.
	Pending int
	// Cancelled moved to CANCELLED: read or acted on before they were due.
	Cancelled int
}

// ReleaseEscalations takes up to limit due escalations (WAITING, hold
// 'escalation', next_attempt_at passed) that no other transaction holds
// (SKIP LOCKED: two daemons never take the same row), and in one statement
// moves each to CANCELLED, with last_error saying why ("acted on by U
// (CONFIRMED) at T", "read at T"), when its notification was acted on or
// read as its escalate_unless says, or else to PENDING, due now, for the
// publisher. Only rows still WAITING are taken: one a read, an action or
// DELETE /v1/events/{id} cancelled first is left as it is; digest items
// (hold 'digest') are never touched.
func ReleaseEscalations(ctx context.Context, q Querier, limit int) (Released, error) {
	rows, err := q.Query(ctx, `WITH due AS (
			SELECT d.delivery_id, d.created_at, d.tenant_id, d.notification_id, d.escalate_unless
			FROM deliveries d
			WHERE d.queue = 'WAITING' AND d.hold = 'escalation' AND d.next_attempt_at <= now()
			ORDER BY d.next_attempt_at LIMIT $1
			FOR UPDATE SKIP LOCKED
		), why AS (
			SELECT due.delivery_id, due.created_at, CASE
				WHEN 'acted' = ANY(due.escalate_unless) AND a.action_id IS NOT NULL
					THEN format('acted on by %s (%s) at %s', a.user_id, a.action, `+utcStamp("a.acted_at")+`)
				WHEN 'read' = ANY(due.escalate_unless) AND n.read_at IS NOT NULL
					THEN 'read at ' || `+utcStamp("n.read_at")+`
				END AS reason
			FROM due
			LEFT JOIN notifications n ON n.tenant_id = due.tenant_id AND n.notification_id = due.notification_id
				AND n.created_at = due.created_at
			LEFT JOIN notification_actions a ON a.tenant_id = n.tenant_id AND a.share_key = n.share_key
		)
		UPDATE deliveries d SET status = CASE WHEN why.reason IS NULL THEN 'PENDING' ELSE 'CANCELLED' END,
			last_error = coalesce(why.reason, ''), hold = NULL, next_attempt_at = now(), updated_at = now()
		FROM why WHERE d.delivery_id = why.delivery_id AND d.created_at = why.created_at
		RETURNING d.status`, limit)
	if err != nil {
		return Released{}, fmt.Errorf("release escalations: %w", err)
	}
	defer rows.Close()
	var r Released
	for rows.Next() {
		var status string
		if err := rows.Scan(&status); err != nil {
			return Released{}, fmt.Errorf("release escalations: %w", err)
		}
		if status == StatusPending {
			r.Pending++
		} else {
			r.Cancelled++
		}
	}
	if err := rows.Err(); err != nil {
		return Released{}, fmt.Errorf("release escalations: %w", err)
	}
	return r, nil
}

// CancelEscalationsRead cancels, in the transaction that marked them read,
// the waiting escalations of the tenant's notifications ids (those a read
// cancels), with last_error "read at T". It returns how many it cancelled.
// A row the release poller holds is waited for and then left alone when
// the poller released it: each escalation ends one way only.
func CancelEscalationsRead(ctx context.Context, q Querier, tenant string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	tag, err := q.Exec(ctx, `UPDATE deliveries d SET status = 'CANCELLED', hold = NULL, updated_at = now(),
			last_error = 'read at ' || `+utcStamp("n.read_at")+`
		FROM notifications n
		WHERE n.tenant_id = $1 AND n.notification_id = ANY($2::uuid[]) AND n.read_at IS NOT NULL
			AND d.tenant_id = n.tenant_id AND d.event_id = n.event_id AND d.user_id = n.user_id AND d.created_at = n.created_at
			AND d.notification_id = n.notification_id
			AND d.queue = 'WAITING' AND d.hold = 'escalation' AND 'read' = ANY(d.escalate_unless)`, tenant, ids)
	if err != nil {
		return 0, fmt.Errorf("cancel escalations of read notifications: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// CancelEscalationsActed cancels, in the transaction that recorded the
// winning action on the tenant's shared notification shareKey, the waiting
// escalations of every sharer that an action cancels, with last_error
// "acted on by U (TYPE) at T": the first to act handles it for everyone.
func CancelEscalationsActed(ctx context.Context, q Querier, tenant, shareKey string) (int, error) {
	tag, err := q.Exec(ctx, `UPDATE deliveries d SET status = 'CANCELLED', hold = NULL, updated_at = now(),
			last_error = format('acted on by %s (%s) at %s', a.user_id, a.action, `+utcStamp("a.acted_at")+`)
		FROM notification_actions a
		JOIN notifications n ON n.tenant_id = a.tenant_id AND n.share_key = a.share_key
		WHERE a.tenant_id = $1 AND a.share_key = $2
			AND d.tenant_id = n.tenant_id AND d.event_id = n.event_id AND d.user_id = n.user_id AND d.created_at = n.created_at
			AND d.notification_id = n.notification_id
			AND d.queue = 'WAITING' AND d.hold = 'escalation' AND 'acted' = ANY(d.escalate_unless)`, tenant, shareKey)
	if err != nil {
		return 0, fmt.Errorf("cancel escalations of an acted notification: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
