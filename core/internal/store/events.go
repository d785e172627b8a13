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
// back. One statement does it all (one round trip): it sizes the due
// payloads first and loads only the payloads it takes. An event over MaxPayloadBytes among the due ones is marked FAILED
// at once, with last_error naming the field, and never loaded. An event
// the relay cannot process goes back with FailEventAttempt in the same
// transaction. Attempts is the count before this one.
func ClaimEvents(ctx context.Context, tx pgx.Tx, limit int, budget int64) (Claim, error) {
	// One statement, one round trip: lock the due events, pick those the
	// budget takes (a running sum of the sizes of those within the limit,
	// and always the first of them), fail the oversize ones and mark the
	// picked ones PROCESSED. Each row says whether more events were due
	// than the claim took.
	rows, err := tx.Query(ctx, `WITH due AS MATERIALIZED (
			SELECT id, available_at, octet_length(payload::text) AS size FROM event_outbox
			WHERE status = 'PENDING' AND available_at <= now()
			ORDER BY available_at, id LIMIT $1 FOR UPDATE SKIP LOCKED
		), sized AS MATERIALIZED (
			SELECT id, size > $3 AS over,
				sum(CASE WHEN size > $3 THEN 0 ELSE size END) OVER w AS running,
				count(*) FILTER (WHERE size <= $3) OVER w AS nth
			FROM due WINDOW w AS (ORDER BY available_at, id)
		), pick AS MATERIALIZED (
			SELECT id, over, NOT over AND (nth = 1 OR running <= $2) AS take FROM sized
		), failed AS (
			UPDATE event_outbox e SET status = 'FAILED', attempts = e.attempts + 1, processed_at = NULL,
				last_error = format('event_outbox.payload: larger than %s bytes (%s bytes as stored); the relay does not load it', $3::int, octet_length(e.payload::text))
			FROM pick p WHERE e.id = p.id AND p.over
			RETURNING e.id, e.tenant_id, e.event_id, e.event_type, octet_length(e.payload::text) AS size
		), taken AS (
			UPDATE event_outbox e SET status = 'PROCESSED', processed_at = now(), attempts = e.attempts + 1, last_error = ''
			FROM pick p WHERE e.id = p.id AND p.take
			RETURNING e.id, e.tenant_id, e.project_id, e.event_id, e.event_type, e.aggregate_type, e.aggregate_id, e.payload, e.attempts - 1 AS attempts,
				e.created_at, COALESCE(e.traceparent, '') AS traceparent, COALESCE(e.tracestate, '') AS tracestate
		), full_claim AS (
			SELECT (SELECT count(*) FROM due) >= $1 OR EXISTS (SELECT 1 FROM pick WHERE NOT over AND NOT take) AS full
		)
		SELECT false, t.id, t.tenant_id, t.project_id, t.event_id, t.event_type, t.aggregate_type, t.aggregate_id, t.payload, t.attempts,
			t.created_at, t.traceparent, t.tracestate, 0::bigint, f.full
		FROM taken t, full_claim f
		UNION ALL
		SELECT true, o.id, o.tenant_id, '', o.event_id, o.event_type, '', '', '{}'::jsonb, 0, now(), '', '', o.size::bigint, f.full
		FROM failed o, full_claim f`, limit, budget, MaxPayloadBytes)
	if err != nil {
		return Claim{}, fmt.Errorf("claim events: %w", err)
	}
	var c Claim
	for rows.Next() {
		var (
			over bool
			e    EventRow
			size int64
		)
		if err := rows.Scan(&over, &e.ID, &e.TenantID, &e.ProjectID, &e.EventID, &e.Type, &e.AggregateType, &e.AggregateID, &e.Payload,
			&e.Attempts, &e.CreatedAt, &e.TraceParent, &e.TraceState, &size, &c.Full); err != nil {
			rows.Close()
			return Claim{}, fmt.Errorf("claim events: %w", err)
		}
		if over {
			c.Oversize = append(c.Oversize, OversizeEvent{ID: e.ID, TenantID: e.TenantID, EventID: e.EventID, Type: e.Type, Bytes: size})
			continue
		}
		c.Events = append(c.Events, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Claim{}, fmt.Errorf("claim events: %w", err)
	}
	sort.Slice(c.Events, func(i, j int) bool { return c.Events[i].ID < c.Events[j].ID })
	sort.Slice(c.Oversize, func(i, j int) bool { return c.Oversize[i].ID < c.Oversize[j].ID })
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
	// Place marks a post to a place (InsertDeliveriesOnce): UserID holds
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
	// Unanchored marks a delivery of a recipient whose inbox keeps one
	// row per digest (inbox = "per_digest"): the event wrote no inbox row
	// for them, NotificationID names none, and InsertDeliveriesOnce
	// writes it (CreatedAt set: the event's time).
	Unanchored bool
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

// InsertDeliveriesOnce writes, in tx, the deliveries that have no inbox
// row of their recipient to hang on: the posts to places (NewDelivery.Place:
// one row per event, place and channel) and the unanchored deliveries
// (NewDelivery.Unanchored: a per_digest inbox's item and the recipient's
// other deliveries). InsertFanout skips a retried event's deliveries by
// their inbox row; these are skipped by the deliveries' unique key
// (tenant, event, user, channel, created_at) instead, so each must have
// its CreatedAt set (the event's time), and running it twice for an event
// writes nothing the second time. The relay writes both kinds of a batch
// with one call: one round trip. It returns the deliveries written, with
// their ids; an error names the kind of delivery that failed.
func InsertDeliveriesOnce(ctx context.Context, tx pgx.Tx, dels []NewDelivery) ([]NewDelivery, error) {
	if len(dels) == 0 {
		return nil, nil
	}
	n := len(dels)
	ids, nids := make([]pgtype.UUID, n), make([]pgtype.UUID, n)
	byID := make(map[string]int, n)
	places := 0
	for i := range dels {
		d := &dels[i]
		if d.Place {
			places++
		}
		if d.CreatedAt.IsZero() {
			return nil, fmt.Errorf("insert %s: delivery of event %s to %s on %s has no CreatedAt (the event's time)", onceKind(*d), d.EventID, d.UserID, d.Channel)
		}
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		nid, err := uuid.Parse(d.NotificationID)
		if err != nil {
			return nil, fmt.Errorf("insert %s: delivery of event %s to %s on %s: notification id: %w", onceKind(*d), d.EventID, d.UserID, d.Channel, err)
		}
		d.ID = id.String()
		byID[d.ID] = i
		ids[i], nids[i] = pgtype.UUID{Bytes: id, Valid: true}, pgtype.UUID{Bytes: nid, Valid: true}
	}
	written, err := insertDeliveryRows(ctx, tx, dels, ids, nids, time.Now(), true)
	if err != nil {
		return nil, fmt.Errorf("insert %d place deliveries and %d unanchored deliveries: %w", places, n-places, err)
	}
	out := make([]NewDelivery, 0, len(written))
	for _, id := range written {
		out = append(out, dels[byID[id]])
	}
	return out, nil
}

// onceKind names the kind of d in InsertDeliveriesOnce's errors.
func onceKind(d NewDelivery) string {
	if d.Place {
		return "place deliveries"
	}
	return "unanchored deliveries"
}

// insertDeliveries is copyDeliveries for sessions bound by row-level
// security: INSERTs of arrays, checked row by row by the policies, of at
// most insertChunk deliveries each. One statement for a whole relay batch
// (thousands of deliveries) had pgx build its parameters, and the message
// that carries them, at the batch's full size in the daemon's memory: the
// fan-out benchmark's daemon peaked at 191-204 MiB that way, against
// 104-110 MiB by COPY (2026-11-26).
func insertDeliveries(ctx context.Context, tx pgx.Tx, keep []NewDelivery, ids, nids []pgtype.UUID, now time.Time) error {
	_, err := insertDeliveryRows(ctx, tx, keep, ids, nids, now, false)
	return err
}

// insertChunk bounds the deliveries of one INSERT of insertDeliveryRows.
const insertChunk = 500

// insertDeliveryRows is insertDeliveries that, with skipExisting, leaves
// out a row whose (tenant, event, user, channel, created_at) is taken and
// returns the ids of the rows written (nil without skipExisting). It
// writes in statements of at most insertChunk deliveries.
func insertDeliveryRows(ctx context.Context, tx pgx.Tx, keep []NewDelivery, ids, nids []pgtype.UUID, now time.Time, skipExisting bool) ([]string, error) {
	var written []string
	for start := 0; start < len(keep); start += insertChunk {
		end := min(start+insertChunk, len(keep))
		w, err := insertDeliveryChunk(ctx, tx, keep[start:end], ids[start:end], nids[start:end], now, skipExisting)
		if err != nil {
			return nil, err
		}
		written = append(written, w...)
	}
	return written, nil
}

// insertDeliveryChunk writes keep with one INSERT of arrays.
func insertDeliveryChunk(ctx context.Context, tx pgx.Tx, keep []NewDelivery, ids, nids []pgtype.UUID, now time.Time, skipExisting bool) ([]string, error) {
	n := len(keep)
	tenants, events, types, users, utypes, chans, sevs, stats := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	best, maxAtt, next, recips, contents, errs := make([]bool, n), make([]int32, n), make([]time.Time, n), make([]string, n), make([]string, n),
		make([]string, n)
	parents, states, created := make([]string, n), make([]string, n), make([]time.Time, n)
	holds, unless, windows, places := make([]string, n), make([]string, n), make([]string, n), make([]bool, n)
	for i := range keep {
		d := &keep[i]
		tenants[i], events[i], types[i], users[i], utypes[i], chans[i], sevs[i], stats[i] =
			d.TenantID, d.EventID, d.EventType, d.UserID, d.UserType, d.Channel, d.Severity, d.Status
		best[i], maxAtt[i], next[i], recips[i], contents[i] = d.BestEffort, int32(d.MaxAttempts), d.NextAttemptAt,
			jsonOr(d.Recipient), jsonOr(d.Content)
		errs[i] = d.LastError
		parents[i], states[i], created[i] = d.TraceParent, d.TraceState, d.CreatedAt
		holds[i], unless[i], windows[i], places[i] = d.Hold, strings.Join(d.EscalateUnless, ","), d.DigestWindow, d.Place
	}
	stmt := `INSERT INTO deliveries (` + strings.Join(deliveryColumns, ", ") + `, place)
		SELECT d.c1, d.c2, d.c3, d.c4, d.c5, d.c6, d.c7, d.c8, d.c9, d.c10, d.c11, d.c12, d.c13, d.c14, d.c15, d.c16,
			d.c19, $16::timestamptz, NULLIF(d.c17, ''), NULLIF(d.c18, ''), NULLIF(d.c20, ''), string_to_array(NULLIF(d.c21, ''), ','), NULLIF(d.c22, '')::uuid,
			d.c23
		FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[],
			$6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::bool[], $12::int[], $13::timestamptz[],
			$14::jsonb[], $15::jsonb[], $17::text[], $18::text[], $19::text[], $20::timestamptz[], $21::text[], $22::text[], $23::text[],
			$24::bool[])
			AS d(c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15, c16, c17, c18, c19, c20, c21, c22, c23)`
	args := []any{ids, nids, tenants, events, types, users, utypes, chans, sevs, stats, best, maxAtt, next, recips, contents, now, errs,
		parents, states, created, holds, unless, windows, places}
	if !skipExisting {
		_, err := tx.Exec(ctx, stmt, args...)
		return nil, err
	}
	rows, err := tx.Query(ctx, stmt+`
		ORDER BY d.c3, d.c4, d.c6, d.c8
		ON CONFLICT (tenant_id, event_id, user_id, channel, created_at) DO NOTHING
		RETURNING delivery_id::text`, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
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
	return InsertHandoffDeleting(ctx, tx, ids, grace, owner, nil)
}

// InsertHandoffDeleting is InsertHandoff that also deletes, in the same
// round trip and transaction, the handoffs confirmed: earlier ones whose
// deliveries the broker confirmed (see DeleteHandoffs). A confirmed
// handoff already gone is no error.
func InsertHandoffDeleting(ctx context.Context, tx pgx.Tx, ids []string, grace time.Duration, owner int32, confirmed []int64) (int64, error) {
	const insert = `INSERT INTO delivery_handoffs (due_at, delivery_ids, owner)
		VALUES (now() + make_interval(secs => $1), $2::text[]::uuid[], NULLIF($3::int, 0)) RETURNING handoff_id`
	var id int64
	if len(confirmed) == 0 {
		if err := tx.QueryRow(ctx, insert, grace.Seconds(), ids, owner).Scan(&id); err != nil {
			return 0, fmt.Errorf("insert handoff: %w", err)
		}
		return id, nil
	}
	b := &pgx.Batch{}
	b.Queue(insert, grace.Seconds(), ids, owner)
	b.Queue(`DELETE FROM delivery_handoffs WHERE handoff_id = ANY($1)`, confirmed)
	br := tx.SendBatch(ctx, b)
	if err := br.QueryRow().Scan(&id); err != nil {
		_ = br.Close()
		return 0, fmt.Errorf("insert handoff: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return 0, fmt.Errorf("delete confirmed handoffs: %w", err)
	}
	if err := br.Close(); err != nil {
		return 0, fmt.Errorf("insert handoff: %w", err)
	}
	return id, nil
}
