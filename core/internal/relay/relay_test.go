package relay_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/relay"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk/producer"
)

const testRules = `
defaults { time_zone = "UTC" }
channel "EMAIL" { providers = [{ plugin = "sink" }] }
channel "WEBSOCKET" {
  best_effort = true
  providers   = [{ plugin = "sink" }]
}
event "PING" {
  audience { user = "{{ .payload.user }}" }
  mandatory   = ["WEBSOCKET"]
  optional    = ["EMAIL"]
  quiet_hours = "ignore"
  inbox {
    title = "Ping"
    body  = "for {{ .payload.user }}"
  }
}
event "NICK" {
  audience { user = "{{ .payload.user }}" }
  mandatory   = ["WEBSOCKET", "EMAIL"]
  quiet_hours = "ignore"
  template "EMAIL" { body = "Hello {{ .recipient.attributes.nick }}" }
}
event "BOOKED" {
  audience { user = "{{ .payload.user }}" }
  mandatory   = ["WEBSOCKET"]
  quiet_hours = "ignore"
  payload_schema = <<JSON
{"type": "object", "required": ["user", "pax"],
 "properties": {"user": {"type": "string"}, "pax": {"type": "integer", "minimum": 1}}}
JSON
}
event "MISSING" {
  audience { user = "{{ .payload.user }}" }
  mandatory   = ["WEBSOCKET"]
  quiet_hours = "ignore"
  inbox { body = "{{ .payload.nope }}" }
}
`

