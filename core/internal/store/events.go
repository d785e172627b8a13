package store

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/google/uuid"
	"sort"
	"strings"
	"time"

	"github.com/heraldhq/herald/sdk/producer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// EventRow is a claimed outbox event.
type EventRow struct {
	ID            int64
	TenantID      string
	ProjectID     string
	EventID       string
	Type          string
	AggregateType string
	AggregateID   string
	Payload       json.RawMessage
	Attempts      int
	CreatedAt     time.Time
	// TraceParent and TraceState are the W3C trace context the event came
	// with ("": none).
	TraceParent, TraceState string
}

// MaxPayloadBytes is the largest payload the relay loads: the event
// contract's limit (migration 0023, sdk/producer.MaxPayloadBytes), measured
// on the payload as stored (jsonb's text). A larger one can only be older
// than the contract or written by a superuser with the trigger off.
const MaxPayloadBytes = producer.MaxPayloadBytes

// Claim is what one ClaimEvents took.
type Claim struct {
	// Events are the claimed events, marked PROCESSED in tx, by id.
	Events []EventRow
	// Oversize are the events whose payload was over MaxPayloadBytes:
	// marked FAILED in tx, never loaded.
	Oversize []OversizeEvent
	// Full reports that more events were due than this claim took (the
	// count or the byte budget ran out).
	Full bool
}

// OversizeEvent is an event ClaimEvents failed for its payload's size.
type OversizeEvent struct {
	ID                int64
	TenantID, EventID string
	Type              string
	Bytes             int64
}

// ClaimEvents takes up to limit due PENDING events in tx, skipping events
// other relays hold, oldest first, whose payloads (as stored: jsonb's text)
// add up to at most budget bytes — always at least one, so that an event
// larger than the budget still goes alone — and marks them PROCESSED in
// the same transaction (one row write per event): the relay's transaction
// commits them PROCESSED with their notifications and deliveries, or rolls
// back. It reads the payloads' sizes first and loads only the payloads it
// takes. An event over MaxPayloadBytes among the due ones is marked FAILED
// at once, with last_error naming the field, and never loaded. An event
// the relay cannot process goes back with FailEventAttempt in the same
// transaction. Attempts is the count before this one.
func ClaimEvents(ctx context.Context, tx pgx.Tx, limit int, budget int64) (Claim, error) {
	var c Claim
	rows, err := tx.Query(ctx, `SELECT id, octet_length(payload::text) FROM event_outbox
		WHERE status = 'PENDING' AND available_at <= now()
		ORDER BY available_at, id LIMIT $1 FOR UPDATE SKIP LOCKED`, limit)
	if err != nil {
		return c, fmt.Errorf("claim events: %w", err)
	}
	type due struct{ id, size int64 }
	dues, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (due, error) {
		var d due
		err := r.Scan(&d.id, &d.size)
		return d, err
	})
	if err != nil {
		return c, fmt.Errorf("claim events: %w", err)
	}
	c.Full = len(dues) >= limit
	var take, over []int64
	var sum int64
	stopped := false
	for _, d := range dues {
		switch {
		case d.size > MaxPayloadBytes:
			over = append(over, d.id)
		case stopped:
		case len(take) > 0 && sum+d.size > budget:
			// The rest stay PENDING (locked by this transaction until it
			// ends) for the next claim.
			stopped, c.Full = true, true
		default:
			take, sum = append(take, d.id), sum+d.size
		}
	}
	if len(over) > 0 {
		rows, err := tx.Query(ctx, `UPDATE event_outbox SET status = 'FAILED', attempts = attempts + 1, processed_at = NULL,
				last_error = format('event_outbox.payload: larger than %s bytes (%s bytes as stored); the relay does not load it', $2::int, octet_length(payload::text))
			WHERE id = ANY($1) RETURNING id, tenant_id, event_id, event_type, octet_length(payload::text)`, over, MaxPayloadBytes)
		if err != nil {
			return c, fmt.Errorf("fail oversize events: %w", err)
		}
		c.Oversize, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (OversizeEvent, error) {
			var o OversizeEvent
			err := r.Scan(&o.ID, &o.TenantID, &o.EventID, &o.Type, &o.Bytes)
			return o, err
		})
		if err != nil {
			return c, fmt.Errorf("fail oversize events: %w", err)
		}
	}
	if len(take) == 0 {
		return c, nil
	}
	rows, err = tx.Query(ctx, `UPDATE event_outbox e SET status = 'PROCESSED', processed_at = now(), attempts = e.attempts + 1, last_error = ''
		WHERE e.id = ANY($1)
		RETURNING e.id, e.tenant_id, e.project_id, e.event_id, e.event_type, e.aggregate_type, e.aggregate_id, e.payload, e.attempts - 1, e.created_at,
			COALESCE(e.traceparent, ''), COALESCE(e.tracestate, '')`, take)
	if err != nil {
		return c, fmt.Errorf("claim events: %w", err)
	}
	c.Events, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (EventRow, error) {
		var e EventRow
		err := r.Scan(&e.ID, &e.TenantID, &e.ProjectID, &e.EventID, &e.Type, &e.AggregateType, &e.AggregateID, &e.Payload, &e.Attempts, &e.CreatedAt, &e.TraceParent, &e.TraceState)
		return e, err
	})
	if err != nil {
		return c, fmt.Errorf("claim events: %w", err)
	}
	sort.Slice(c.Events, func(i, j int) bool { return c.Events[i].ID < c.Events[j].ID })
	return c, nil
}

