package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// attemptRows lists a delivery's attempts, from the table or from the log
// view, as "attempt outcome provider/message error [synthesized]".
func attemptRows(t *testing.T, q store.Querier, from, id string) []string {
	t.Helper()
	synth := "false"
	if from == "delivery_attempt_log" {
		synth = "synthesized"
	}
	rows, err := q.Query(context.Background(), `SELECT attempt || ' ' || outcome || ' ' || provider || '/' || provider_message_id || ' ' ||
			error || CASE WHEN `+synth+` THEN ' synthesized' ELSE '' END
		FROM `+from+` WHERE delivery_id = $1 ORDER BY attempt`, id)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestFirstTrySuccessLogsNoAttemptRow records each history of outcomes on
// one delivery: a first-try success writes no delivery_attempts row but
// delivery_attempt_log shows it as attempt 1, from the delivery row; every
// other attempt is logged, the final success of a retried delivery and a
// lost attempt (a lease that expired mid-send) included, and the log shows
// the same history as the table.
func TestFirstTrySuccessLogsNoAttemptRow(t *testing.T) {
	t.Parallel()
	now := time.Now()
	sent := func(attempt int) store.Outcome {
		return store.Outcome{Attempt: attempt, Kind: "sent", Provider: "smtp", ProviderMessageID: fmt.Sprintf("m%d", attempt),
			Status: store.StatusSent, StartedAt: now}
	}
	retry := func(attempt int) store.Outcome {
		return store.Outcome{Attempt: attempt, Kind: "retryable", Provider: "smtp", Error: "451 busy", Status: store.StatusRetry,
			NextAttemptAt: now, StartedAt: now}
	}
	for name, tc := range map[string]struct {
		lostFirst bool
		outs      []store.Outcome
		table     []string
		log       []string
		status    string
		attempts  int
	}{
		"first try sent": {
			outs: []store.Outcome{sent(1)}, table: []string{},
			log: []string{"1 sent smtp/m1  synthesized"}, status: store.StatusSent, attempts: 1,
		},
		"retried then sent": {
			outs:  []store.Outcome{retry(1), retry(2), sent(3)},
			table: []string{"1 retryable smtp/ 451 busy", "2 retryable smtp/ 451 busy", "3 sent smtp/m3 "},
			log:   []string{"1 retryable smtp/ 451 busy", "2 retryable smtp/ 451 busy", "3 sent smtp/m3 "}, status: store.StatusSent, attempts: 3,
		},
		"failed on the first try": {
			outs:  []store.Outcome{{Attempt: 1, Kind: "permanent", Provider: "smtp", Error: "550 no such user", Status: store.StatusFailed, StartedAt: now}},
			table: []string{"1 permanent smtp/ 550 no such user"},
			log:   []string{"1 permanent smtp/ 550 no such user"}, status: store.StatusFailed, attempts: 1,
		},
		"lost then sent": {
			lostFirst: true, outs: []store.Outcome{sent(1)},
			table: []string{"0 lost / lease expired while sending"},
			log:   []string{"0 lost / lease expired while sending", "1 sent smtp/m1  synthesized"}, status: store.StatusSent, attempts: 1,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := testenv.Postgres(t)
			ctx := context.Background()
			id := insertOneDelivery(t, db, 5)
			if _, err := db.Pool.Exec(ctx, `INSERT INTO event_outbox (tenant_id, event_id, event_type, status) VALUES ('t', 'e', 'X', 'PROCESSED')`); err != nil {
				t.Fatal(err)
			}
			if tc.lostFirst {
				// A send in progress whose lease ran out (the daemon died).
				if _, err := db.Pool.Exec(ctx, `UPDATE deliveries SET status = 'SENDING', lease_until = now() - interval '1s' WHERE delivery_id = $1`,
					id); err != nil {
					t.Fatal(err)
				}
				if n, err := store.ExpireLeases(ctx, db.Pool, 3, 0); err != nil || n != 1 {
					t.Fatalf("expire leases: %d %v", n, err)
				}
			}
			for _, o := range tc.outs {
				o.ID = id
				if n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{o}); err != nil || n != 1 {
					t.Fatalf("record attempt %d (%s): %d recorded, %v; want 1", o.Attempt, o.Kind, n, err)
				}
			}
			if d := cmp.Diff(tc.table, attemptRows(t, db.Pool, "delivery_attempts", id)); d != "" {
				t.Errorf("delivery_attempts (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.log, attemptRows(t, db.Pool, "delivery_attempt_log", id)); d != "" {
				t.Errorf("delivery_attempt_log (-want +got):\n%s", d)
			}
			// The API shows the delivery's attempts and provider as before.
			st, err := store.GetEvent(ctx, db.Pool, "t", "e")
			if err != nil || len(st.Deliveries) != 1 {
				t.Fatalf("get event: %+v %v", st, err)
			}
			if d := st.Deliveries[0]; d.Status != tc.status || d.Attempts != tc.attempts || d.Provider != "smtp" {
				t.Errorf("API: delivery %s after %d attempts by %q, want %s after %d by smtp", d.Status, d.Attempts, d.Provider, tc.status, tc.attempts)
			}
		})
	}
}

