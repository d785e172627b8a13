package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Statuses of a notification in a user's inbox.
const (
	StatusUnread   = "unread"
	StatusRead     = "read"
	StatusArchived = "archived"
)

// Notification is one row of a user's inbox.
type Notification struct {
	NotificationID string          `json:"notification_id"`
	EventID        string          `json:"event_id"`
	EventType      string          `json:"event_type"`
	ProjectID      string          `json:"project_id"`
	Title          string          `json:"title"`
	Body           string          `json:"body"`
	Data           json.RawMessage `json:"data"`
	Severity       string          `json:"severity"`
	Status         string          `json:"status"`
	ReadAt         *time.Time      `json:"read_at,omitempty"`
	ArchivedAt     *time.Time      `json:"archived_at,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	// Shared is true for a notification every recipient of its event
	// shares: one read marks it read for all, and the first action wins.
	Shared bool `json:"shared"`
	// Actionable says whether POST .../actions takes an action on it.
	Actionable bool `json:"actionable"`
	// HandledBy is the winning action on a shared notification.
	HandledBy *Handled `json:"handled_by,omitempty"`
}

// Handled is who acted first on a shared notification, how and when.
type Handled struct {
	ActionID string          `json:"action_id"`
	UserID   string          `json:"user_id"`
	Type     string          `json:"type"`
	Data     json.RawMessage `json:"data,omitempty"`
	At       time.Time       `json:"at"`
}

// noBitmapScan turns bitmap scans off for the rest of the transaction
// (set_config with is_local), so that the bell and the list read the
// user's notifications through notifications_inbox (tenant, user,
// created_at DESC, id DESC) newest first and stop at their LIMIT. The
// planner would not: the row-level security policy's project clause
// ("herald.project is empty, or project_id is herald.project") is
// estimated to keep about 0.5 % of the rows although it keeps all of them
// when the token names no project, so it expects about one row of a
// user's hundred and reads all hundred through a bitmap heap scan, then
// sorts them. On the inbox benchmark's million rows (100 a user) that is
// 104-114 buffers a bell or first page against 15-26, and a third to
// two fifths of the bell or list transactions a second (pgbench, 8
// clients: bell 2,150 against 6,700, list 2,080 against 4,970). Only one
// user's rows are ever read, through an index that has them in order, so
// the index scan is the plan for every filter of the list too.
const noBitmapScan = `SELECT set_config('enable_bitmapscan', 'off', true)`

// selectNotification reads a notification with its winning action; the
// caller appends WHERE and ORDER clauses over alias n.
const selectNotification = `SELECT n.notification_id::text, n.event_id, n.event_type, n.project_id, n.title, n.body, n.data,
		n.severity, n.read_at, n.archived_at, n.created_at, n.share_key IS NOT NULL,
		a.action_id::text, a.user_id, a.action, a.data, a.acted_at
	FROM notifications n
	LEFT JOIN notification_actions a ON a.tenant_id = n.tenant_id AND a.share_key = n.share_key`

func scanNotification(r pgx.CollectableRow) (Notification, error) {
	var n Notification
	var actionID, actor, typ *string
	var adata []byte
	var at *time.Time
	err := r.Scan(&n.NotificationID, &n.EventID, &n.EventType, &n.ProjectID, &n.Title, &n.Body, &n.Data, &n.Severity,
		&n.ReadAt, &n.ArchivedAt, &n.CreatedAt, &n.Shared, &actionID, &actor, &typ, &adata, &at)
	if err != nil {
		return n, err
	}
	switch {
	case n.ArchivedAt != nil:
		n.Status = StatusArchived
	case n.ReadAt != nil:
		n.Status = StatusRead
	default:
		n.Status = StatusUnread
	}
	n.Actionable = n.Shared && actionID == nil
	if actionID != nil {
		n.HandledBy = &Handled{ActionID: *actionID, UserID: *actor, Type: *typ, At: *at}
		if len(adata) > 0 && string(adata) != "{}" {
			n.HandledBy.Data = adata
		}
	}
	return n, nil
}

// change is a counter change of one user's project: delta unread.
type change struct {
	user, project string
	delta         int
}

// applyCounters adds each change to its counter, in (user, project)
// order so that concurrent transactions never deadlock on them. A counter
// never goes below zero (a drifted one is repaired by `herald counters
// repair`).
func applyCounters(ctx context.Context, tx pgx.Tx, tenant string, changes []change) error {
	sum := map[[2]string]int{}
	for _, c := range changes {
		sum[[2]string{c.user, c.project}] += c.delta
	}
	keys := make([][2]string, 0, len(sum))
	for k, d := range sum {
		if d != 0 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		_, err := tx.Exec(ctx, `INSERT INTO notification_counters (tenant_id, user_id, project_id, unread) VALUES ($1, $2, $3, greatest($4, 0))
			ON CONFLICT (tenant_id, user_id, project_id) DO UPDATE SET unread = greatest(notification_counters.unread + $4, 0)`,
			tenant, k[0], k[1], sum[k])
		if err != nil {
			return fmt.Errorf("counter: %w", err)
		}
	}
	return nil
}

// touched is who a state change concerns: their views and counters moved.
type touched struct {
	users   map[string]bool
	changed []string // notification ids whose state changed
}

func newTouched() *touched { return &touched{users: map[string]bool{}} }

// readShared marks read, for every sharer, the notifications of the
// tenant sharing key, and returns the counter changes. It locks them in
// id order first.
func readShared(ctx context.Context, tx pgx.Tx, tenant, key string, t *touched) ([]change, error) {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM notifications WHERE tenant_id = $1 AND share_key = $2
		ORDER BY notification_id FOR UPDATE`, tenant, key); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, `UPDATE notifications SET read_at = now()
		WHERE tenant_id = $1 AND share_key = $2 AND read_at IS NULL
		RETURNING notification_id::text, user_id, project_id, archived_at IS NULL`, tenant, key)
	if err != nil {
		return nil, err
	}
	return collectChanges(rows, -1, t)
}

// collectChanges reads (id, user, project, counted) rows into counter
// changes of delta for the counted ones.
func collectChanges(rows pgx.Rows, delta int, t *touched) ([]change, error) {
	var out []change
	for rows.Next() {
		var id, user, project string
		var counted bool
		if err := rows.Scan(&id, &user, &project, &counted); err != nil {
			rows.Close()
			return nil, err
		}
		t.users[user] = true
		t.changed = append(t.changed, id)
		if counted {
			out = append(out, change{user, project, delta})
		}
	}
	rows.Close()
	return out, rows.Err()
}

// errNotFound is a notification the user does not have.
var errNotFound = errors.New("no such notification")

// target is the user's notification a state change is about.
type target struct {
	shareKey  *string
	eventID   string
	eventType string
	projectID string
}

// ownRow reads the user's notification id, or errNotFound (another
// user's or tenant's id, or a malformed one). It takes no lock: the
// statements that change rows lock them, shared rows always in (share
// key, id) order, so that concurrent changes of the same rows never wait
// on each other in a cycle.
func ownRow(ctx context.Context, tx pgx.Tx, tenant, user, id string) (target, error) {
	var t target
	err := tx.QueryRow(ctx, `SELECT share_key, event_id, event_type, project_id FROM notifications
		WHERE tenant_id = $1 AND user_id = $2 AND notification_id = $3::uuid`, tenant, user, id).
		Scan(&t.shareKey, &t.eventID, &t.eventType, &t.projectID)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, errNotFound
	}
	return t, err
}

// Ops are the user's state changes.
const (
	OpRead      = "read"
	OpUnread    = "unread"
	OpArchive   = "archive"
	OpUnarchive = "unarchive"
)

// transition applies op to the user's notification id and its counters in
// tx, and returns who it touched.
func transition(ctx context.Context, tx pgx.Tx, tenant, user, id, op string) (*touched, error) {
	t := newTouched()
	own, err := ownRow(ctx, tx, tenant, user, id)
	if err != nil {
		return nil, err
	}
	var changes []change
	if op == OpRead && own.shareKey != nil {
		changes, err = readShared(ctx, tx, tenant, *own.shareKey, t)
	} else {
		// Each update changes the row only from the opposite state, and
		// says whether the row counts as unread on the side it left or
		// entered.
		q := map[string]struct {
			sql   string
			delta int
		}{
			OpRead:      {`UPDATE notifications SET read_at = now() WHERE notification_id = $1::uuid AND read_at IS NULL RETURNING notification_id::text, user_id, project_id, archived_at IS NULL`, -1},
			OpUnread:    {`UPDATE notifications SET read_at = NULL WHERE notification_id = $1::uuid AND read_at IS NOT NULL RETURNING notification_id::text, user_id, project_id, archived_at IS NULL`, +1},
			OpArchive:   {`UPDATE notifications SET archived_at = now() WHERE notification_id = $1::uuid AND archived_at IS NULL RETURNING notification_id::text, user_id, project_id, read_at IS NULL`, -1},
			OpUnarchive: {`UPDATE notifications SET archived_at = NULL WHERE notification_id = $1::uuid AND archived_at IS NOT NULL RETURNING notification_id::text, user_id, project_id, read_at IS NULL`, +1},
		}[op]
		if q.sql == "" {
			return nil, fmt.Errorf("unknown operation %q", op)
		}
		rows, err := tx.Query(ctx, q.sql, id)
		if err != nil {
			return nil, err
		}
		changes, err = collectChanges(rows, q.delta, t)
		if err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	t.users[user] = true
	if op == OpRead {
		if err := cancelEscalations(ctx, tx, tenant, t); err != nil {
			return nil, err
		}
	}
	return t, applyCounters(ctx, tx, tenant, changes)
}

// cancelEscalations cancels, in the transaction of a read, the waiting
// escalations (the rule's escalate blocks) of the notifications it marked
// read: for a shared notification that is every sharer's, since one read
// is a read for all. A read that changed nothing (already read) cancels
// nothing: the read that did cancelled them.
func cancelEscalations(ctx context.Context, tx pgx.Tx, tenant string, t *touched) error {
	_, err := store.CancelEscalationsRead(ctx, tx, tenant, t.changed)
	return err
}

// readAll marks every unread, unarchived notification of the user (in
// project, when set) read, spreading shared reads to their sharers. The
// shared ones go first, key by key, then the user's own rows in id order:
// the lock order every change keeps.
func readAll(ctx context.Context, tx pgx.Tx, tenant, user, project string) (*touched, error) {
	t := newTouched()
	t.users[user] = true
	rows, err := tx.Query(ctx, `SELECT DISTINCT share_key FROM notifications
		WHERE tenant_id = $1 AND user_id = $2 AND ($3 = '' OR project_id = $3) AND read_at IS NULL AND archived_at IS NULL
		  AND share_key IS NOT NULL ORDER BY share_key`, tenant, user, project)
	if err != nil {
		return nil, err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var changes []change
	for _, k := range keys {
		c, err := readShared(ctx, tx, tenant, k, t)
		if err != nil {
			return nil, err
		}
		changes = append(changes, c...)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM notifications
		WHERE tenant_id = $1 AND user_id = $2 AND ($3 = '' OR project_id = $3) AND read_at IS NULL AND archived_at IS NULL
		ORDER BY notification_id FOR UPDATE`, tenant, user, project); err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, `UPDATE notifications SET read_at = now()
		WHERE tenant_id = $1 AND user_id = $2 AND ($3 = '' OR project_id = $3) AND read_at IS NULL AND archived_at IS NULL
		RETURNING notification_id::text, user_id, project_id, true`, tenant, user, project)
	if err != nil {
		return nil, err
	}
	c, err := collectChanges(rows, -1, t)
	if err != nil {
		return nil, err
	}
	if err := cancelEscalations(ctx, tx, tenant, t); err != nil {
		return nil, err
	}
	return t, applyCounters(ctx, tx, tenant, append(changes, c...))
}

// inUserTx runs fn in a transaction bound to the user's tenant and
// project, again (up to three times) when it deadlocked with a concurrent
// change of the same rows.
func inUserTx(ctx context.Context, pool *pgxpool.Pool, tenant, project string, fn func(pgx.Tx) error) error {
	return store.RetryRaces(func() error { return store.InTenant(ctx, pool, tenant, project, fn) })
}

// likePattern escapes s for ILIKE and wraps it in %.
func likePattern(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(s) + "%"
}