// FailEvents marks events claimed in tx FAILED at once, each with its
// reason (last_error): they break the event contract or their type's
// rules, which no retry mends.
func FailEvents(ctx context.Context, tx pgx.Tx, ids []int64, reasons []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `UPDATE event_outbox e SET status = 'FAILED', last_error = f.reason, processed_at = NULL
		FROM unnest($1::bigint[], $2::text[]) AS f(id, reason) WHERE e.id = f.id AND e.status = 'PROCESSED'`, ids, reasons)
	if err != nil {
		return fmt.Errorf("fail events: %w", err)
	}
	return nil
}

// FailEventAttempt records a failed processing attempt of an event claimed
// in tx: it becomes FAILED once its attempts reach maxAttempts, otherwise
// PENDING again, due after retryIn. It reports whether the event is now
// FAILED.
func FailEventAttempt(ctx context.Context, tx pgx.Tx, id int64, reason string, maxAttempts int, retryIn time.Duration) (bool, error) {
	var status string
	err := tx.QueryRow(ctx, `UPDATE event_outbox SET last_error = $2, processed_at = NULL,
			status = CASE WHEN attempts >= $3 THEN 'FAILED' ELSE 'PENDING' END,
			available_at = now() + make_interval(secs => $4)
		WHERE id = $1 AND status = 'PROCESSED' RETURNING status`, id, reason, maxAttempts, retryIn.Seconds()).Scan(&status)
	if err != nil {
		return false, fmt.Errorf("record event failure: %w", err)
	}
	return status == "FAILED", nil
}

// NewNotification is an inbox row the relay writes.
type NewNotification struct {
	ID        string
	TenantID  string
	ProjectID string
	EventID   string
	UserID    string
	EventType string
	Title     string
	Body      string
	Data      json.RawMessage
	Severity  string
	// ShareKey groups first-to-act notifications ("" for none).
	ShareKey string
	// CreatedAt is the creation time of the notification's event: the
	// partition key of notifications, and part of the unique key that
	// makes a retried fan-out write nothing (migration 0019). Required.
	CreatedAt time.Time
}