// TestSynthesizedAttemptKeepsTheAttemptsTimes: the first-try success that
// delivery_attempt_log rebuilds carries the attempt's start (as the
// listener took it) and its end (sent_at, the time of the outcome's
// statement, as finished_at was), and the delivery's month.
func TestSynthesizedAttemptKeepsTheAttemptsTimes(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	id := insertOneDelivery(t, db, 1)
	started := time.Now().Add(-1500 * time.Millisecond).Truncate(time.Microsecond)
	out := store.Outcome{ID: id, Attempt: 1, Kind: "sent", Provider: "smtp", ProviderMessageID: "m1", Status: store.StatusSent, StartedAt: started}
	if n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{out}); err != nil || n != 1 {
		t.Fatalf("record sent: %d %v", n, err)
	}
	var gotStart time.Time
	var sameEnd, sameMonth bool
	if err := db.Pool.QueryRow(ctx, `SELECT a.started_at, a.finished_at = d.sent_at, a.delivery_created_at = d.created_at
		FROM delivery_attempt_log a JOIN deliveries d USING (delivery_id) WHERE a.delivery_id = $1`, id).Scan(&gotStart, &sameEnd, &sameMonth); err != nil {
		t.Fatal(err)
	}
	if !gotStart.Equal(started) || !sameEnd || !sameMonth {
		t.Fatalf("synthesized attempt: started %v (want %v), finished at sent_at %v, delivery_created_at %v", gotStart, started, sameEnd, sameMonth)
	}
	// A second record of the same attempt changes nothing.
	if n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{out}); err != nil || n != 0 {
		t.Fatalf("second record of the first try: %d recorded, %v; want 0", n, err)
	}
	if got := attemptRows(t, db.Pool, "delivery_attempt_log", id); len(got) != 1 {
		t.Fatalf("log after a repeated record: %v, want one attempt", got)
	}
}

// TestAttemptLogFollowsRowLevelSecurity: the API's role sees its tenant's
// attempts in delivery_attempt_log, the rebuilt first-try success included,
// and none of another tenant's.
func TestAttemptLogFollowsRowLevelSecurity(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	id := insertOneDelivery(t, db, 1)
	out := store.Outcome{ID: id, Attempt: 1, Kind: "sent", Provider: "smtp", ProviderMessageID: "m1", Status: store.StatusSent, StartedAt: time.Now()}
	if _, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{out}); err != nil {
		t.Fatal(err)
	}
	api, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 2, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	for tenant, want := range map[string]int{"t": 1, "other": 0} {
		err := store.InTenant(ctx, api, tenant, "", func(tx pgx.Tx) error {
			if got := attemptRows(t, tx, "delivery_attempt_log", id); len(got) != want {
				return fmt.Errorf("sees %v, want %d attempts", got, want)
			}
			return nil
		})
		if err != nil {
			t.Errorf("herald_api in tenant %s: %v", tenant, err)
		}
	}
}

