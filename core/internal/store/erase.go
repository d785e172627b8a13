package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// AttemptLockSeed is the seed of the advisory-lock keys that hold one
// attempt of one delivery while a listener sends it:
// pg_advisory_lock(hashtextextended(AttemptLockKey(id, attempt),
// AttemptLockSeed)). The listener takes them (core/internal/delivery,
// inflight.go); an erase takes them too, so that it never changes a
// delivery in the middle of its send.
const AttemptLockSeed = 0x6865726c64 // "herld"

// AttemptLockKey names one attempt of one delivery in the advisory-lock
// key space AttemptLockSeed seeds.
func AttemptLockKey(deliveryID string, attempt int) string {
	return deliveryID + "/" + strconv.Itoa(attempt)
}

// ErasedPrefix starts the pseudonym an erase writes in place of a user id
// ("erased:" and 16 random hex digits, one pseudonym per erase run).
const ErasedPrefix = "erased:"

// ErasedMark replaces an error text (deliveries.last_error,
// delivery_attempts.error) that was not empty: such a text may quote an
// address or the provider's echo of the message.
const ErasedMark = "[erased]"

// ErasedInFlight is the last_error of a delivery that was still on its way
// (DEFERRED, WAITING, PENDING, PUBLISHED, SENDING or RETRY) when the erase reached
// it: the erase moves it to FAILED, so it is never sent.
const ErasedInFlight = "recipient erased before the delivery was sent"

// unfinished are the delivery states a delivery can still be sent from.
const unfinished = `('DEFERRED', 'WAITING', 'PENDING', 'PUBLISHED', 'SENDING', 'RETRY')`

// RemovedRecipient counts the directory rows RemoveRecipient deleted.
type RemovedRecipient struct {
	Recipient   int64 `json:"recipient"`
	Devices     int64 `json:"devices"`
	Memberships int64 `json:"memberships"`
	Preferences int64 `json:"preferences"`
}

// Total is how many rows were deleted.
func (r RemovedRecipient) Total() int64 {
	return r.Recipient + r.Devices + r.Memberships + r.Preferences
}

// RemoveRecipient deletes a user from the tenant's directory in one
// statement: the recipient, their devices, their memberships and their
// preferences. Events processed after q commits no longer reach them (the
// relay reads the directory in each batch's transaction; nothing caches
// it). It returns ErrNotFound when the user has none of these rows.
func RemoveRecipient(ctx context.Context, q Querier, tenantID, userID string) (RemovedRecipient, error) {
	var r RemovedRecipient
	err := q.QueryRow(ctx, `WITH r AS (DELETE FROM recipients WHERE tenant_id = $1 AND user_id = $2 RETURNING 1),
			d AS (DELETE FROM recipient_devices WHERE tenant_id = $1 AND user_id = $2 RETURNING 1),
			m AS (DELETE FROM group_members WHERE tenant_id = $1 AND user_id = $2 RETURNING 1),
			p AS (DELETE FROM user_preferences WHERE tenant_id = $1 AND user_id = $2 RETURNING 1)
		SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM d), (SELECT count(*) FROM m), (SELECT count(*) FROM p)`,
		tenantID, userID).Scan(&r.Recipient, &r.Devices, &r.Memberships, &r.Preferences)
	if err != nil {
		return r, fmt.Errorf("remove recipient: %w", err)
	}
	if r.Total() == 0 {
		return r, ErrNotFound
	}
	return r, nil
}

// Pool runs statements and begins transactions (a *pgxpool.Pool).
type Pool interface {
	Querier
	TxBeginner
}