// NewDelivery is a delivery row the relay writes.
type NewDelivery struct {
	// ID and CreatedAt are set by InsertFanout: CreatedAt, the partition
	// key of deliveries (migration 0021), is the CreatedAt of the
	// delivery's notification (its event's creation time), so that a
	// retried fan-out carries the same key.
	ID             string
	CreatedAt      time.Time
	NotificationID string
	TenantID       string
	EventID        string
	EventType      string
	UserID         string
	UserType       string
	Channel        string
	Severity       string
	// Status is PENDING, DEFERRED, WAITING (an escalation: Hold and
	// EscalateUnless say so), PUBLISHED for a delivery the relay hands to
	// the broker itself (see InsertHandoff), or FAILED for one whose
	// content could not be rendered (LastError says why).
	Status        string
	LastError     string
	BestEffort    bool
	MaxAttempts   int
	NextAttemptAt time.Time
	Recipient     json.RawMessage
	Content       json.RawMessage
	// TraceParent and TraceState are the W3C trace context the delivery
	// continues: the relay's span for its event ("": none).
	TraceParent, TraceState string
	// Place marks a post to a place (InsertPlaceDeliveries): UserID holds
	// the place's group key, UserType is empty, and NotificationID names
	// the post alone (a place has no inbox row).
	Place bool
	// Hold is what a WAITING delivery waits for (HoldEscalation; "" for
	// every other status).
	Hold string
	// EscalateUnless is what cancels an escalation (read, acted); nil for
	// a delivery that is not one.
	EscalateUnless []string
	// DigestWindow is the digest window of a digest item, and of the
	// digest delivery that sends it ("": none).
	DigestWindow string
	// DigestKey is a digest item's rendered key, which OpenDigestWindows
	// counts it under (not stored in the row).
	DigestKey string
	// Throttle, when set, is the throttle the delivery counts against
	// (not stored in the row).
	Throttle *ThrottleItem
}

// InsertFanout writes notifications and their deliveries and bumps unread
// counters, all in tx. A notification that already exists (same event and
// user) is skipped together with its deliveries, so running it twice for an
// event writes nothing the second time. It returns the number of
// notifications written and the deliveries written, with their ids.
func InsertFanout(ctx context.Context, tx pgx.Tx, notes []NewNotification, dels []NewDelivery) (int, []NewDelivery, error) {
	if len(notes) == 0 {
		return 0, nil, nil
	}
	n := len(notes)
	ids, tenants, projects, events, users, types, titles, bodies, datas, sevs, shares :=
		make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]*string, n)
	created := make([]time.Time, n)
	createdOf := make(map[string]time.Time, n)
	for i, nt := range notes {
		// Not now(): a retried fan-out must carry the same key.
		if nt.CreatedAt.IsZero() {
			return 0, nil, fmt.Errorf("insert notifications: notification %s of event %s has no CreatedAt (the event's time)", nt.ID, nt.EventID)
		}
		created[i] = nt.CreatedAt
		createdOf[nt.ID] = nt.CreatedAt
		ids[i], tenants[i], events[i], users[i], types[i] = nt.ID, nt.TenantID, nt.EventID, nt.UserID, nt.EventType
		projects[i] = nt.ProjectID
		if projects[i] == "" {
			projects[i] = DefaultProject
		}
		titles[i], bodies[i], sevs[i] = nt.Title, nt.Body, nt.Severity
		datas[i] = "{}"
		if len(nt.Data) > 0 {
			datas[i] = string(nt.Data)
		}
		if nt.ShareKey != "" {
			s := nt.ShareKey
			shares[i] = &s
		}
	}
	// The unread counters of the notifications actually inserted are bumped
	// by the same statement, in (tenant, user, project) order so that
	// concurrent relays never deadlock on them.
	rows, err := tx.Query(ctx, `WITH ins AS (
			INSERT INTO notifications (notification_id, tenant_id, event_id, user_id, event_type, title, body, data, severity, share_key, project_id,
				created_at)
			SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::jsonb[], $9::text[], $10::text[], $11::text[],
				$12::timestamptz[])
			ON CONFLICT (tenant_id, event_id, user_id, created_at) DO NOTHING
			RETURNING notification_id, tenant_id, user_id, project_id
		), bump AS (
			INSERT INTO notification_counters (tenant_id, user_id, project_id, unread)
			SELECT tenant_id, user_id, project_id, count(*) FROM ins GROUP BY tenant_id, user_id, project_id ORDER BY tenant_id, user_id, project_id
			ON CONFLICT (tenant_id, user_id, project_id) DO UPDATE SET unread = notification_counters.unread + EXCLUDED.unread
		)
		SELECT notification_id::text, row_security_active('deliveries') FROM ins`,
		ids, tenants, events, users, types, titles, bodies, datas, sevs, shares, projects, created)
	if err != nil {
		return 0, nil, fmt.Errorf("insert notifications: %w", err)
	}
	inserted := map[string]bool{}
	// rls tells whether row-level security binds this session on
	// deliveries: PostgreSQL refuses COPY FROM then, and the rows go in by
	// INSERT. A worker role with BYPASSRLS (`herald db roles` as a
	// superuser) keeps COPY.
	var rls bool
	for rows.Next() {
		var id string
		if err := rows.Scan(&id, &rls); err != nil {
			rows.Close()
			return 0, nil, fmt.Errorf("insert notifications: %w", err)
		}
		inserted[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("insert notifications: %w", err)
	}
	keep := make([]NewDelivery, 0, len(dels))
	for _, d := range dels {
		if inserted[d.NotificationID] {
			keep = append(keep, d)
		}
	}
	if len(keep) == 0 {
		return len(inserted), nil, nil
	}
	// COPY where allowed: a delivery row exists only under its
	// notification, and keep holds deliveries of notifications this
	// transaction created, so no row can collide with an earlier one (the
	// unique key would abort the batch if one did).
	now := time.Now()
	dids, nids := make([]pgtype.UUID, len(keep)), make([]pgtype.UUID, len(keep))
	for i := range keep {
		d := &keep[i]
		id, err := uuid.NewV7() // time-ordered: primary-key inserts stay at the index's right edge
		if err != nil {
			return 0, nil, err
		}
		d.ID, d.CreatedAt = id.String(), createdOf[d.NotificationID]
		nid, err := uuid.Parse(d.NotificationID)
		if err != nil {
			return 0, nil, fmt.Errorf("insert deliveries: notification id: %w", err)
		}
		dids[i], nids[i] = pgtype.UUID{Bytes: id, Valid: true}, pgtype.UUID{Bytes: nid, Valid: true}
	}
	if rls {
		err = insertDeliveries(ctx, tx, keep, dids, nids, now)
	} else {
		err = copyDeliveries(ctx, tx, keep, dids, nids, now)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("insert deliveries: %w", err)
	}
	return len(inserted), keep, nil
}

