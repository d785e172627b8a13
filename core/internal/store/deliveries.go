package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/heraldhq/herald/sdk/producer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Delivery statuses. They only move forward; every transition is a guarded
// UPDATE naming the statuses it may leave.
const (
	StatusDeferred  = "DEFERRED"
	StatusPending   = "PENDING"
	StatusPublished = "PUBLISHED"
	StatusSending   = "SENDING"
	StatusSent      = "SENT"
	StatusRetry     = "RETRY"
	StatusFailed    = "FAILED"
	// StatusWaiting: not sent yet, waiting in next_attempt_at for its
	// time (an escalation a read or an action may cancel, a digest item
	// in an open window).
	StatusWaiting = "WAITING"
	// StatusSkipped: final, not sent by design; last_error says why
	// ("offline", "throttled").
	StatusSkipped = "SKIPPED"
	// StatusCancelled: final, called off before it was sent; last_error
	// says by what.
	StatusCancelled = "CANCELLED"
	// StatusDigested: final, sent as part of one digest delivery.
	StatusDigested = "DIGESTED"
)

// FinalStatuses are the statuses a delivery never leaves (except through
// an operator's `herald deliveries retry` of a FAILED one).
var FinalStatuses = []string{StatusSent, StatusFailed, StatusSkipped, StatusCancelled, StatusDigested}

// OutRow is a delivery claimed for publishing.
type OutRow struct {
	ID       string
	TenantID string
	UserType string
	Channel  string
	// Attempt is the number of the attempt the message is for.
	Attempt int
	// Prev is the status the delivery had before the claim.
	Prev string
	// TraceParent and TraceState are the W3C trace context the relay
	// wrote for the delivery ("": none).
	TraceParent, TraceState string
}

// ClaimKind selects which deliveries ClaimForPublish takes.
type ClaimKind int

// Claim kinds.
const (
	// ClaimPending takes new deliveries.
	ClaimPending ClaimKind = iota
	// ClaimRetry takes RETRY deliveries whose next attempt is due.
	ClaimRetry
	// ClaimStale takes PUBLISHED deliveries no listener picked up within
	// the reclaim age (their message was lost with a queue).
	ClaimStale
)

// ClaimForPublish marks up to limit deliveries of the given kind
// PUBLISHED in tx, skipping rows another publisher holds, and returns them
// with the status each had. The caller publishes them and commits only once
// the broker confirmed every message; what was not confirmed is put back
// with RevertPublished (or the whole transaction rolls back). Claim and
// mark are one statement, so a delivery costs the publisher one row write.
//
// The waiting rows are found through the partial indexes on queue
// (migration 0017); ClaimStale reads the whole table (see ClaimStaleSince).
func ClaimForPublish(ctx context.Context, tx pgx.Tx, kind ClaimKind, limit int, reclaimAfter time.Duration) ([]OutRow, error) {
	return claimForPublish(ctx, tx, kind, limit, reclaimAfter, time.Time{})
}

// ClaimStaleSince is ClaimForPublish(ClaimStale) for the deliveries
// created since since only: it reads the primary key's range of those
// rows (delivery ids are UUIDv7, time-ordered) instead of the whole
// table, and stops where the deliveries are too young to be stale
// (created less than reclaimAfter ago, a minute allowed for the clocks);
// the next round's range starts before them. No index can find PUBLISHED
// rows without making the outcome's update of every delivery a non-HOT
// one (an index that tells PUBLISHED from SENT changes with it), and the
// whole table is the history of every delivery: the publisher reads it
// once at start and then hourly, and in between only the recent rows. A
// zero since reads every row.
func ClaimStaleSince(ctx context.Context, tx pgx.Tx, limit int, reclaimAfter time.Duration, since time.Time) ([]OutRow, error) {
	return claimForPublish(ctx, tx, ClaimStale, limit, reclaimAfter, since)
}