func setup(t *testing.T) (*testenv.DB, *rules.RuleSet) {
	t.Helper()
	db := testenv.Postgres(t)
	p := filepath.Join(t.TempDir(), "rules.hcl")
	if err := os.WriteFile(p, []byte(testRules), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := rulesfile.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	dir := &directory.Directory{Recipients: []directory.Recipient{
		{UserID: "u1", UserType: "CUSTOMER", Email: "u1@example.com", Active: true},
		{UserID: "u2", UserType: "CUSTOMER", Email: "u2@example.com", Active: false},
	}}
	if err := store.ImportDirectory(context.Background(), db.Pool, "t1", dir); err != nil {
		t.Fatal(err)
	}
	return db, rs
}

func enqueue(t *testing.T, db *testenv.DB, id, typ, payload string) {
	t.Helper()
	err := producer.Enqueue(context.Background(), db.Pool, producer.Event{TenantID: "t1", EventID: id, Type: typ, Payload: json.RawMessage(payload)})
	if err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, db *testenv.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRelayFansOutOnceAndBadEventsFailWithoutBlocking(t *testing.T) {
	t.Parallel()
	db, rs := setup(t)
	ctx := context.Background()
	enqueue(t, db, "bad-type", "NO_SUCH_TYPE", `{}`)
	enqueue(t, db, "good", "PING", `{"user": "u1"}`)
	enqueue(t, db, "inactive", "PING", `{"user": "u2"}`)
	enqueue(t, db, "good-2", "PING", `{"user": "u1"}`)

	r := relay.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(), relay.Config{BatchSize: 10, MaxAttempts: 3})
	// Each failed try pushes the bad event's available_at out; make it due
	// again at once so the test bounds the attempts, not the clock.
	for i := range 3 {
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if _, err := db.Pool.Exec(ctx, `UPDATE event_outbox SET available_at = now() WHERE status = 'PENDING'`); err != nil {
			t.Fatal(err)
		}
	}
	var status, lastErr string
	var attempts int
	if err := db.Pool.QueryRow(ctx, `SELECT status, attempts, last_error FROM event_outbox WHERE event_id = 'bad-type'`).Scan(&status, &attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	// An unknown type is not retried (issue 26): FAILED at the first claim.
	if want := `type: no rule handles event type "NO_SUCH_TYPE"`; status != "FAILED" || attempts != 1 || lastErr != want {
		t.Fatalf("bad event: status %s attempts %d error %q, want FAILED after 1 with %q", status, attempts, lastErr, want)
	}
	if n := count(t, db, `SELECT count(*) FROM event_outbox WHERE status = 'PROCESSED'`); n != 3 {
		t.Fatalf("processed events = %d, want 3", n)
	}
	// u1 gets WEBSOCKET and EMAIL for each good event; inactive u2 nothing.
	if n := count(t, db, `SELECT count(*) FROM deliveries`); n != 4 {
		t.Fatalf("deliveries = %d, want 4", n)
	}
	if n := count(t, db, `SELECT unread FROM notification_counters WHERE user_id = 'u1'`); n != 2 {
		t.Fatalf("u1 unread = %d, want 2", n)
	}
	var maxAttempts int
	if err := db.Pool.QueryRow(ctx, `SELECT max_attempts FROM deliveries WHERE channel = 'WEBSOCKET' LIMIT 1`).Scan(&maxAttempts); err != nil {
		t.Fatal(err)
	}
	if maxAttempts != 1 {
		t.Fatalf("best-effort WEBSOCKET max_attempts = %d, want 1", maxAttempts)
	}
}

func TestInsertFanoutTwiceWritesOnce(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	ctx := context.Background()
	note := store.NewNotification{ID: "0190d0a0-0000-7000-8000-000000000001", TenantID: "t1", EventID: "e1", UserID: "u1", EventType: "PING", Severity: "info", CreatedAt: time.Now()}
	del := store.NewDelivery{NotificationID: note.ID, TenantID: "t1", EventID: "e1", EventType: "PING", UserID: "u1", UserType: "CUSTOMER",
		Channel: "EMAIL", Severity: "info", Status: store.StatusPending, MaxAttempts: 3, NextAttemptAt: time.Now()}
	for i := range 2 {
		note2 := note
		if i == 1 {
			note2.ID = "0190d0a0-0000-7000-8000-000000000002"
			del.NotificationID = note2.ID
		}
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.InsertFanout(ctx, tx, []store.NewNotification{note2}, []store.NewDelivery{del}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, db, `SELECT count(*) FROM notifications`); n != 1 {
		t.Fatalf("notifications = %d, want 1", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries`); n != 1 {
		t.Fatalf("deliveries = %d, want 1", n)
	}
	if n := count(t, db, `SELECT unread FROM notification_counters WHERE user_id = 'u1'`); n != 1 {
		t.Fatalf("unread = %d, want 1", n)
	}
}

// TestRelaySurgeWorkersShareABacklog: with a backlog the extra workers
// join in (claims come back full), and every event is relayed exactly
// once across them.
func TestRelaySurgeWorkersShareABacklog(t *testing.T) {
	t.Parallel()
	db, rs := setup(t)
	for i := range 300 {
		enqueue(t, db, "e"+strconv.Itoa(i), "PING", `{"user":"u1"}`)
	}
	r := relay.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(),
		relay.Config{BatchSize: 10, Workers: 3, PollInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 60*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM event_outbox WHERE status = 'PROCESSED'`) == 300
	}, "the backlog was not relayed")
	if n := count(t, db, `SELECT count(*) FROM notifications`); n != 300 {
		t.Fatalf("notifications = %d, want 300", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries`); n != 600 {
		t.Fatalf("deliveries = %d, want 600 (WEBSOCKET and EMAIL per event)", n)
	}
	if n := count(t, db, `SELECT unread FROM notification_counters WHERE user_id = 'u1'`); n != 300 {
		t.Fatalf("u1 unread = %d, want 300", n)
	}
}

// TestRelayMissingTemplateKeyFailsTheDeliveryOrTheEvent: a channel template
// that reads a key the recipient lacks fails only that delivery, with the
// field and the key; an inbox template that reads a key the payload lacks
// fails the event the same way. Neither renders "<no value>".
func TestRelayMissingTemplateKeyFailsTheDeliveryOrTheEvent(t *testing.T) {
	t.Parallel()
	db, rs := setup(t)
	ctx := context.Background()
	enqueue(t, db, "nick", "NICK", `{"user": "u1"}`)
	enqueue(t, db, "missing", "MISSING", `{"user": "u1"}`)
	r := relay.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(), relay.Config{BatchSize: 10, MaxAttempts: 1})
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	var status, lastErr string
	if err := db.Pool.QueryRow(ctx, `SELECT status, last_error FROM deliveries WHERE event_id = 'nick' AND channel = 'EMAIL'`).Scan(&status, &lastErr); err != nil {
		t.Fatal(err)
	}
	if status != store.StatusFailed || !strings.Contains(lastErr, "render channel EMAIL body") || !strings.Contains(lastErr, `"nick"`) {
		t.Fatalf("EMAIL delivery: %s %q, want FAILED naming the body and the key", status, lastErr)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT status FROM deliveries WHERE event_id = 'nick' AND channel = 'WEBSOCKET'`).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != store.StatusPending {
		t.Fatalf("WEBSOCKET delivery: %s, want PENDING", status)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT status FROM event_outbox WHERE event_id = 'nick'`).Scan(&status); err != nil || status != "PROCESSED" {
		t.Fatalf("event nick: %s (%v), want PROCESSED", status, err)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT status, last_error FROM event_outbox WHERE event_id = 'missing'`).Scan(&status, &lastErr); err != nil {
		t.Fatal(err)
	}
	if status != "FAILED" || !strings.Contains(lastErr, "render inbox body") || !strings.Contains(lastErr, `"nope"`) {
		t.Fatalf("event missing: %s %q, want FAILED naming the inbox body and the key", status, lastErr)
	}
	if n := count(t, db, `SELECT count(*) FROM notifications WHERE body LIKE '%no value%' OR event_id = 'missing'`); n != 0 {
		t.Fatalf("%d notifications with <no value> or of the failed event", n)
	}
}
