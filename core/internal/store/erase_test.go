package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// eraseWorld is a tenant "t" whose user u1 has a directory entry, stored
// notifications, deliveries in every state, attempts, an action, a
// counter and a live ticket; u2 in the same tenant and u1 of tenant
// "other" have the same kinds of rows and must stay untouched.
type eraseWorld struct {
	db  *testenv.DB
	api *pgxpool.Pool
	// open maps the ids of u1's deliveries that were still on their way to
	// their status.
	open map[string]string
}

// secretsOf are strings only u1 of tenant t's rows hold.
var secretsOf = []string{"u1@example.com", "+15550001111", "tok-u1", "Secret title for u1", "Dear u1", "u1-card-4242"}

func newEraseWorld(t *testing.T, events int) *eraseWorld {
	t.Helper()
	ctx := context.Background()
	w := &eraseWorld{db: testenv.Postgres(t), open: map[string]string{}}
	for _, ten := range []string{"t", "other"} {
		if err := store.EnsureTenant(ctx, w.db.Pool, ten, ten); err != nil {
			t.Fatal(err)
		}
		email, phone, tok := "u1@example.com", "+15550001111", "tok-u1"
		if ten == "other" {
			email, phone, tok = "u1@other.example", "+15550002222", "tok-other"
		}
		dir := &directory.Directory{
			Recipients: []directory.Recipient{
				{UserID: "u1", UserType: "STAFF", Active: true, Email: email, Phone: phone, DeviceTokens: []string{tok}},
				{UserID: "u2", UserType: "STAFF", Active: true, Email: "u2@example.com"},
			},
			Groups:      []directory.Group{{Key: "g1", Type: "team"}},
			Members:     []directory.Member{{Group: "g1", UserID: "u1", Role: "MANAGER"}, {Group: "g1", UserID: "u2"}},
			Preferences: []directory.Preference{{UserID: "u1", Channel: "SMS", Enabled: false}},
		}
		if ten == "other" {
			// u2 is tenant t's only.
			dir.Recipients, dir.Members = dir.Recipients[:1], dir.Members[:1]
		}
		if err := store.ImportDirectory(ctx, w.db.Pool, ten, dir); err != nil {
			t.Fatal(err)
		}
	}
	// Tenant t's webhook wants delivery and action events: those the seed
	// records are owed to it, unpublished, when the erase runs.
	if _, err := w.db.Pool.Exec(ctx, `INSERT INTO tenant_webhooks (tenant_id, url, kinds, secret)
		VALUES ('t', 'http://127.0.0.1:9/hook', ARRAY['delivery.sent', 'delivery.failed', 'notification.acted'], 'whsec_' || repeat('A', 32))`); err != nil {
		t.Fatal(err)
	}
	statuses := []string{"SENT", "FAILED", "PENDING", "PUBLISHED", "RETRY", "DEFERRED", "SENDING", "SENT"}
	base := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	for ten, users := range map[string][]string{"t": {"u1", "u2"}, "other": {"u1"}} {
		for _, u := range users {
			email := u + "@example.com"
			if ten == "other" {
				email = "u1@other.example"
			}
			for i := range events {
				// Notifications spread over two months: two partitions (or
				// the default one) are touched.
				at := base.AddDate(0, 0, -i*5)
				ev := fmt.Sprintf("ev-%d", i)
				status := statuses[i%len(statuses)]
				lastErr := ""
				if status == "FAILED" || status == "RETRY" {
					lastErr = "550 mailbox " + email + " unknown"
				}
				var nid, did string
				err := w.db.Pool.QueryRow(ctx, `INSERT INTO notifications (tenant_id, event_id, user_id, event_type, title, body, data, created_at, share_key)
					VALUES ($1, $2, $3, 'ORDER', $4, $5, $6, $7, $2) RETURNING notification_id::text`,
					ten, ev, u, "Secret title for "+u, "Dear "+u+", your order", fmt.Sprintf(`{"card": "%s-card-4242"}`, u), at).Scan(&nid)
				if err != nil {
					t.Fatal(err)
				}
				err = w.db.Pool.QueryRow(ctx, `INSERT INTO deliveries (tenant_id, notification_id, event_id, event_type, user_id, user_type, channel,
						status, attempts, recipient, content, last_error, created_at, provider, provider_message_id)
					VALUES ($1, $2, $3, 'ORDER', $4, 'STAFF', 'EMAIL', $5, $6, $7, $8, $9, $10, 'smtp', 'msg-' || $3)
					RETURNING delivery_id::text`,
					ten, nid, ev, u, status, i%3, fmt.Sprintf(`{"email": %q, "phone": %q}`, email, map[bool]string{true: "+15550001111", false: "+15550009999"}[email == "u1@example.com"]),
					fmt.Sprintf(`{"subject": "Secret title for %s", "body": "Dear %s"}`, u, u), lastErr, at).Scan(&did)
				if err != nil {
					t.Fatal(err)
				}
				if ten == "t" && u == "u1" && strings.Contains("PENDING PUBLISHED RETRY DEFERRED SENDING", status) {
					w.open[did] = status
				}
				for a := 1; a <= i%3; a++ {
					if _, err := w.db.Pool.Exec(ctx, `INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, error, started_at, delivery_created_at)
						VALUES ($1, $2, $3, 'RETRY', $4, $5, $5)`, ten, did, a, "450 try later, "+email, at); err != nil {
						t.Fatal(err)
					}
				}
				if i == 0 {
					if _, err := w.db.Pool.Exec(ctx, `INSERT INTO notification_actions (tenant_id, share_key, notification_id, user_id, action, data, event_id)
						VALUES ($1, $2 || ':' || $4, $3, $4, 'CONFIRMED', $5, $2)`, ten, ev, nid, u, fmt.Sprintf(`{"note": "Dear %s"}`, u)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := w.db.Pool.Exec(ctx, `INSERT INTO notification_counters (tenant_id, user_id, unread) VALUES ($1, $2, $3)`, ten, u, events); err != nil {
				t.Fatal(err)
			}
			if _, err := w.db.Pool.Exec(ctx, `INSERT INTO live_tickets (ticket_hash, tenant_id, user_id, expires_at)
				VALUES (decode(md5($1 || $2), 'hex'), $1, $2, now() + interval '1 hour')`, ten, u); err != nil {
				t.Fatal(err)
			}
		}
	}
	var err error
	w.api, err = store.NewPoolWith(ctx, w.db.URL, store.PoolOptions{MaxConns: 4, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.api.Close)
	return w
}

// tenantTables lists every table with a tenant_id column whose rows may
// hold a user's data (partitions are read through their parents).
func userTables(t *testing.T, ctx context.Context, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
		  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped)
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// traces returns, per table, how many rows of tenant t still hold one of
// secretsOf anywhere in the row, or carry user_id u1 (in a user_id column,
// or in a jsonb data column's user_id, as status_events do).
func traces(t *testing.T, ctx context.Context, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, tbl := range userTables(t, ctx, pool) {
		var hasUser, hasData bool
		if err := pool.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'user_id' AND NOT attisdropped),
			EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'data' AND atttypid = 'jsonb'::regtype AND NOT attisdropped)`,
			tbl).Scan(&hasUser, &hasData); err != nil {
			t.Fatal(err)
		}
		cond := `r::text LIKE ANY ($1) OR r::text LIKE '%"u1"%'`
		if hasUser {
			cond += ` OR r.user_id = 'u1'`
		}
		if hasData {
			cond += ` OR r.data->>'user_id' = 'u1'`
		}
		pats := make([]string, len(secretsOf))
		for i, s := range secretsOf {
			pats[i] = "%" + s + "%"
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+tbl+` r WHERE r.tenant_id = 't' AND (`+cond+`)`, pats).Scan(&n); err != nil {
			t.Fatalf("%s: %v", tbl, err)
		}
		if n > 0 {
			got[tbl] = n
		}
	}
	return got
}

// counts are the rows per table of a tenant, and the deliveries per status.
func counts(t *testing.T, ctx context.Context, pool *pgxpool.Pool, tenant string) string {
	t.Helper()
	var s string
	err := pool.QueryRow(ctx, `SELECT format('notifications=%s deliveries=%s attempts=%s actions=%s sent=%s',
		(SELECT count(*) FROM notifications WHERE tenant_id = $1), (SELECT count(*) FROM deliveries WHERE tenant_id = $1),
		(SELECT count(*) FROM delivery_attempts WHERE tenant_id = $1), (SELECT count(*) FROM notification_actions WHERE tenant_id = $1),
		(SELECT count(*) FROM deliveries WHERE tenant_id = $1 AND status = 'SENT'))`, tenant).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEraseRecipientLeavesNoTrace erases u1 of tenant t through the API
// role (row-level security on), in batches smaller than their rows: no
// row of the tenant in any table still holds u1's addresses, rendered
// text or user id, the rows are all still there (counts, SENT statuses
// and attempts kept), deliveries on their way are FAILED and no longer
// sendable, and u2 and the other tenant's u1 are untouched. A second erase
// finds nothing (ErrNotFound).
func TestEraseRecipientLeavesNoTrace(t *testing.T) {
	w := newEraseWorld(t, 11)
	ctx := context.Background()
	if got := traces(t, ctx, w.db.Pool); len(got) < 8 {
		t.Fatalf("the seed holds u1's data in only %v", got)
	}
	beforeT, beforeOther := counts(t, ctx, w.db.Pool, "t"), counts(t, ctx, w.db.Pool, "other")
	var batches int
	e, err := store.EraseRecipient(ctx, w.api, "t", "u1", store.EraseOptions{Batch: 3, Progress: func(store.Erasure) { batches++ }})
	if err != nil {
		t.Fatal(err)
	}
	want := store.Erasure{Removed: store.RemovedRecipient{Recipient: 1, Devices: 1, Memberships: 1, Preferences: 1}, Pseudonym: e.Pseudonym,
		Notifications: 11, Deliveries: 11, Stopped: int64(len(w.open)), Attempts: 10, Actions: 1, Counters: 1, Tickets: 1, StatusEvents: 6, Settled: true}
	if e != want {
		t.Fatalf("erasure\n got %+v\nwant %+v", e, want)
	}
	if batches < 4 || !strings.HasPrefix(e.Pseudonym, store.ErasedPrefix) {
		t.Fatalf("%d batches of 3 for 11 notifications, pseudonym %q", batches, e.Pseudonym)
	}
	if got := traces(t, ctx, w.db.Pool); len(got) > 0 {
		t.Fatalf("rows still holding u1's data after the erase: %v", got)
	}
	if after := counts(t, ctx, w.db.Pool, "t"); after != beforeT {
		t.Fatalf("tenant t's counts changed: %s, were %s", after, beforeT)
	}
	if after := counts(t, ctx, w.db.Pool, "other"); after != beforeOther {
		t.Fatalf("tenant other's counts changed: %s, were %s", after, beforeOther)
	}
	// Kept: ids, statuses, attempts, provider ids, times, read state; the
	// pseudonym replaces the user in every kept row.
	var kept int
	if err := w.db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries d JOIN notifications n USING (notification_id)
		WHERE d.tenant_id = 't' AND d.user_id = $1 AND n.user_id = $1 AND d.provider_message_id = 'msg-' || d.event_id
		  AND d.recipient = '{}' AND d.content = '{}' AND n.title = '' AND n.body = '' AND n.data = '{}'`, e.Pseudonym).Scan(&kept); err != nil || kept != 11 {
		t.Fatalf("anonymised rows under the pseudonym: %d (%v), want 11", kept, err)
	}
	for id, was := range w.open {
		var status, lastErr string
		var attempts int
		if err := w.db.Pool.QueryRow(ctx, `SELECT status, last_error, attempts FROM deliveries WHERE delivery_id = $1`, id).Scan(&status, &lastErr, &attempts); err != nil {
			t.Fatal(err)
		}
		if status != "FAILED" || lastErr != store.ErasedInFlight {
			t.Errorf("delivery %s was %s: now %s %q, want FAILED %q", id, was, status, lastErr, store.ErasedInFlight)
		}
		ok, err := store.Sendable(ctx, w.db.Pool, []store.Ref{{ID: id, Attempt: attempts + 1}})
		if err != nil || ok[id] {
			t.Errorf("delivery %s (was %s) is still sendable after the erase (%v)", id, was, err)
		}
	}
	// Status events: the seed's (5 final deliveries, 1 action) are
	// rewritten in place and stay owed to the webhook, now under the
	// pseudonym; the erase's own stops are recorded as FAILED under the
	// pseudonym, owed too; the erase's other changes record nothing.
	rows, err := w.db.Pool.Query(ctx, `SELECT kind, COALESCE(data->>'reason', ''), COALESCE(data->>'data', ''), count(*)
		FROM status_events WHERE tenant_id = 't' AND data->>'user_id' = $1 AND webhook_due_at IS NOT NULL
		  AND (txid, seq) > (SELECT txid, seq FROM status_event_cursor)
		GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`, e.Pseudonym)
	if err != nil {
		t.Fatal(err)
	}
	var evs []string
	for rows.Next() {
		var kind, reason, data string
		var n int
		if err := rows.Scan(&kind, &reason, &data, &n); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, fmt.Sprintf("%s %q %s %d", kind, reason, data, n))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	wantEvs := []string{
		fmt.Sprintf(`delivery.failed %q  2`, store.ErasedMark),
		fmt.Sprintf(`delivery.failed %q  %d`, store.ErasedInFlight, len(w.open)),
		`delivery.sent ""  3`,
		`notification.acted "" {} 1`,
	}
	if fmt.Sprint(evs) != fmt.Sprint(wantEvs) {
		t.Fatalf("tenant t's owed status events under the pseudonym:\n got %q\nwant %q", evs, wantEvs)
	}
	var allEvs, u2Evs int
	if err := w.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM status_events WHERE tenant_id = 't' AND data->>'user_id' <> 'u2'),
		(SELECT count(*) FROM status_events WHERE tenant_id = 't' AND data->>'user_id' = 'u2' AND data::text LIKE '%u2@example.com%')`).Scan(&allEvs, &u2Evs); err != nil {
		t.Fatal(err)
	}
	if allEvs != 6+len(w.open) || u2Evs != 2 {
		t.Fatalf("tenant t's events: %d not u2's (want %d), %d of u2's still quoting u2's address (want 2)", allEvs, 6+len(w.open), u2Evs)
	}
	// u2 and the other tenant's u1 keep everything.
	var u2, other int
	if err := w.db.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM notifications WHERE tenant_id = 't' AND user_id = 'u2' AND title = 'Secret title for u2'),
		(SELECT count(*) FROM deliveries WHERE tenant_id = 'other' AND user_id = 'u1' AND recipient->>'email' = 'u1@other.example')`).Scan(&u2, &other); err != nil {
		t.Fatal(err)
	}
	if u2 != 11 || other != 11 {
		t.Fatalf("untouched rows: u2 %d, other tenant's u1 %d; want 11 each", u2, other)
	}
	var members int
	if err := w.db.Pool.QueryRow(ctx, `SELECT count(*) FROM group_members WHERE tenant_id = 'other' AND user_id = 'u1'`).Scan(&members); err != nil || members != 1 {
		t.Fatalf("the other tenant's u1 lost its membership: %d (%v)", members, err)
	}
	// Idempotent: nothing is left to erase.
	if _, err := store.EraseRecipient(ctx, w.api, "t", "u1", store.EraseOptions{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second erase: %v, want ErrNotFound", err)
	}
	// Another tenant's user is not found either: tenant "other" has no u2.
	if _, err := store.EraseRecipient(ctx, w.api, "other", "u2", store.EraseOptions{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("erase of another tenant's user: %v, want ErrNotFound", err)
	}
}

// TestEraseRecipientResumes cuts an erase short after its first batch (the
// context is cancelled, as a killed CLI or a dropped request would): the
// directory entry is gone, part of the rows are anonymised, and a second
// erase finishes the rest.
func TestEraseRecipientResumes(t *testing.T) {
	w := newEraseWorld(t, 9)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := store.EraseRecipient(ctx, w.api, "t", "u1", store.EraseOptions{Batch: 2, Progress: func(store.Erasure) { cancel() }})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cut erase: %v, want context.Canceled", err)
	}
	left := traces(t, context.Background(), w.db.Pool)
	if left["notifications"] == 0 || left["notifications"] >= 9 || left["recipients"] != 0 {
		t.Fatalf("after one batch of 2: %v; want the recipient gone and some notifications left", left)
	}
	e, err := store.EraseRecipient(context.Background(), w.api, "t", "u1", store.EraseOptions{Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if e.Removed.Total() != 0 || e.Notifications != int64(left["notifications"]) || !e.Settled {
		t.Fatalf("resumed erase %+v; want no directory rows and the %d notifications left", e, left["notifications"])
	}
	if got := traces(t, context.Background(), w.db.Pool); len(got) > 0 {
		t.Fatalf("rows still holding u1's data after the resumed erase: %v", got)
	}
	// An erase cut short in its last step leaves only status events naming
	// the user: the next erase still finds them, and finishes.
	if _, err := w.db.Pool.Exec(context.Background(), `INSERT INTO status_events (tenant_id, kind, data)
		VALUES ('t', 'delivery.failed', '{"user_id": "u1", "reason": "550 mailbox u1@example.com unknown"}')`); err != nil {
		t.Fatal(err)
	}
	e, err = store.EraseRecipient(context.Background(), w.api, "t", "u1", store.EraseOptions{Batch: 2})
	if err != nil || e.StatusEvents != 1 || e.Notifications != 0 {
		t.Fatalf("erase of a user only status events name: %+v, %v; want 1 status event", e, err)
	}
	if got := traces(t, context.Background(), w.db.Pool); len(got) > 0 {
		t.Fatalf("rows still holding u1's data after the last erase: %v", got)
	}
}

// TestEraseWaitsForASendInProgress: a listener holds the advisory lock of
// a delivery's next attempt while it sends (as core/internal/delivery's
// in-flight guard does). The erase waits for it: the listener records
// SENT and releases, and the erase then anonymises the SENT delivery
// without turning it into FAILED. The other delivery on its way, whose
// lock nobody held, is FAILED and no longer sendable.
func TestEraseWaitsForASendInProgress(t *testing.T) {
	w := newEraseWorld(t, 8)
	ctx := context.Background()
	var sending, other string
	var attempts int
	for id, st := range w.open {
		switch {
		case st == "PUBLISHED" && sending == "":
			sending = id
		case other == "":
			other = id
		}
	}
	if err := w.db.Pool.QueryRow(ctx, `SELECT attempts FROM deliveries WHERE delivery_id = $1`, sending).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	listener, err := w.db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Release()
	key := store.AttemptLockKey(sending, attempts+1)
	var held bool
	if err := listener.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, $2))`, key, int64(store.AttemptLockSeed)).Scan(&held); err != nil || !held {
		t.Fatalf("listener lock: %v %v", held, err)
	}
	done := make(chan error, 1)
	var e store.Erasure
	go func() {
		var err error
		e, err = store.EraseRecipient(ctx, w.api, "t", "u1", store.EraseOptions{})
		done <- err
	}()
	testenv.Eventually(t, 10*time.Second, func() bool {
		var waiting bool
		_ = w.db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&waiting)
		return waiting
	}, "the erase never waited for the listener's lock")
	select {
	case err := <-done:
		t.Fatalf("the erase finished while a send was in progress: %v", err)
	default:
	}
	// The listener records its outcome as RecordOutcomes does, then lets go.
	if _, err := listener.Exec(ctx, `UPDATE deliveries SET status = 'SENT', attempts = attempts + 1, sent_at = now()
		WHERE delivery_id = $1 AND status IN ('PENDING', 'PUBLISHED', 'RETRY')`, sending); err != nil {
		t.Fatal(err)
	}
	if _, err := listener.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, $2))`, key, int64(store.AttemptLockSeed)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the erase did not finish after the listener let go")
	}
	var st, rcpt string
	if err := w.db.Pool.QueryRow(ctx, `SELECT status, recipient::text FROM deliveries WHERE delivery_id = $1`, sending).Scan(&st, &rcpt); err != nil {
		t.Fatal(err)
	}
	if st != "SENT" || rcpt != "{}" {
		t.Fatalf("the delivery sent during the erase: %s %s, want SENT {}", st, rcpt)
	}
	if err := w.db.Pool.QueryRow(ctx, `SELECT status FROM deliveries WHERE delivery_id = $1`, other).Scan(&st); err != nil || st != "FAILED" {
		t.Fatalf("the other open delivery: %s (%v), want FAILED", st, err)
	}
	if e.Stopped != int64(len(w.open)-1) {
		t.Fatalf("stopped %d, want %d", e.Stopped, len(w.open)-1)
	}
}