// deliveryColumns are the columns the relay writes.
var deliveryColumns = []string{"delivery_id", "notification_id", "tenant_id", "event_id",
	"event_type", "user_id", "user_type", "channel", "severity", "status", "best_effort", "max_attempts", "next_attempt_at",
	"recipient", "content", "last_error", "created_at", "updated_at", "traceparent", "tracestate", "hold", "escalate_unless", "digest_window"}

// copyDeliveries streams keep into COPY: each row's values are built when
// pgx asks for them, into one row reused for every delivery (pgx encodes a
// row before it asks for the next), so a batch of thousands of deliveries
// is not held a second time as rows of values.
func copyDeliveries(ctx context.Context, tx pgx.Tx, keep []NewDelivery, ids, nids []pgtype.UUID, now time.Time) error {
	row := make([]any, 0, len(deliveryColumns))
	src := pgx.CopyFromSlice(len(keep), func(i int) ([]any, error) {
		d := &keep[i]
		// pgtype values and []byte encode straight to binary; uuid.UUID and
		// json.RawMessage would take pgx's slower fallback paths.
		row = append(row[:0], ids[i], nids[i], d.TenantID, d.EventID,
			d.EventType, d.UserID, d.UserType, d.Channel, d.Severity, d.Status, d.BestEffort, int32(d.MaxAttempts),
			d.NextAttemptAt, jsonBytes(d.Recipient), jsonBytes(d.Content), d.LastError, d.CreatedAt, now,
			nullIfEmpty(d.TraceParent), nullIfEmpty(d.TraceState), nullIfEmpty(d.Hold), d.EscalateUnless, uuidOrNull(d.DigestWindow))
		return row, nil
	})
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"deliveries"}, deliveryColumns, src)
	return err
}