// uuidV7Floor is the least UUIDv7 of a time: its Unix milliseconds, then
// zeros.
func uuidV7Floor(t time.Time) pgtype.UUID {
	var u pgtype.UUID
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		u.Bytes[i] = byte(ms >> (40 - 8*i))
	}
	u.Valid = true
	return u
}

func claimForPublish(ctx context.Context, tx pgx.Tx, kind ClaimKind, limit int, reclaimAfter time.Duration, since time.Time) ([]OutRow, error) {
	var where string
	order := "next_attempt_at"
	args := []any{limit}
	switch kind {
	case ClaimPending:
		where = `queue = 'PENDING'`
	case ClaimRetry:
		where = `queue = 'RETRY' AND next_attempt_at <= now()`
	case ClaimStale:
		where = `status = 'PUBLISHED' AND updated_at < now() - make_interval(secs => $2)`
		args = append(args, reclaimAfter.Seconds())
		if !since.IsZero() {
			// A delivery is stale once its last publish (updated_at) is
			// reclaimAfter old, and it was published after it was created
			// (its id's time, the relay's clock): one created since then,
			// less a minute for the clocks, cannot be stale yet, and the
			// primary key's range stops before it. The full round reads
			// every row, ids that are not time-ordered (rows older than
			// UUIDv7 ids) included.
			where += ` AND delivery_id >= $3 AND delivery_id < $4`
			args = append(args, uuidV7Floor(since), uuidV7Floor(time.Now().Add(time.Minute-reclaimAfter)))
		}
		order = "updated_at"
	}
	rows, err := tx.Query(ctx, `WITH c AS (
			SELECT delivery_id, created_at, status FROM deliveries
			WHERE `+where+` ORDER BY `+order+` LIMIT $1 FOR UPDATE SKIP LOCKED
		)
		UPDATE deliveries d SET status = 'PUBLISHED', updated_at = now()
		FROM c WHERE d.delivery_id = c.delivery_id AND d.created_at = c.created_at
		RETURNING d.delivery_id::text, d.tenant_id, d.user_type, d.channel, d.attempts + 1, c.status,
			COALESCE(d.traceparent, ''), COALESCE(d.tracestate, '')`, args...)
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (OutRow, error) {
		var o OutRow
		err := r.Scan(&o.ID, &o.TenantID, &o.UserType, &o.Channel, &o.Attempt, &o.Prev, &o.TraceParent, &o.TraceState)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	return out, nil
}

// RevertPublished puts claimed deliveries whose message the broker did not
// confirm back to the status they had, in the claiming transaction, so the
// next pass publishes them again.
func RevertPublished(ctx context.Context, tx pgx.Tx, rows []OutRow) error {
	if len(rows) == 0 {
		return nil
	}
	ids, prev := make([]string, len(rows)), make([]string, len(rows))
	for i, r := range rows {
		ids[i], prev[i] = r.ID, r.Prev
	}
	_, err := tx.Exec(ctx, `UPDATE deliveries d SET status = m.prev, updated_at = now()
		FROM unnest($1::text[]::uuid[], $2::text[]) AS m(id, prev)
		WHERE d.delivery_id = m.id AND d.status = 'PUBLISHED'`, ids, prev)
	if err != nil {
		return fmt.Errorf("revert unconfirmed deliveries: %w", err)
	}
	return nil
}

// Ref names one attempt of one delivery, as a broker message carries it.
type Ref struct {
	ID      string `json:"id"`
	Attempt int    `json:"attempt"`
}

// Claimed is a delivery a listener is about to send, for one attempt.
type Claimed struct {
	ID             string
	TenantID       string
	NotificationID string
	EventID        string
	EventType      string
	UserID         string
	UserType       string
	Channel        string
	Severity       string
	Attempt        int
	MaxAttempts    int
	BestEffort     bool
	Recipient      json.RawMessage
	Content        json.RawMessage
	// CreatedAt is the delivery's created_at: the creation time of its
	// event (migration 0021), the partition key. When the relay wrote the
	// row is in its id (WrittenAt).
	CreatedAt time.Time
	// TraceParent and TraceState are the W3C trace context the delivery
	// continues ("": none).
	TraceParent, TraceState string
}

// WrittenAt returns when the relay wrote delivery id, to the millisecond:
// delivery ids are UUIDv7, made by the fan-out that inserted the row. ok
// is false for an id that is not a UUIDv7.
func WrittenAt(id string) (at time.Time, ok bool) {
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 7 {
		return time.Time{}, false
	}
	sec, nsec := u.Time().UnixTime()
	return time.Unix(sec, nsec), true
}

// sendable is the guard both LoadForSend and RecordOutcomes apply: the
// delivery is waiting for exactly the attempt the message names. PENDING
// and RETRY are allowed because a listener may see a delivery before the
// publisher that claimed it commits.
const sendable = `d.attempts = m.attempt - 1 AND d.status IN ('PENDING', 'PUBLISHED', 'RETRY')`

// LoadForSend reads the referenced deliveries that still wait for the
// attempt their reference names. A reference whose delivery is already past
// that attempt or final (a redelivered or duplicate message) is not
// returned: the caller acks it and skips it. Nothing is written: the
// attempt is recorded once, with its outcome, by RecordOutcomes, whose
// guard keeps a second listener holding the same reference from recording
// it twice. A daemon that dies mid-send leaves its message unacked, and the
// broker hands it to another listener.
func LoadForSend(ctx context.Context, q Querier, refs []Ref) ([]Claimed, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	ids, attempts := make([]string, len(refs)), make([]int32, len(refs))
	for i, r := range refs {
		ids[i], attempts[i] = r.ID, int32(r.Attempt)
	}
	rows, err := q.Query(ctx, `SELECT d.delivery_id::text, d.tenant_id, d.notification_id::text, d.event_id, d.event_type,
			d.user_id, d.user_type, d.channel, d.severity, m.attempt, d.max_attempts, d.best_effort, d.recipient, d.content, d.created_at,
			COALESCE(d.traceparent, ''), COALESCE(d.tracestate, '')
		FROM unnest($1::text[]::uuid[], $2::int[]) AS m(id, attempt)
		JOIN deliveries d ON d.delivery_id = m.id
		WHERE `+sendable, ids, attempts)
	if err != nil {
		return nil, fmt.Errorf("load for send: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Claimed, error) {
		var c Claimed
		// Scanned as bytes: a json.RawMessage destination would make pgx
		// validate and copy every document on the hot path.
		var recipient, content []byte
		err := r.Scan(&c.ID, &c.TenantID, &c.NotificationID, &c.EventID, &c.EventType, &c.UserID, &c.UserType,
			&c.Channel, &c.Severity, &c.Attempt, &c.MaxAttempts, &c.BestEffort, &recipient, &content, &c.CreatedAt,
			&c.TraceParent, &c.TraceState)
		c.Recipient, c.Content = recipient, content
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("load for send: %w", err)
	}
	return out, nil
}

// Sendable returns the ids of the referenced deliveries that still wait
// for the attempt their reference names: LoadForSend's guard without
// reading the rows' content, for messages that carry it.
func Sendable(ctx context.Context, q Querier, refs []Ref) (map[string]bool, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	sql, args := SendableQuery(refs)
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("check sendable: %w", err)
	}
	return ReadSendable(rows)
}

// SendableQuery is Sendable's statement and arguments, for a caller that
// sends it in a batch; ReadSendable reads its rows.
func SendableQuery(refs []Ref) (string, []any) {
	ids, attempts := make([]string, len(refs)), make([]int32, len(refs))
	for i, r := range refs {
		ids[i], attempts[i] = r.ID, int32(r.Attempt)
	}
	return `SELECT d.delivery_id::text
		FROM unnest($1::text[]::uuid[], $2::int[]) AS m(id, attempt)
		JOIN deliveries d ON d.delivery_id = m.id
		WHERE ` + sendable, []any{ids, attempts}
}

// ReadSendable collects the ids a SendableQuery returned.
func ReadSendable(rows pgx.Rows) (map[string]bool, error) {
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("check sendable: %w", err)
	}
	ok := make(map[string]bool, len(ids))
	for _, id := range ids {
		ok[id] = true
	}
	return ok, nil
}

