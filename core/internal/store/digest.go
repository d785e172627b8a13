package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/channel"
)

// HoldDigest is the hold of a WAITING delivery that is an item of an open
// digest window (migrations 0057, 0065).
const HoldDigest = "digest"

// DigestEventPrefix starts the event_id of a digest delivery: the digest
// of window W is delivery event_id "digest:W".
const DigestEventPrefix = "digest:"

// DigestItem is one item the relay counts into a digest window.
type DigestItem struct {
	TenantID, UserID, Channel, EventType string
	// Key is the rendered digest key (never empty).
	Key string
	// Window is how long a new window stays open (0: until ClosesAt or
	// MaxItems).
	Window time.Duration
	// ClosesAt, when set, is when a new window closes (a schedule's next
	// occurrence in the recipient's zone, or the end of a throttle's
	// window); Window is then ignored. An item counted into an open
	// window keeps that window's close.
	ClosesAt time.Time
	// MaxItems closes a window as soon as it holds this many.
	MaxItems int
}

func (d DigestItem) windowKey() string {
	return d.TenantID + "\x00" + d.UserID + "\x00" + d.Channel + "\x00" + d.EventType + "\x00" + d.Key
}

// OpenDigestWindows counts each item into the open window of its tenant,
// user, channel, event type and key, in tx, opening one where there is
// none, and returns each item's window id and the time it closes. A window
// that reaches its max_items turns FULL (due at once) and the next item
// opens a new one. Windows are written in key order, a round per item of
// the same key, so that concurrent relays never deadlock on them; a window
// being flushed meanwhile is waited for, then a new one is opened.
func OpenDigestWindows(ctx context.Context, tx pgx.Tx, items []DigestItem) ([]string, []time.Time, error) {
	ids, closes := make([]string, len(items)), make([]time.Time, len(items))
	// rounds[k] holds the k-th item of every key.
	var rounds [][]int
	seen := map[string]int{}
	for i, it := range items {
		k := it.windowKey()
		r := seen[k]
		seen[k] = r + 1
		if r == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[r] = append(rounds[r], i)
	}
	for _, round := range rounds {
		slices.SortFunc(round, func(a, b int) int { return strings.Compare(items[a].windowKey(), items[b].windowKey()) })
		n := len(round)
		tenants, users, chans, types, keys := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		maxes, windows, ats := make([]int32, n), make([]float64, n), make([]pgtype.Timestamptz, n)
		byKey := make(map[string]int, n)
		for j, i := range round {
			it := items[i]
			tenants[j], users[j], chans[j], types[j], keys[j] = it.TenantID, it.UserID, it.Channel, it.EventType, it.Key
			maxes[j], windows[j] = int32(it.MaxItems), it.Window.Seconds()
			ats[j] = pgtype.Timestamptz{Time: it.ClosesAt, Valid: !it.ClosesAt.IsZero()}
			byKey[it.windowKey()] = i
		}
		rows, err := tx.Query(ctx, `INSERT INTO digest_windows AS w (tenant_id, user_id, channel, event_type, digest_key, items, max_items,
				status, closes_at)
			SELECT x.t, x.u, x.c, x.e, x.k, 1, x.m, CASE WHEN x.m <= 1 THEN 'FULL' ELSE 'OPEN' END,
				CASE WHEN x.m <= 1 THEN now() WHEN x.a IS NOT NULL THEN x.a WHEN x.s > 0 THEN now() + make_interval(secs => x.s) ELSE 'infinity' END
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int[], $7::float8[], $8::timestamptz[]) AS x(t, u, c, e, k, m, s, a)
			ORDER BY 1, 2, 3, 4, 5
			ON CONFLICT (tenant_id, user_id, channel, event_type, digest_key) WHERE status = 'OPEN'
			DO UPDATE SET items = w.items + 1,
				status = CASE WHEN w.items + 1 >= w.max_items THEN 'FULL' ELSE 'OPEN' END,
				closes_at = CASE WHEN w.items + 1 >= w.max_items THEN least(w.closes_at, now()) ELSE w.closes_at END
			RETURNING window_id::text, tenant_id, user_id, channel, event_type, digest_key,
				least(closes_at, now() + interval '100 years')`,
			tenants, users, chans, types, keys, maxes, windows, ats)
		if err != nil {
			return nil, nil, fmt.Errorf("open digest windows: %w", err)
		}
		for rows.Next() {
			var id string
			var it DigestItem
			var at time.Time
			if err := rows.Scan(&id, &it.TenantID, &it.UserID, &it.Channel, &it.EventType, &it.Key, &at); err != nil {
				rows.Close()
				return nil, nil, fmt.Errorf("open digest windows: %w", err)
			}
			if i, ok := byKey[it.windowKey()]; ok {
				ids[i], closes[i] = id, at
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, fmt.Errorf("open digest windows: %w", err)
		}
	}
	for i, id := range ids {
		if id == "" {
			return nil, nil, fmt.Errorf("open digest windows: no window for item %d", i)
		}
	}
	return ids, closes, nil
}

// DueWindow is a digest window the flush claimed.
type DueWindow struct {
	TenantID, WindowID, UserID, Channel, EventType, Key string
	// OpenedAt is when its first item came; ClosesAt when it fell due
	// (its window ended, or the item that filled it came).
	OpenedAt, ClosesAt time.Time
}

// WaitingItem is a digest item still WAITING in a claimed window.
type WaitingItem struct {
	DeliveryID, NotificationID, EventID, UserType, Severity string
	CreatedAt                                               time.Time
	BestEffort                                              bool
	MaxAttempts                                             int
	Recipient, Content                                      json.RawMessage
	TraceParent, TraceState                                 string
}

// DigestBuilder makes the digest delivery of a window from its items
// (oldest first, at least one): its content, or FAILED with LastError when
// it cannot be rendered. FlushDigests fills in the keys. For a window of
// channel.Inbox the content (sdk.Content's JSON: title, body, data) is the
// inbox row's, and is required even when the status is FAILED (the row is
// written anyway, so that no item is lost).
type DigestBuilder func(w DueWindow, items []WaitingItem) NewDelivery

// DigestInboxRow is the inbox row a flush wrote for a per_digest window.
type DigestInboxRow struct {
	TenantID, UserID, NotificationID, EventType, Severity, Title, Body string
	Data                                                               json.RawMessage
}

// FlushResult counts what one FlushDigests call did.
type FlushResult struct {
	// Windows is the number of due windows claimed (and deleted).
	Windows int
	// Digests is the number of digest deliveries written.
	Digests int
	// Items is the number of items marked DIGESTED.
	Items int
	// Flushed is each claimed window with what became of it.
	Flushed []FlushedWindow
	// Inbox is the inbox rows written for per_digest windows (their
	// windows are counted in Digests too).
	Inbox []DigestInboxRow
}

// FlushedWindow is a window a committed flush removed: Status is its
// digest delivery's (PENDING, or FAILED when it could not be rendered),
// empty when every item had been cancelled and nothing was written.
type FlushedWindow struct {
	Channel, Status string
	ClosesAt        time.Time
}

// FlushDigests flushes up to limit due digest windows in one transaction:
// it claims them and deletes them (FOR UPDATE SKIP LOCKED: another daemon
// or worker flushes others), marks their items still WAITING DIGESTED and
// takes them in the same statement (a cancelled item is left out; a window
// whose items were all cancelled sends nothing), and writes one digest
// delivery per window through build (PENDING, event_id "digest:" and the
// window id, the id each item's last_error names). Four round trips
// whatever the batch: claim, items, digests, commit. A crash anywhere rolls
// it all back: nothing is lost or sent twice.
func FlushDigests(ctx context.Context, pool *pgxpool.Pool, limit int, build DigestBuilder) (FlushResult, error) {
	var res FlushResult
	tx, err := pool.Begin(ctx)
	if err != nil {
		return res, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// The windows go in the claiming statement: the relay's next item for
	// one of them waits for this transaction, then opens a new window.
	rows, err := tx.Query(ctx, `WITH due AS (
			SELECT tenant_id, window_id FROM digest_windows WHERE closes_at <= now()
			ORDER BY closes_at LIMIT $1 FOR UPDATE SKIP LOCKED)
		DELETE FROM digest_windows w USING due
		WHERE w.tenant_id = due.tenant_id AND w.window_id = due.window_id
		RETURNING w.tenant_id, w.window_id::text, w.user_id, w.channel, w.event_type, w.digest_key, w.opened_at, w.closes_at`, limit)
	if err != nil {
		return res, fmt.Errorf("claim digest windows: %w", err)
	}
	wins, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DueWindow, error) {
		var w DueWindow
		return w, r.Scan(&w.TenantID, &w.WindowID, &w.UserID, &w.Channel, &w.EventType, &w.Key, &w.OpenedAt, &w.ClosesAt)
	})
	if err != nil {
		return res, fmt.Errorf("claim digest windows: %w", err)
	}
	if len(wins) == 0 {
		return res, nil
	}
	slices.SortFunc(wins, func(a, b DueWindow) int {
		if c := a.ClosesAt.Compare(b.ClosesAt); c != 0 {
			return c
		}
		return strings.Compare(a.WindowID, b.WindowID)
	})
	// Each window's digest id is known before its items are read, so that
	// one statement marks them DIGESTED naming it and returns them: the
	// items of windows this transaction holds, through the digest-items
	// index. An item cancelled meanwhile is no longer WAITING and stays
	// out; one being cancelled is waited for.
	// An item a throttle folded keeps why it waited ("throttled: …"),
	// followed by where it went; the others say where they went.
	// The items are locked first, in delivery_id order, and only then
	// updated: a cancel (herald_cancel, migration 0060) locks an event's
	// deliveries in that order too, one by one, so the two never wait for
	// each other in a cycle. Updated in the join's order instead, a flush
	// holding one item of an event and wanting another deadlocked with a
	// cancel of that event holding the second and wanting the first
	// (40P01), and the cancel could be the one PostgreSQL aborted.
	winIDs, digestIDs, where := make([]string, len(wins)), make([]string, len(wins)), make([]string, len(wins))
	for i, w := range wins {
		id, err := uuid.NewV7()
		if err != nil {
			return res, err
		}
		winIDs[i], digestIDs[i] = w.WindowID, id.String()
		where[i] = "sent in digest delivery " + digestIDs[i]
		if w.Channel == channel.Inbox {
			where[i] = "shown in digest inbox notification " + digestIDs[i]
		}
	}
	rows, err = tx.Query(ctx, `WITH locked AS (
			SELECT d.delivery_id, d.created_at, x.digest
			FROM deliveries d JOIN unnest($1::uuid[], $2::text[]) AS x(win, digest) ON d.digest_window = x.win
			WHERE d.queue = 'WAITING' AND d.status = 'WAITING' AND d.hold = 'digest'
			ORDER BY d.delivery_id FOR UPDATE OF d)
		UPDATE deliveries d SET status = 'DIGESTED', updated_at = now(),
			last_error = CASE WHEN d.last_error LIKE 'throttled:%' THEN d.last_error || '; ' ELSE '' END || x.digest
		FROM locked x
		WHERE d.delivery_id = x.delivery_id AND d.created_at = x.created_at
		RETURNING d.digest_window::text, d.delivery_id::text, d.created_at, d.notification_id::text, d.event_id, d.user_type,
			d.severity, d.best_effort, d.max_attempts, d.recipient, d.content, coalesce(d.traceparent, ''), coalesce(d.tracestate, '')`,
		winIDs, where)
	if err != nil {
		return res, fmt.Errorf("take digest items: %w", err)
	}
	items := map[string][]WaitingItem{}
	for rows.Next() {
		var win string
		var it WaitingItem
		if err := rows.Scan(&win, &it.DeliveryID, &it.CreatedAt, &it.NotificationID, &it.EventID, &it.UserType, &it.Severity,
			// As bytes: a json.RawMessage target would have pgx validate
			// each document again.
			&it.BestEffort, &it.MaxAttempts, (*[]byte)(&it.Recipient), (*[]byte)(&it.Content), &it.TraceParent, &it.TraceState); err != nil {
			rows.Close()
			return res, fmt.Errorf("take digest items: %w", err)
		}
		items[win] = append(items[win], it)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("take digest items: %w", err)
	}
	var (
		digests []NewDelivery
		notes   []NewNotification
		inbox   []DigestInboxRow
	)
	n := 0
	now := time.Now()
	flushed := make([]FlushedWindow, len(wins))
	for i, w := range wins {
		flushed[i] = FlushedWindow{Channel: w.Channel, ClosesAt: w.ClosesAt}
		its := items[w.WindowID]
		if len(its) == 0 {
			continue // every item was cancelled: nothing to send
		}
		// Oldest first, as they came.
		slices.SortFunc(its, func(a, b WaitingItem) int {
			if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
				return c
			}
			return strings.Compare(a.DeliveryID, b.DeliveryID)
		})
		d := build(w, its)
		last := its[len(its)-1]
		if w.Channel == channel.Inbox {
			note, row, err := digestNote(w, its, d, digestIDs[i], now)
			if err != nil {
				return res, err
			}
			flushed[i].Status = d.Status
			notes, inbox = append(notes, note), append(inbox, row)
			n += len(its)
			continue
		}
		d.ID, d.CreatedAt = digestIDs[i], now
		d.TenantID, d.UserID, d.Channel, d.EventType, d.DigestWindow = w.TenantID, w.UserID, w.Channel, w.EventType, w.WindowID
		d.EventID, d.NotificationID, d.UserType, d.Severity = DigestEventPrefix+w.WindowID, last.NotificationID, last.UserType, last.Severity
		d.BestEffort, d.MaxAttempts, d.NextAttemptAt = last.BestEffort, last.MaxAttempts, now
		if d.Recipient == nil {
			d.Recipient = last.Recipient
		}
		if d.Status == "" {
			d.Status = StatusPending
		}
		d.TraceParent, d.TraceState = last.TraceParent, last.TraceState
		flushed[i].Status = d.Status
		digests = append(digests, d)
		n += len(its)
	}
	if len(notes) > 0 {
		// The inbox rows of per_digest windows, and the unread counters,
		// in this transaction: the row exists exactly when its window is
		// gone and its items are DIGESTED.
		if _, _, err := InsertFanout(ctx, tx, notes, nil); err != nil {
			return res, fmt.Errorf("insert digest inbox rows: %w", err)
		}
	}
	if len(digests) > 0 {
		dids, nids := make([]pgtype.UUID, len(digests)), make([]pgtype.UUID, len(digests))
		for i, d := range digests {
			dids[i], nids[i] = uuidOrNull(d.ID), uuidOrNull(d.NotificationID)
		}
		if err := insertDeliveries(ctx, tx, digests, dids, nids, now); err != nil {
			return res, fmt.Errorf("insert digest deliveries: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("commit digest flush: %w", err)
	}
	return FlushResult{Windows: len(wins), Digests: len(digests) + len(notes), Items: n, Flushed: flushed, Inbox: inbox}, nil
}

// digestNote is the inbox row of a per_digest window, from the content d
// its builder rendered: event_id "digest:" and the window id, filed under
// the project its newest item's event came with, created now.
func digestNote(w DueWindow, items []WaitingItem, d NewDelivery, id string, now time.Time) (NewNotification, DigestInboxRow, error) {
	var c struct {
		Subject string          `json:"subject"`
		Title   string          `json:"title"`
		Body    string          `json:"body"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(d.Content, &c); err != nil {
		return NewNotification{}, DigestInboxRow{}, fmt.Errorf("digest inbox row of window %s: content: %w", w.WindowID, err)
	}
	last := items[len(items)-1]
	var item struct {
		ProjectID string `json:"project_id"`
	}
	if err := json.Unmarshal(last.Content, &item); err != nil {
		return NewNotification{}, DigestInboxRow{}, fmt.Errorf("digest inbox row of window %s: item %s: %w", w.WindowID, last.DeliveryID, err)
	}
	if c.Title == "" {
		c.Title = c.Subject
	}
	n := NewNotification{ID: id, TenantID: w.TenantID, ProjectID: item.ProjectID, EventID: DigestEventPrefix + w.WindowID,
		UserID: w.UserID, EventType: w.EventType, Title: c.Title, Body: c.Body, Data: c.Data, Severity: last.Severity, CreatedAt: now}
	return n, DigestInboxRow{TenantID: n.TenantID, UserID: n.UserID, NotificationID: id, EventType: n.EventType, Severity: n.Severity,
		Title: n.Title, Body: n.Body, Data: n.Data}, nil
}