// insertDeliveries is copyDeliveries for sessions bound by row-level
// security: INSERTs of arrays, checked row by row by the policies, of at
// most insertChunk deliveries each. One statement for a whole relay batch
// (thousands of deliveries) had pgx build its parameters, and the message
// that carries them, at the batch's full size in the daemon's memory: the
// fan-out benchmark's daemon peaked at 191-204 MiB that way, against
// 104-110 MiB by COPY (2026-11-26).
func insertDeliveries(ctx context.Context, tx pgx.Tx, keep []NewDelivery, ids, nids []pgtype.UUID, now time.Time) error {
	for start := 0; start < len(keep); start += insertChunk {
		end := min(start+insertChunk, len(keep))
		if err := insertDeliveryRows(ctx, tx, keep[start:end], ids[start:end], nids[start:end], now); err != nil {
			return err
		}
	}
	return nil
}

// insertChunk bounds the deliveries of one INSERT of insertDeliveries.
const insertChunk = 500

// insertDeliveryRows writes keep with one INSERT of arrays.
func insertDeliveryRows(ctx context.Context, tx pgx.Tx, keep []NewDelivery, ids, nids []pgtype.UUID, now time.Time) error {
	n := len(keep)
	tenants, events, types, users, utypes, chans, sevs, stats := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	best, maxAtt, next, recips, contents, errs := make([]bool, n), make([]int32, n), make([]time.Time, n), make([]string, n), make([]string, n),
		make([]string, n)
	parents, states, created := make([]string, n), make([]string, n), make([]time.Time, n)
	holds, unless, windows := make([]string, n), make([]string, n), make([]string, n)
	for i := range keep {
		d := &keep[i]
		tenants[i], events[i], types[i], users[i], utypes[i], chans[i], sevs[i], stats[i] =
			d.TenantID, d.EventID, d.EventType, d.UserID, d.UserType, d.Channel, d.Severity, d.Status
		best[i], maxAtt[i], next[i], recips[i], contents[i] = d.BestEffort, int32(d.MaxAttempts), d.NextAttemptAt,
			jsonOr(d.Recipient), jsonOr(d.Content)
		errs[i] = d.LastError
		parents[i], states[i], created[i] = d.TraceParent, d.TraceState, d.CreatedAt
		holds[i], unless[i], windows[i] = d.Hold, strings.Join(d.EscalateUnless, ","), d.DigestWindow
	}
	_, err := tx.Exec(ctx, `INSERT INTO deliveries (`+strings.Join(deliveryColumns, ", ")+`)
		SELECT d.c1, d.c2, d.c3, d.c4, d.c5, d.c6, d.c7, d.c8, d.c9, d.c10, d.c11, d.c12, d.c13, d.c14, d.c15, d.c16,
			d.c19, $16::timestamptz, NULLIF(d.c17, ''), NULLIF(d.c18, ''), NULLIF(d.c20, ''), string_to_array(NULLIF(d.c21, ''), ','), NULLIF(d.c22, '')::uuid
		FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[],
			$6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::bool[], $12::int[], $13::timestamptz[],
			$14::jsonb[], $15::jsonb[], $17::text[], $18::text[], $19::text[], $20::timestamptz[], $21::text[], $22::text[], $23::text[])
			AS d(c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15, c16, c17, c18, c19, c20, c21, c22)`,
		ids, nids, tenants, events, types, users, utypes, chans, sevs, stats, best, maxAtt, next, recips, contents, now, errs,
		parents, states, created, holds, unless, windows)
	return err
}