// TestRemoveRecipientTakesEffectForTheNextDecision: once removed, the user
// is not in the directory the relay loads for the group's next event, and
// a second removal is ErrNotFound.
func TestRemoveRecipientTakesEffectForTheNextDecision(t *testing.T) {
	w := newEraseWorld(t, 1)
	ctx := context.Background()
	needs := directory.Needs{GroupKeys: []string{"g1"}}
	err := store.InTenant(ctx, w.api, "t", "", func(tx pgx.Tx) error {
		r, err := store.RemoveRecipient(ctx, tx, "t", "u1")
		if err == nil && r != (store.RemovedRecipient{Recipient: 1, Devices: 1, Memberships: 1, Preferences: 1}) {
			err = fmt.Errorf("removed %+v", r)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := store.LoadDirectory(ctx, w.db.Pool, "t", needs)
	if err != nil {
		t.Fatal(err)
	}
	if len(dir.Members) != 1 || dir.Members[0].UserID != "u2" || len(dir.Recipients) != 1 {
		t.Fatalf("group g1 after removing u1: members %+v, recipients %+v", dir.Members, dir.Recipients)
	}
	err = store.InTenant(ctx, w.api, "t", "", func(tx pgx.Tx) error {
		_, err := store.RemoveRecipient(ctx, tx, "t", "u1")
		return err
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second removal: %v, want ErrNotFound", err)
	}
	// The stored notification is not the directory's: removal keeps it.
	var n int
	if err := w.db.Pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE tenant_id = 't' AND user_id = 'u1'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("u1's notifications after a removal without erase: %d (%v), want 1", n, err)
	}
}
