package statusev_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/statusev"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/core/internal/webhook"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
)

// statusChannel opens a channel on the broker at url (closed with the
// test) and declares the status exchange on it, as the stage does.
func statusChannel(t *testing.T, url, exchange string) *amqp.Channel {
	t.Helper()
	ch := testenv.AMQPChannel(t, url)
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	return ch
}

// seed makes tenant t with one notification and n deliveries (PENDING).
func seed(t *testing.T, db *testenv.DB, tenant string, n int) {
	t.Helper()
	ctx := context.Background()
	if err := store.EnsureTenant(ctx, db.Pool, tenant, tenant); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO notifications (tenant_id, event_id, user_id, event_type, share_key) VALUES ($1, 'e1', 'u1', 'T', 's1')`, tenant); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO deliveries (tenant_id, notification_id, event_id, event_type, user_id, user_type, channel)
		SELECT tenant_id, notification_id, event_id, event_type, user_id, 'STAFF', 'C' || g FROM notifications, generate_series(1, $2) g WHERE tenant_id = $1`, tenant, n); err != nil {
		t.Fatal(err)
	}
}

func kinds(t *testing.T, q store.Querier, tenant string) map[string]int {
	t.Helper()
	rows, err := q.Query(context.Background(), `SELECT kind, count(*) FROM status_events WHERE tenant_id = $1 GROUP BY kind`, tenant)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	return out
}