// InsertPlaceDeliveries writes the posts of events to places, in tx: one
// row per (event, place, channel), each with its CreatedAt set (the
// event's time, as the deliveries' unique key needs). A post already
// written (a retried fan-out) is skipped by the unique key, so running it
// twice for an event writes nothing the second time. It returns the
// deliveries written, with their ids.
func InsertPlaceDeliveries(ctx context.Context, tx pgx.Tx, dels []NewDelivery) ([]NewDelivery, error) {
	if len(dels) == 0 {
		return nil, nil
	}
	n := len(dels)
	ids, nids := make([]pgtype.UUID, n), make([]pgtype.UUID, n)
	tenants, events, types, users, chans, sevs, stats, errs := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	best, maxAtt, next, recips, contents := make([]bool, n), make([]int32, n), make([]time.Time, n), make([]string, n), make([]string, n)
	parents, states, created := make([]string, n), make([]string, n), make([]time.Time, n)
	byID := make(map[string]int, n)
	for i := range dels {
		d := &dels[i]
		if d.CreatedAt.IsZero() {
			return nil, fmt.Errorf("insert place deliveries: post of event %s to %s has no CreatedAt (the event's time)", d.EventID, d.UserID)
		}
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		nid, err := uuid.Parse(d.NotificationID)
		if err != nil {
			return nil, fmt.Errorf("insert place deliveries: notification id: %w", err)
		}
		d.ID = id.String()
		byID[d.ID] = i
		ids[i], nids[i] = pgtype.UUID{Bytes: id, Valid: true}, pgtype.UUID{Bytes: nid, Valid: true}
		tenants[i], events[i], types[i], users[i], chans[i], sevs[i], stats[i] =
			d.TenantID, d.EventID, d.EventType, d.UserID, d.Channel, d.Severity, d.Status
		best[i], maxAtt[i], next[i], recips[i], contents[i] = d.BestEffort, int32(d.MaxAttempts), d.NextAttemptAt,
			jsonOr(d.Recipient), jsonOr(d.Content)
		errs[i], parents[i], states[i], created[i] = d.LastError, d.TraceParent, d.TraceState, d.CreatedAt
	}
	rows, err := tx.Query(ctx, `INSERT INTO deliveries (`+strings.Join(deliveryColumns, ", ")+`, place)
		SELECT d.c1, d.c2, d.c3, d.c4, d.c5, d.c6, '', d.c7, d.c8, d.c9, d.c10, d.c11, d.c12, d.c13, d.c14, d.c15,
			d.c18, now(), NULLIF(d.c16, ''), NULLIF(d.c17, ''), NULL, NULL, NULL, true
		FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
			$9::text[], $10::bool[], $11::int[], $12::timestamptz[], $13::jsonb[], $14::jsonb[], $15::text[], $16::text[],
			$17::text[], $18::timestamptz[])
			AS d(c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15, c16, c17, c18)
		ORDER BY d.c3, d.c4, d.c6, d.c7
		ON CONFLICT (tenant_id, event_id, user_id, channel, created_at) DO NOTHING
		RETURNING delivery_id::text`,
		ids, nids, tenants, events, types, users, chans, sevs, stats, best, maxAtt, next, recips, contents, errs,
		parents, states, created)
	if err != nil {
		return nil, fmt.Errorf("insert place deliveries: %w", err)
	}
	written, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("insert place deliveries: %w", err)
	}
	out := make([]NewDelivery, 0, len(written))
	for _, id := range written {
		out = append(out, dels[byID[id]])
	}
	return out, nil
}

// uuidOrNull is the uuid s, or NULL for an empty (or malformed) s.
func uuidOrNull(s string) pgtype.UUID {
	id, err := uuid.Parse(s)
	if err != nil {
		return pgtype.UUID{}
	}
	return pgtype.UUID{Bytes: id, Valid: true}
}

// nullIfEmpty is s, or NULL for an empty s.
func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// emptyObject is jsonBytes's answer for no document.
var emptyObject = []byte("{}")

// jsonBytes is b, or an empty object when b is empty, as []byte without a
// copy (the binary COPY encodes it as it is).
func jsonBytes(b json.RawMessage) []byte {
	if len(b) == 0 {
		return emptyObject
	}
	return b
}

func jsonOr(b json.RawMessage) string {
	if len(b) == 0 {
		return "{}"
	}
	return string(b)
}

// InsertHandoff records, in the relay's transaction, that the relay hands
// the deliveries ids (written as PUBLISHED) to the broker itself, on
// behalf of the daemon owner (its Liveness id; 0: none). The handoff is
// deleted once the broker confirmed them (DeleteHandoffs); if it is still
// there at now+grace, or once its owner's liveness lock is gone,
// ClaimHandoffs gives its deliveries to a publisher.
func InsertHandoff(ctx context.Context, tx pgx.Tx, ids []string, grace time.Duration, owner int32) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, `INSERT INTO delivery_handoffs (due_at, delivery_ids, owner)
		VALUES (now() + make_interval(secs => $1), $2::text[]::uuid[], NULLIF($3::int, 0)) RETURNING handoff_id`,
		grace.Seconds(), ids, owner).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("insert handoff: %w", err)
	}
	return id, nil
}