// TestEraseKeepsTheAttemptHistory erases the user of a delivery sent on
// its first try and of one sent after a failure: the log shows the same
// attempts as before (the failure's error erased, as in the table), and
// none of them names the user.
func TestEraseKeepsTheAttemptHistory(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	first := insertOneDelivery(t, db, 3)
	now := time.Now()
	if _, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{{ID: first, Attempt: 1, Kind: "sent", Provider: "smtp",
		ProviderMessageID: "m1", Status: store.StatusSent, StartedAt: now}}); err != nil {
		t.Fatal(err)
	}
	// A second delivery of the same user, on another channel: it fails
	// once, quoting the address, then is sent.
	var second string
	if err := db.Pool.QueryRow(ctx, `INSERT INTO deliveries (tenant_id, notification_id, event_id, event_type, user_id, user_type, channel, status,
			max_attempts, recipient, created_at) SELECT tenant_id, notification_id, event_id, event_type, user_id, user_type, 'SMS', 'PENDING', 3,
			'{"phone": "+15550001111"}', created_at
		FROM deliveries WHERE delivery_id = $1 RETURNING delivery_id::text`, first).Scan(&second); err != nil {
		t.Fatal(err)
	}
	for _, o := range []store.Outcome{
		{ID: second, Attempt: 1, Kind: "retryable", Provider: "sms", Error: "busy: +15550001111", Status: store.StatusRetry, NextAttemptAt: now, StartedAt: now},
		{ID: second, Attempt: 2, Kind: "sent", Provider: "sms", ProviderMessageID: "s2", Status: store.StatusSent, StartedAt: now},
	} {
		if n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{o}); err != nil || n != 1 {
			t.Fatalf("record %+v: %d %v", o, n, err)
		}
	}
	api, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 4, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	if _, err := store.EraseRecipient(ctx, api, "t", "u", store.EraseOptions{}); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		first:  {"1 sent smtp/m1  synthesized"},
		second: {"1 retryable sms/ " + store.ErasedMark, "2 sent sms/s2 "},
	}
	for id, w := range want {
		if d := cmp.Diff(w, attemptRows(t, db.Pool, "delivery_attempt_log", id)); d != "" {
			t.Errorf("attempts of %s after the erase (-want +got):\n%s", id, d)
		}
	}
	var traces int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM delivery_attempt_log a WHERE a::text LIKE '%+15550001111%'`).Scan(&traces); err != nil {
		t.Fatal(err)
	}
	if traces != 0 {
		t.Errorf("%d attempts still quote the erased user's phone", traces)
	}
	if s := strings.Join(attemptRows(t, db.Pool, "delivery_attempts", first), ";"); s != "" {
		t.Errorf("the first-try success has a row in delivery_attempts after the erase: %s", s)
	}
}

// TestRetentionTakesTheRebuiltAttempts: once retention has taken the
// attempts of a month (its partitions dropped) or of a tenant's own period
// (swept), delivery_attempt_log no longer rebuilds the first-try successes
// of those deliveries either, while a recent one still shows.
func TestRetentionTakesTheRebuiltAttempts(t *testing.T) {
	t.Parallel()
	const day = 24 * time.Hour
	for name, apply := range map[string]func(ctx context.Context, db *testenv.DB, now time.Time) error{
		"months dropped": func(ctx context.Context, db *testenv.DB, now time.Time) error {
			_, err := store.ApplyRetention(ctx, db.Pool, store.Retention{DeliveryAttempts: 30 * day}, now)
			return err
		},
		"tenant's own period swept": func(ctx context.Context, db *testenv.DB, now time.Time) error {
			_, err := store.ApplySweeps(ctx, db.Pool, store.Retention{Tenants: map[string]store.TenantRetention{"t": {DeliveryAttempts: 10 * day}}},
				now, store.SweepLimits{})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := testenv.Postgres(t)
			ctx := context.Background()
			now := time.Now()
			if _, err := db.Pool.Exec(ctx, `SELECT herald_ensure_partitions('delivery_attempts', $1, $2)`, now.Add(-120*day), now); err != nil {
				t.Fatal(err)
			}
			old := insertOneDelivery(t, db, 1)
			var recent string
			if err := db.Pool.QueryRow(ctx, `INSERT INTO deliveries (tenant_id, notification_id, event_id, event_type, user_id, user_type, channel, status)
				SELECT tenant_id, notification_id, event_id, event_type, user_id, user_type, 'SMS', 'PENDING' FROM deliveries WHERE delivery_id = $1
				RETURNING delivery_id::text`, old).Scan(&recent); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Pool.Exec(ctx, `UPDATE deliveries SET created_at = now() - interval '100 days' WHERE delivery_id = $1`, old); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{old, recent} {
				out := store.Outcome{ID: id, Attempt: 1, Kind: "sent", Provider: "smtp", ProviderMessageID: "m1", Status: store.StatusSent, StartedAt: now}
				if n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{out}); err != nil || n != 1 {
					t.Fatalf("record sent: %d %v", n, err)
				}
			}
			for id, want := range map[string]int{old: 1, recent: 1} {
				if got := attemptRows(t, db.Pool, "delivery_attempt_log", id); len(got) != want {
					t.Fatalf("before retention: %v, want %d attempt", got, want)
				}
			}
			if err := apply(ctx, db, now); err != nil {
				t.Fatal(err)
			}
			for id, want := range map[string]int{old: 0, recent: 1} {
				if got := attemptRows(t, db.Pool, "delivery_attempt_log", id); len(got) != want {
					t.Errorf("after retention: %v, want %d attempts", got, want)
				}
			}
			// The delivery row itself stays (deliveries have their own
			// retention).
			var rows int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE delivery_id = $1`, old).Scan(&rows); err != nil || rows != 1 {
				t.Fatalf("old delivery rows: %d %v", rows, err)
			}
		})
	}
}

// Migration 0115 goes down with the first-try successes written back into
// delivery_attempts (the table is then the whole history again), and up
// again.
func TestMigration0115RoundTrip(t *testing.T) {
	t.Parallel()
	db := testenv.PostgresAt(t, 115)
	ctx := context.Background()
	id := insertOneDelivery(t, db, 1)
	out := store.Outcome{ID: id, Attempt: 1, Kind: "sent", Provider: "smtp", ProviderMessageID: "m1", Status: store.StatusSent, StartedAt: time.Now()}
	if n, err := store.RecordOutcomes(ctx, db.Pool, []store.Outcome{out}); err != nil || n != 1 {
		t.Fatalf("record sent: %d %v", n, err)
	}
	want := []string{"1 sent smtp/m1 "}
	var log strings.Builder
	if err := store.MigrateTo(ctx, db.URL, "down", &log); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, attemptRows(t, db.Pool, "delivery_attempts", id)); d != "" {
		t.Errorf("after down, delivery_attempts (-want +got):\n%s", d)
	}
	if err := store.MigrateTo(ctx, db.URL, "up", &log); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, attemptRows(t, db.Pool, "delivery_attempt_log", id)); d != "" {
		t.Errorf("after up again, delivery_attempt_log (-want +got):\n%s", d)
	}
}