// The triggers record a status event for a change to a final status, a
// read and an action, in the change's transaction: a rollback records
// nothing, a move between non-final states or within one final status
// records nothing, and the webhook is owed only what it wants.
func TestTriggersRecordFinalOutcomesReadsAndActions(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	seed(t, db, "acme", 6)
	if _, err := store.PutWebhook(ctx, db.Pool, "acme", "https://hooks.example.com/h", []string{"delivery.failed", "notification.read"}, true, webhook.NewSecret()); err != nil {
		t.Fatal(err)
	}
	exec := func(q string) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`UPDATE deliveries SET status = 'PUBLISHED'`)
	exec(`UPDATE deliveries SET status = 'RETRY' WHERE channel = 'C1'`)
	if got := kinds(t, db.Pool, "acme"); len(got) != 0 {
		t.Fatalf("non-final moves recorded %v", got)
	}
	// A rolled-back transaction leaves no event.
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE deliveries SET status = 'SENT'`); err != nil {
			return err
		}
		if n := kinds(t, tx, "acme")["delivery.sent"]; n != 6 {
			t.Errorf("inside the transaction: %d delivery.sent", n)
		}
		return context.Canceled
	})
	if err != context.Canceled {
		t.Fatal(err)
	}
	if got := kinds(t, db.Pool, "acme"); len(got) != 0 {
		t.Fatalf("a rollback left %v", got)
	}
	exec(`UPDATE deliveries SET status = 'SENT' WHERE channel IN ('C1', 'C2')`)
	exec(`UPDATE deliveries SET status = 'FAILED', last_error = 'boom' WHERE channel = 'C3'`)
	exec(`UPDATE deliveries SET status = 'SKIPPED', last_error = 'offline' WHERE channel = 'C4'`)
	exec(`UPDATE deliveries SET status = 'CANCELLED' WHERE channel = 'C5'`)
	exec(`UPDATE deliveries SET status = 'DIGESTED' WHERE channel = 'C6'`)
	exec(`UPDATE deliveries SET attempts = attempts + 1 WHERE channel = 'C1'`) // SENT stays SENT
	exec(`INSERT INTO deliveries (tenant_id, notification_id, event_id, event_type, user_id, user_type, channel, status)
		SELECT tenant_id, notification_id, event_id, event_type, user_id, 'STAFF', 'C7', 'SKIPPED' FROM notifications WHERE tenant_id = 'acme'`)
	exec(`UPDATE notifications SET read_at = now()`)
	exec(`UPDATE notifications SET read_at = now()`) // already read: no second event
	exec(`UPDATE notifications SET read_at = NULL`)
	exec(`UPDATE notifications SET read_at = now()`)
	exec(`INSERT INTO notification_actions (tenant_id, share_key, notification_id, user_id, action)
		SELECT tenant_id, share_key, notification_id, user_id, 'CONFIRMED' FROM notifications WHERE tenant_id = 'acme'`)
	want := map[string]int{"delivery.sent": 2, "delivery.failed": 1, "delivery.skipped": 2, "delivery.cancelled": 1,
		"delivery.digested": 1, "notification.read": 2, "notification.acted": 1}
	got := kinds(t, db.Pool, "acme")
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d events, want %d (all: %v)", k, got[k], n, got)
		}
	}
	var owed []string
	rows, _ := db.Pool.Query(ctx, `SELECT kind FROM status_events WHERE webhook_due_at IS NOT NULL ORDER BY kind`)
	owed, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(owed) != 3 || owed[0] != "delivery.failed" || owed[1] != "notification.read" {
		t.Errorf("owed to the webhook: %v, %v; want the failed delivery and the two reads", owed, err)
	}
	var data struct {
		Channel, Status, Reason string
	}
	var raw []byte
	if err := db.Pool.QueryRow(ctx, `SELECT data FROM status_events WHERE kind = 'delivery.failed'`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &data); err != nil || data.Channel != "C3" || data.Status != "FAILED" || data.Reason != "boom" {
		t.Errorf("delivery.failed data %s", raw)
	}
}

// Two stages drain one database to one broker and one webhook receiver:
// every event is published once and POSTed once (SKIP LOCKED claims and
// leases), each tenant's only to its own routing key and webhook.
func TestTwoStagesSendEachEventOnce(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	mq := testenv.RabbitMQ(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := statusev.DefaultConfig()
	cfg.PollInterval = 50 * time.Millisecond
	cfg.WebhookAllowLoopback = true
	cfg.WebhookTimeout = 5 * time.Second

	ch := statusChannel(t, mq.URL, cfg.Exchange)
	var mu sync.Mutex
	published := map[string]int{}
	posted := map[string]int{}
	for _, ten := range []string{"acme", "globex"} {
		q, err := ch.QueueDeclare("", false, true, true, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q.Name, ten+".#", cfg.Exchange, false, nil); err != nil {
			t.Fatal(err)
		}
		msgs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func(ten string) {
			for d := range msgs {
				var m statusev.Message
				_ = json.Unmarshal(d.Body, &m)
				mu.Lock()
				published[ten+"/"+m.TenantID+"/"+d.MessageId]++
				mu.Unlock()
			}
		}(ten)
	}
	secrets := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ten := r.URL.Path[1:]
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify(secrets[ten], r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), body, time.Now(), webhook.Tolerance); err != nil {
			t.Errorf("%s: %v", ten, err)
		}
		var m statusev.Message
		_ = json.Unmarshal(body, &m)
		mu.Lock()
		posted[ten+"/"+m.TenantID+"/"+m.ID]++
		mu.Unlock()
	}))
	defer srv.Close()
	for _, ten := range []string{"acme", "globex"} {
		seed(t, db, ten, 40)
		secrets[ten] = webhook.NewSecret()
		if _, err := store.PutWebhook(ctx, db.Pool, ten, srv.URL+"/"+ten, webhook.Kinds, true, secrets[ten]); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range 2 {
		bc := broker.Dial(mq.URL, broker.Topology{Exchange: "herald.deliveries"}, hclog.NewNullLogger())
		defer bc.Close()
		s := statusev.New(db.Pool, bc, cfg, nil, hclog.NewNullLogger().Named(string(rune('a'+i))))
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Run(ctx) }()
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE deliveries SET status = CASE WHEN channel < 'C3' THEN 'FAILED' ELSE 'SENT' END`); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM status_events WHERE (txid, seq) > (SELECT txid, seq FROM status_event_cursor) OR webhook_due_at IS NOT NULL`).Scan(&n)
		return n == 0
	}, "every status event published and delivered")
	cancel()
	wg.Wait()
	rows, _ := db.Pool.Query(context.Background(), `SELECT tenant_id || '/' || tenant_id || '/' || event_id::text FROM status_events`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) != 80 {
		t.Fatalf("%d events recorded, %v", len(ids), err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(published) >= len(ids)
	}, "every message consumed")
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if published[id] != 1 || posted[id] != 1 {
			t.Errorf("%s: published %d times, posted %d times; want once each", id, published[id], posted[id])
		}
	}
	if len(published) != len(ids) || len(posted) != len(ids) {
		t.Errorf("%d published and %d posted (keys tenant/tenant/id) for %d events: something crossed tenants", len(published), len(posted), len(ids))
	}
}

// TestWebhookRetryFollowsTheSettings: webhook POSTs retry on a
// channel.RetryPolicy built from the webhook_* settings.
func TestWebhookRetryFollowsTheSettings(t *testing.T) {
	t.Parallel()
	cfg := statusev.DefaultConfig()
	cfg.WebhookMaxAttempts, cfg.WebhookBackoffInitial, cfg.WebhookBackoffMax = 3, time.Second, 3*time.Second
	p := cfg.WebhookRetry()
	if p.Exhausted(2) || !p.Exhausted(3) {
		t.Errorf("Exhausted(2), Exhausted(3) = %v, %v; want false, true", p.Exhausted(2), p.Exhausted(3))
	}
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 3 * time.Second, 9: 3 * time.Second} {
		got := p.Next(attempt, 0)
		if lo, hi := want*9/10, want*11/10; got < lo || got > hi {
			t.Errorf("Next(%d) = %s, want %s ±10 %%", attempt, got, want)
		}
	}
}