// Erasure is what EraseRecipient did.
type Erasure struct {
	// Removed counts the directory rows deleted (the API shows it next
	// to the erasure, not in it).
	Removed RemovedRecipient `json:"-"`
	// Pseudonym is the id the user's kept rows now carry.
	Pseudonym string `json:"pseudonym"`
	// Notifications and Deliveries count the rows anonymised; Stopped the
	// deliveries among them that were still on their way and are now
	// FAILED; Attempts the attempt rows whose error text was erased.
	Notifications int64 `json:"notifications"`
	Deliveries    int64 `json:"deliveries"`
	Stopped       int64 `json:"stopped"`
	Attempts      int64 `json:"attempts"`
	// Actions counts the first-to-act actions anonymised; Counters and
	// Tickets the unread counters and live tickets deleted.
	Actions  int64 `json:"actions"`
	Counters int64 `json:"counters"`
	Tickets  int64 `json:"tickets"`
	// StatusEvents counts the recorded status events (status_events,
	// published or still owed to the broker or the tenant's webhook)
	// anonymised.
	StatusEvents int64 `json:"status_events"`
	// Settled says the erase waited until every transaction that could
	// still write rows for the user (a relay batch that had claimed events
	// when the removal committed) had ended, and swept again after it.
	// False when EraseOptions.Settle ran out first: run the erase again.
	Settled bool `json:"settled"`
}

// EraseOptions tune EraseRecipient.
type EraseOptions struct {
	// Batch is how many notifications (with their deliveries and
	// attempts) one transaction anonymises (0: 500).
	Batch int
	// Settle bounds the wait for transactions older than the removal
	// (0: 10s).
	Settle time.Duration
	// Progress, when set, is called after every batch with the totals so
	// far.
	Progress func(Erasure)
}

// EraseRecipient removes a user from the tenant's directory
// (RemoveRecipient, one transaction) and then erases their personal data
// from what Herald stored for them, in batches of their notifications,
// each batch one transaction (see docs/retention.md, "What erase keeps"):
//
//   - notifications: user_id becomes Pseudonym; title and body become ""
//     and data {}; ids, event, type, severity, share key, project, times
//     and read/archived state stay.
//   - deliveries: user_id becomes Pseudonym; recipient (the address) and
//     content (the rendered message) become {}; a non-empty last_error
//     becomes ErasedMark; a delivery still on its way becomes FAILED with
//     ErasedInFlight, after the erase holds the advisory lock of its next
//     attempt, so that no listener is sending it then and none sends it
//     after the commit. Ids, channel, status, attempts, provider, provider
//     message id and times stay.
//   - delivery_attempts: a non-empty error becomes ErasedMark; the rest
//     stays.
//   - notification_actions: user_id becomes Pseudonym, data {}.
//   - notification_counters and live_tickets of the user are deleted.
//   - status_events naming the user (data.user_id): user_id becomes
//     Pseudonym, a non-empty reason becomes ErasedMark, an action's data
//     {}; the rows, their ids, kinds, times and publishing state stay, so
//     an event still owed to the broker or the webhook goes out with the
//     pseudonym. They are swept last, once the user's deliveries carry
//     the pseudonym: the events the erase's own changes record (a delivery
//     on its way moved to FAILED) are recorded with it.
//
// Every step only touches rows that still carry the user id, so an erase
// cut short is finished by running it again (with another pseudonym for
// the rest). It returns ErrNotFound when the tenant has no trace of the
// user at all. q must be a pool (each batch begins its own transaction);
// the tenant is set in each one, so q may run as herald_api.
func EraseRecipient(ctx context.Context, q Pool, tenantID, userID string, opt EraseOptions) (Erasure, error) {
	if opt.Batch <= 0 {
		opt.Batch = 500
	}
	if opt.Settle <= 0 {
		opt.Settle = 10 * time.Second
	}
	var e Erasure
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return e, fmt.Errorf("erase recipient: %w", err)
	}
	e.Pseudonym = ErasedPrefix + hex.EncodeToString(raw[:])
	var known bool
	err := inTenantTx(ctx, q, tenantID, func(tx pgx.Tx) error {
		var err error
		e.Removed, err = RemoveRecipient(ctx, tx, tenantID, userID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		known = err == nil
		if !known {
			known, err = hasStoredRows(ctx, tx, tenantID, userID)
		}
		return err
	})
	if err != nil {
		return e, fmt.Errorf("erase recipient: %w", err)
	}
	if !known {
		return e, ErrNotFound
	}
	// A relay batch claims its events (locking event_outbox) before it
	// reads the directory, in the transaction that writes its
	// notifications: one that read the user before the removal committed
	// holds that lock now, and may write their rows after the first sweep.
	// Its transaction is waited out (by its virtual transaction id, which
	// it holds until it ends), then swept after.
	var older []string
	if err := q.QueryRow(ctx, `SELECT COALESCE(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks
		WHERE locktype = 'relation' AND relation = 'event_outbox'::regclass
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&older); err != nil {
		return e, fmt.Errorf("erase recipient: %w", err)
	}
	if err := e.sweep(ctx, q, tenantID, userID, opt); err != nil {
		return e, err
	}
	deadline := time.Now().Add(opt.Settle)
	for !e.Settled {
		if err := q.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'virtualxid' AND virtualxid = ANY($1))`,
			older).Scan(&e.Settled); err != nil {
			return e, fmt.Errorf("erase recipient: %w", err)
		}
		if e.Settled || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return e, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := e.sweep(ctx, q, tenantID, userID, opt); err != nil {
		return e, err
	}
	if err := e.sweepStatusEvents(ctx, q, tenantID, userID, opt); err != nil {
		return e, err
	}
	return e, nil
}