// DeleteHandoffs removes handoffs whose deliveries the broker confirmed.
func DeleteHandoffs(ctx context.Context, q Querier, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, `DELETE FROM delivery_handoffs WHERE handoff_id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("delete handoffs: %w", err)
	}
	return nil
}

// HandoffsDueNow makes handoffs due at once: the relay's publish of them
// failed, so the publisher should take their deliveries over.
func HandoffsDueNow(ctx context.Context, q Querier, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, `UPDATE delivery_handoffs SET due_at = now() WHERE handoff_id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("make handoffs due: %w", err)
	}
	return nil
}

// LivenessLockClass is the first key of the session advisory locks that
// say a daemon is alive (pg_advisory_lock(LivenessLockClass, id)); the
// second is the daemon's id, which its handoff rows carry as owner.
const LivenessLockClass int32 = 0x68726c64 // "hrld"

// ClaimHandoffs takes up to limit due handoffs (their broker confirm never
// came: the relay's publish failed and made them due, or the grace period
// passed) and handoffs whose owner is dead (no session holds its liveness
// lock: the transaction takes it instead, which fails while the owner
// lives), and deletes them in tx, returning their deliveries that are still
// PUBLISHED and unattempted, locked, for the caller to publish again. A
// delivery a listener already took is left out. The caller commits only
// once the broker confirmed every message; otherwise it rolls back, and
// the handoffs stay due. It also returns how many handoffs it took.
func ClaimHandoffs(ctx context.Context, tx pgx.Tx, limit int) ([]OutRow, int, error) {
	rows, err := tx.Query(ctx, `SELECT handoff_id, delivery_ids::text[] FROM delivery_handoffs
		WHERE due_at <= now() OR (owner IS NOT NULL AND pg_try_advisory_xact_lock($2, owner))
		ORDER BY due_at LIMIT $1 FOR UPDATE SKIP LOCKED`, limit, LivenessLockClass)
	if err != nil {
		return nil, 0, fmt.Errorf("claim handoffs: %w", err)
	}
	var (
		handoffs []int64
		ids      []string
	)
	for rows.Next() {
		var h int64
		var d []string
		if err := rows.Scan(&h, &d); err != nil {
			rows.Close()
			return nil, 0, fmt.Errorf("claim handoffs: %w", err)
		}
		handoffs, ids = append(handoffs, h), append(ids, d...)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(handoffs) == 0 {
		if err != nil {
			return nil, 0, fmt.Errorf("claim handoffs: %w", err)
		}
		return nil, 0, nil
	}
	if err := DeleteHandoffs(ctx, tx, handoffs); err != nil {
		return nil, 0, err
	}
	rows, err = tx.Query(ctx, `WITH c AS (
			SELECT delivery_id, created_at FROM deliveries
			WHERE delivery_id = ANY($1::text[]::uuid[]) AND status = 'PUBLISHED' AND attempts = 0
			FOR UPDATE SKIP LOCKED
		)
		UPDATE deliveries d SET updated_at = now()
		FROM c WHERE d.delivery_id = c.delivery_id AND d.created_at = c.created_at
		RETURNING d.delivery_id::text, d.tenant_id, d.user_type, d.channel, d.attempts + 1,
			COALESCE(d.traceparent, ''), COALESCE(d.tracestate, '')`, ids)
	if err != nil {
		return nil, 0, fmt.Errorf("claim handoffs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (OutRow, error) {
		o := OutRow{Prev: StatusPublished}
		err := r.Scan(&o.ID, &o.TenantID, &o.UserType, &o.Channel, &o.Attempt, &o.TraceParent, &o.TraceState)
		return o, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("claim handoffs: %w", err)
	}
	return out, len(handoffs), nil
}

// Outcome is the recorded result of one attempt.
type Outcome struct {
	ID      string
	Attempt int
	// Kind is sent, retryable, rate_limited, permanent, error or lost.
	Kind              string
	Provider          string
	ProviderMessageID string
	Error             string
	RetryAfter        time.Duration
	// Status is the delivery's next status: SENT, RETRY, FAILED or SKIPPED.
	Status string
	// NotAttempted marks a batch no provider was handed (none available):
	// the delivery moves to Status (RETRY) keeping its attempt count, and
	// no attempt is logged.
	NotAttempted  bool
	NextAttemptAt time.Time
	StartedAt     time.Time
	// GoneDevices are the addresses of the recipient's devices the
	// provider reported gone (sdk.Result.GoneDevices), with the tenant and
	// user they belong to; RecordOutcomes ignores them, the listener
	// removes them with RemoveDevices.
	GoneDevices      []string
	TenantID, UserID string
}

// RecordOutcomes stores attempt outcomes: a delivery still waiting for that
// attempt (the LoadForSend guard) takes the attempt's number and its next
// status, and the attempt joins the audit log, both in one statement. A
// second record of the same attempt matches nothing and is ignored. It
// returns how many attempts were recorded (a NotAttempted outcome moves its
// delivery but records none). A final outcome (FinalStatuses) keeps the
// row's next_attempt_at, so that it changes no indexed column: the update
// is HOT (migration 0017).
//
// A first-try success (attempt 1, sent) writes no delivery_attempts row:
// the delivery row keeps its facts (provider, provider message id, sent_at)
// and its start in attempt_started_at, and delivery_attempt_log shows it
// as attempt 1 (migration 0115). Every other attempt, the final success
// of a retried delivery included, is logged.
func RecordOutcomes(ctx context.Context, q Querier, outs []Outcome) (int, error) {
	if len(outs) == 0 {
		return 0, nil
	}
	n := len(outs)
	ids, kinds, provs, pmids, errs, stats := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	atts := make([]int32, n)
	retry := make([]int64, n)
	next, started := make([]time.Time, n), make([]time.Time, n)
	counted := make([]bool, n)
	for i, o := range outs {
		counted[i] = !o.NotAttempted
		ids[i], kinds[i], provs[i], pmids[i], errs[i], stats[i] = o.ID, o.Kind, o.Provider, o.ProviderMessageID, o.Error, o.Status
		atts[i], retry[i], next[i], started[i] = int32(o.Attempt), o.RetryAfter.Milliseconds(), o.NextAttemptAt, o.StartedAt
		if next[i].IsZero() {
			next[i] = time.Now()
		}
	}
	// first_try marks a first-try success: kept on the delivery row alone.
	var recorded int
	err := q.QueryRow(ctx, `WITH m AS (
			SELECT *, counted AND attempt = 1 AND kind = 'sent' AND status = 'SENT' AS first_try
			FROM unnest($1::text[]::uuid[], $2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[], $9::timestamptz[], $10::timestamptz[], $11::bool[])
				AS m(id, attempt, kind, provider, pmid, err, status, retry_ms, next_at, started_at, counted)
		), upd AS (
			UPDATE deliveries d SET status = m.status, provider = m.provider, provider_message_id = m.pmid, last_error = m.err,
				next_attempt_at = CASE WHEN m.status = ANY($12::text[]) THEN d.next_attempt_at ELSE m.next_at END,
				lease_until = NULL, updated_at = now(),
				attempts = CASE WHEN m.counted THEN m.attempt ELSE d.attempts END,
				sent_at = CASE WHEN m.status = 'SENT' THEN now() ELSE d.sent_at END,
				attempt_started_at = CASE WHEN m.first_try THEN m.started_at ELSE d.attempt_started_at END
			FROM m WHERE d.delivery_id = m.id AND `+sendable+`
			RETURNING d.delivery_id, d.tenant_id, d.created_at, m.attempt, m.kind, m.provider, m.pmid, m.err, m.retry_ms, m.started_at,
				m.counted, m.first_try
		), logged AS (
			INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, provider, provider_message_id, error, retry_after_ms,
				started_at, delivery_created_at)
			SELECT tenant_id, delivery_id, attempt, kind, provider, pmid, err, retry_ms, started_at, created_at
			FROM upd WHERE counted AND NOT first_try
			ON CONFLICT (delivery_id, attempt, delivery_created_at) DO NOTHING
			RETURNING 1
		)
		SELECT (SELECT count(*) FROM logged) + (SELECT count(*) FROM upd WHERE first_try)`,
		ids, atts, kinds, provs, pmids, errs, stats, retry, next, started, counted, FinalStatuses).Scan(&recorded)
	if err != nil {
		return 0, fmt.Errorf("record outcomes: %w", err)
	}
	return recorded, nil
}

// ExpireLeases moves deliveries whose SENDING lease ran out (the daemon or
// plugin died mid-send) to RETRY, due after retryIn, and logs the attempt
// as lost. A lost attempt does not count against max_attempts — it was
// Herald's failure, not the provider's, so best-effort deliveries get
// their one real try too — but a delivery that already lost maxLost
// attempts is FAILED. It returns how many moved. The policy (how many,
// how soon) is maintenance.LostAttempts.
func ExpireLeases(ctx context.Context, q Querier, maxLost int, retryIn time.Duration) (int, error) {
	tag, err := q.Exec(ctx, `WITH upd AS (
			UPDATE deliveries d SET status = CASE WHEN (SELECT count(*) FROM delivery_attempts a
					WHERE a.delivery_id = d.delivery_id AND a.delivery_created_at = d.created_at AND a.outcome = 'lost') >= $1 THEN 'FAILED' ELSE 'RETRY' END,
				max_attempts = d.max_attempts + 1,
				last_error = 'attempt lost: lease expired while sending', next_attempt_at = now() + $2::interval, lease_until = NULL, updated_at = now()
			WHERE d.queue = 'SENDING' AND d.lease_until < now()
			RETURNING d.delivery_id, d.tenant_id, d.attempts, d.updated_at, d.created_at
		)
		INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, error, started_at, delivery_created_at)
		SELECT tenant_id, delivery_id, attempts, 'lost', 'lease expired while sending', updated_at, created_at FROM upd
		ON CONFLICT (delivery_id, attempt, delivery_created_at) DO NOTHING`, maxLost, retryIn)
	if err != nil {
		return 0, fmt.Errorf("expire leases: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// ReleaseDeferred moves DEFERRED deliveries whose quiet-hours window ended
// to PENDING. It returns how many moved.
func ReleaseDeferred(ctx context.Context, q Querier) (int, error) {
	tag, err := q.Exec(ctx, `UPDATE deliveries SET status = 'PENDING', updated_at = now()
		WHERE queue = 'DEFERRED' AND next_attempt_at <= now()`)
	if err != nil {
		return 0, fmt.Errorf("release deferred: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// RequeueFilter selects FAILED deliveries for RequeueFailed.
type RequeueFilter struct {
	TenantID string
	EventID  string
	Channel  string
	// DeliveryIDs, when set, limits the requeue to these deliveries.
	DeliveryIDs []string
}

// RequeueFailed is the operator's replay of dead letters: matching FAILED
// deliveries go back to RETRY, due now, with extraAttempts more tries.
func RequeueFailed(ctx context.Context, q Querier, f RequeueFilter, extraAttempts int) (int, error) {
	ids := f.DeliveryIDs
	if ids == nil {
		ids = []string{}
	}
	tag, err := q.Exec(ctx, `UPDATE deliveries SET status = 'RETRY', next_attempt_at = now(), updated_at = now(),
			max_attempts = attempts + $5, last_error = 'requeued by operator after: ' || last_error
		WHERE status = 'FAILED' AND ($1 = '' OR tenant_id = $1) AND ($2 = '' OR event_id = $2)
			AND ($3 = '' OR channel = $3) AND (cardinality($4::uuid[]) = 0 OR delivery_id = ANY($4::uuid[]))`,
		f.TenantID, f.EventID, f.Channel, ids, extraAttempts)
	if err != nil {
		return 0, fmt.Errorf("requeue failed deliveries: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// ErrNotFound reports a missing row.
var ErrNotFound = errors.New("not found")

// SameEvent reports whether the tenant's event eventID (which must exist
// and be visible) has type eventType and payload: the payloads compare as
// jsonb prints them (key order and spaces do not matter), through the
// payload_sha256 sdk/producer writes; an event written before that column
// existed compares by type only.
func SameEvent(ctx context.Context, q Querier, tenantID, eventID, eventType string, payload []byte) (bool, error) {
	if len(payload) == 0 {
		payload = []byte(`{}`)
	}
	var same bool
	err := q.QueryRow(ctx, `SELECT event_type = $3 AND (payload_sha256 IS NULL OR payload_sha256 = sha256(convert_to($4::jsonb::text, 'UTF8')))
		FROM event_outbox WHERE tenant_id = $1 AND event_id = $2`, tenantID, eventID, eventType, string(payload)).Scan(&same)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, ErrNotFound
	}
	if err != nil {
		return false, fmt.Errorf("compare event: %w", err)
	}
	return same, nil
}

// GetEvent returns an event's status and every delivery, or ErrNotFound.
func GetEvent(ctx context.Context, q Querier, tenantID, eventID string) (producer.EventStatus, error) {
	var st producer.EventStatus
	err := q.QueryRow(ctx, `SELECT event_id, project_id, event_type, status, attempts, last_error, created_at, processed_at
		FROM event_outbox WHERE tenant_id = $1 AND event_id = $2`, tenantID, eventID).
		Scan(&st.EventID, &st.ProjectID, &st.Type, &st.Status, &st.Attempts, &st.LastError, &st.CreatedAt, &st.ProcessedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, ErrNotFound
	}
	if err != nil {
		return st, fmt.Errorf("get event: %w", err)
	}
	// The event's deliveries have its created_at (migration 0021), or,
	// written before, the later time of their fan-out by the daemon's
	// clock (a day allows for its skew): the months before are pruned.
	// A final row (FinalStatuses) keeps the next_attempt_at of its last wait
	// (RecordOutcomes leaves it, so that the final update is HOT): it
	// means nothing there and is not shown.
	rows, err := q.Query(ctx, `SELECT delivery_id::text, user_id, place, channel, status, attempts, provider, provider_message_id, last_error,
			CASE WHEN status = ANY($4::text[]) THEN NULL ELSE next_attempt_at END, updated_at,
			coalesce(hold, ''), escalate_unless
		FROM deliveries WHERE tenant_id = $1 AND event_id = $2 AND created_at >= $3::timestamptz - interval '1 day' ORDER BY user_id, channel`,
		tenantID, eventID, st.CreatedAt, FinalStatuses)
	if err != nil {
		return st, fmt.Errorf("get deliveries: %w", err)
	}
	st.Deliveries, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (producer.DeliveryStatus, error) {
		var d producer.DeliveryStatus
		var next *time.Time
		var place bool
		err := r.Scan(&d.DeliveryID, &d.UserID, &place, &d.Channel, &d.Status, &d.Attempts, &d.Provider, &d.ProviderMessageID, &d.LastError,
			&next, &d.UpdatedAt, &d.Hold, &d.EscalateUnless)
		if next != nil {
			d.NextAttemptAt = *next
		}
		if place {
			d.Place, d.UserID = d.UserID, ""
		}
		return d, err
	})
	if err != nil {
		return st, fmt.Errorf("get deliveries: %w", err)
	}
	if st.Deliveries == nil {
		st.Deliveries = []producer.DeliveryStatus{}
	}
	return st, nil
}