// inTenantTx runs fn in a transaction of q with the tenant set (the
// project left empty: every project of the tenant).
func inTenantTx(ctx context.Context, q TxBeginner, tenantID string, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, q, func(tx pgx.Tx) error {
		if err := SetTenant(ctx, tx, tenantID, ""); err != nil {
			return err
		}
		return fn(tx)
	})
}

// hasStoredRows reports whether anything stored still carries the user id.
func hasStoredRows(ctx context.Context, q Querier, tenantID, userID string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM notifications WHERE tenant_id = $1 AND user_id = $2)
		OR EXISTS (SELECT 1 FROM notification_actions WHERE tenant_id = $1 AND user_id = $2)
		OR EXISTS (SELECT 1 FROM notification_counters WHERE tenant_id = $1 AND user_id = $2)
		OR EXISTS (SELECT 1 FROM live_tickets WHERE tenant_id = $1 AND user_id = $2)
		OR EXISTS (SELECT 1 FROM status_events WHERE tenant_id = $1 AND data->>'user_id' = $2)`, tenantID, userID).Scan(&ok)
	return ok, err
}

// sweep anonymises batches of the user's notifications until none is
// left, then their actions, counters and tickets.
func (e *Erasure) sweep(ctx context.Context, q TxBeginner, tenantID, userID string, opt EraseOptions) error {
	for {
		var n int
		var err error
		// A delivery that moved to its next attempt between the read and
		// the lock makes the batch roll back; the next try sees it there.
		for try := 0; try < 5; try++ {
			var b Erasure
			err = inTenantTx(ctx, q, tenantID, func(tx pgx.Tx) error {
				var err error
				n, err = eraseBatch(ctx, tx, tenantID, userID, e.Pseudonym, opt.Batch, &b)
				return err
			})
			if err == nil {
				e.Notifications += b.Notifications
				e.Deliveries += b.Deliveries
				e.Stopped += b.Stopped
				e.Attempts += b.Attempts
				break
			}
			if !errors.Is(err, errMoved) {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("erase recipient: %w", err)
		}
		if opt.Progress != nil {
			opt.Progress(*e)
		}
		if n < opt.Batch {
			break
		}
	}
	err := inTenantTx(ctx, q, tenantID, func(tx pgx.Tx) error {
		var a, c, t int64
		err := tx.QueryRow(ctx, `WITH a AS (UPDATE notification_actions SET user_id = $3, data = '{}'
				WHERE tenant_id = $1 AND user_id = $2 RETURNING 1),
			c AS (DELETE FROM notification_counters WHERE tenant_id = $1 AND user_id = $2 RETURNING 1),
			t AS (DELETE FROM live_tickets WHERE tenant_id = $1 AND user_id = $2 RETURNING 1)
			SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM c), (SELECT count(*) FROM t)`,
			tenantID, userID, e.Pseudonym).Scan(&a, &c, &t)
		e.Actions, e.Counters, e.Tickets = e.Actions+a, e.Counters+c, e.Tickets+t
		return err
	})
	if err != nil {
		return fmt.Errorf("erase recipient: actions, counters, tickets: %w", err)
	}
	return nil
}

// sweepStatusEvents anonymises the tenant's status events that name the
// user. Nothing indexes data.user_id (an index would cost every recorded
// event), so it walks the tenant's events by seq, opt.Batch*10 of them
// per transaction, and rewrites those naming the user. It runs once, after
// the last sweep: events recorded after it carry the pseudonym, since every
// row they are recorded from (deliveries, notifications, actions) does.
func (e *Erasure) sweepStatusEvents(ctx context.Context, q TxBeginner, tenantID, userID string, opt EraseOptions) error {
	var after int64
	for {
		var scanned, erased int64
		var last *int64
		err := inTenantTx(ctx, q, tenantID, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `WITH s AS (
					SELECT seq FROM status_events WHERE tenant_id = $1 AND seq > $4 ORDER BY seq LIMIT $5
				), u AS (
					UPDATE status_events e SET data = e.data || jsonb_build_object('user_id', $3::text)
						|| CASE WHEN e.data->>'reason' <> '' THEN jsonb_build_object('reason', $6::text) ELSE '{}' END
						|| CASE WHEN e.data ? 'data' THEN jsonb_build_object('data', '{}'::jsonb) ELSE '{}' END
					FROM s WHERE e.seq = s.seq AND e.tenant_id = $1 AND e.data->>'user_id' = $2
					RETURNING 1
				)
				SELECT (SELECT count(*) FROM s), (SELECT max(seq) FROM s), (SELECT count(*) FROM u)`,
				tenantID, userID, e.Pseudonym, after, opt.Batch*10, ErasedMark).Scan(&scanned, &last, &erased)
		})
		if err != nil {
			return fmt.Errorf("erase recipient: status events: %w", err)
		}
		e.StatusEvents += erased
		if opt.Progress != nil {
			opt.Progress(*e)
		}
		if last == nil || scanned < int64(opt.Batch*10) {
			return nil
		}
		after = *last
	}
}

// errMoved: a delivery of the batch moved to another attempt while the
// erase took its lock; the batch rolls back and is tried again.
var errMoved = errors.New("a delivery moved to its next attempt during the erase")

// eraseBatch anonymises up to limit of the user's notifications, their
// deliveries and attempts, in tx, and returns how many notifications it
// found.
func eraseBatch(ctx context.Context, tx pgx.Tx, tenantID, userID, pseudonym string, limit int, e *Erasure) (int, error) {
	rows, err := tx.Query(ctx, `SELECT notification_id::text, event_id, created_at FROM notifications
		WHERE tenant_id = $1 AND user_id = $2 ORDER BY created_at, notification_id LIMIT $3 FOR UPDATE`, tenantID, userID, limit)
	if err != nil {
		return 0, err
	}
	var nids, events []string
	var created []time.Time
	for rows.Next() {
		var id, ev string
		var at time.Time
		if err := rows.Scan(&id, &ev, &at); err != nil {
			rows.Close()
			return 0, err
		}
		nids, events, created = append(nids, id), append(events, ev), append(created, at)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(nids) == 0 {
		return 0, nil
	}
	// A delivery lives under its notification: same tenant, event, user
	// and created_at (the partition key), which the unique key indexes.
	type del struct {
		id       string
		at       time.Time
		attempts int
		open     bool
	}
	readDeliveries := func() ([]del, error) {
		rows, err := tx.Query(ctx, `SELECT d.delivery_id::text, d.created_at, d.attempts, d.status IN `+unfinished+`
			FROM unnest($3::text[], $4::timestamptz[]) AS n(event_id, created_at)
			JOIN deliveries d ON d.tenant_id = $1 AND d.event_id = n.event_id AND d.user_id = $2 AND d.created_at = n.created_at`,
			tenantID, userID, events, created)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (del, error) {
			var d del
			err := r.Scan(&d.id, &d.at, &d.attempts, &d.open)
			return d, err
		})
	}
	dels, err := readDeliveries()
	if err != nil {
		return 0, err
	}
	// Hold the next attempt of every delivery still on its way: a listener
	// sending it holds the same lock until its outcome is recorded, so this
	// waits for that send; once held, no listener starts it.
	var keys []string
	for _, d := range dels {
		if d.open {
			keys = append(keys, AttemptLockKey(d.id, d.attempts+1))
		}
	}
	if len(keys) > 0 {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended(k, $2))
			FROM (SELECT k FROM unnest($1::text[]) AS k ORDER BY k) AS s`, keys, int64(AttemptLockSeed)); err != nil {
			return 0, err
		}
		again, err := readDeliveries()
		if err != nil {
			return 0, err
		}
		held := make(map[string]int, len(dels))
		for _, d := range dels {
			held[d.id] = d.attempts
		}
		for _, d := range again {
			if d.open && held[d.id] != d.attempts {
				return 0, errMoved
			}
		}
		dels = again
	}
	ids, ats, attempts := make([]string, len(dels)), make([]time.Time, len(dels)), make([]int32, len(dels))
	for i, d := range dels {
		ids[i], ats[i], attempts[i] = d.id, d.at, int32(d.attempts)
	}
	err = tx.QueryRow(ctx, `WITH u AS (
			UPDATE deliveries d SET user_id = $3, recipient = '{}', content = '{}', lease_until = NULL, updated_at = now(),
				last_error = CASE WHEN d.status IN `+unfinished+` THEN $8 WHEN d.last_error = '' THEN '' ELSE $7 END,
				status = CASE WHEN d.status IN `+unfinished+` THEN 'FAILED' ELSE d.status END
			FROM unnest($4::text[]::uuid[], $5::timestamptz[], $6::int[]) AS m(id, created_at, attempts)
			WHERE d.tenant_id = $1 AND d.user_id = $2 AND d.delivery_id = m.id AND d.created_at = m.created_at
				AND (d.status NOT IN `+unfinished+` OR d.attempts = m.attempts)
			RETURNING d.last_error = $8 AS stopped
		), a AS (
			UPDATE delivery_attempts a SET error = $7
			FROM unnest($4::text[]::uuid[], $5::timestamptz[]) AS m(id, created_at)
			WHERE a.tenant_id = $1 AND a.delivery_id = m.id AND a.delivery_created_at = m.created_at AND a.error NOT IN ('', $7)
			RETURNING 1
		)
		SELECT (SELECT count(*) FROM u), (SELECT count(*) FILTER (WHERE stopped) FROM u), (SELECT count(*) FROM a)`,
		tenantID, userID, pseudonym, ids, ats, attempts, ErasedMark, ErasedInFlight).Scan(&e.Deliveries, &e.Stopped, &e.Attempts)
	if err != nil {
		return 0, err
	}
	if e.Deliveries != int64(len(dels)) {
		return 0, errMoved
	}
	tag, err := tx.Exec(ctx, `UPDATE notifications n SET user_id = $3, title = '', body = '', data = '{}'
		FROM unnest($4::text[]::uuid[], $5::timestamptz[]) AS m(id, created_at)
		WHERE n.tenant_id = $1 AND n.user_id = $2 AND n.notification_id = m.id AND n.created_at = m.created_at`,
		tenantID, userID, pseudonym, nids, created)
	if err != nil {
		return 0, err
	}
	e.Notifications = tag.RowsAffected()
	return len(nids), nil
}
