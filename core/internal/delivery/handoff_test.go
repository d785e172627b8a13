package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// handoffFixture is a database, a vhost with one EMAIL queue and a
// connection to it.
type handoffFixture struct {
	db   *testenv.DB
	conn *broker.Conn
	amqp *amqp.Connection
}

func newHandoffFixture(t *testing.T) *handoffFixture {
	t.Helper()
	db := testenv.Postgres(t)
	b := testenv.RabbitMQ(t)
	topo := broker.Topology{Exchange: "herald", Queues: []broker.Queue{{Name: "herald.EMAIL", Bindings: []string{"*.EMAIL"}}}}
	conn := broker.Dial(b.URL, topo, hclog.NewNullLogger())
	t.Cleanup(conn.Close)
	ac, err := amqp.Dial(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ac.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ch, err := conn.Channel(ctx) // declares the topology
	if err != nil {
		t.Fatal(err)
	}
	_ = ch.Close()
	return &handoffFixture{db: db, conn: conn, amqp: ac}
}

// writeBatch writes n EMAIL deliveries the way the relay does with a
// handoff: PUBLISHED, with a handoff row due after grace.
func (f *handoffFixture) writeBatch(t *testing.T, event string, n int, grace time.Duration) (int64, []store.NewDelivery) {
	t.Helper()
	ctx := context.Background()
	tx, err := f.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var notes []store.NewNotification
	var dels []store.NewDelivery
	for i := range n {
		nid := fmt.Sprintf("0190d0a0-0000-7000-8000-%012d", len(event)*1000+i)
		user := fmt.Sprintf("u%d", i)
		notes = append(notes, store.NewNotification{ID: nid, TenantID: "t", EventID: event, UserID: user, EventType: "X", Severity: "info", CreatedAt: time.Now()})
		dels = append(dels, store.NewDelivery{NotificationID: nid, TenantID: "t", EventID: event, EventType: "X", UserID: user,
			UserType: "CUSTOMER", Channel: "EMAIL", Severity: "info", Status: store.StatusPublished, MaxAttempts: 3,
			NextAttemptAt: time.Now(), Recipient: json.RawMessage(`{"user_id":"` + user + `","email":"` + user + `@example.com"}`),
			Content: json.RawMessage(`{"subject":"hello ` + user + `"}`)})
	}
	_, written, err := store.InsertFanout(ctx, tx, notes, dels)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(written))
	for i, d := range written {
		ids[i] = d.ID
	}
	hid, err := store.InsertHandoff(ctx, tx, ids, grace, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return hid, written
}

// consume reads messages from the EMAIL queue until want deliveries
// arrived or the deadline passed, and returns the envelopes.
func (f *handoffFixture) consume(t *testing.T, want int) []Envelope {
	t.Helper()
	ch, err := f.amqp.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	msgs, err := ch.Consume("herald.EMAIL", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var envs []Envelope
	got := 0
	deadline := time.After(20 * time.Second)
	for got < want {
		select {
		case m := <-msgs:
			env, err := DecodeEnvelope(m.Body)
			if err != nil {
				t.Fatalf("message does not decode: %v", err)
			}
			envs = append(envs, env)
			got += len(env.Deliveries)
		case <-deadline:
			t.Fatalf("got %d deliveries from the queue, want %d", got, want)
		}
	}
	return envs
}

func (f *handoffFixture) handoffRows(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM delivery_handoffs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestHandoffPublishesContentAndDeletesItsRow: the relay's fast lane
// publishes version-2 messages that carry what the plugin is sent, and
// deletes the handoff row once the broker confirmed them.
func TestHandoffPublishesContentAndDeletesItsRow(t *testing.T) {
	f := newHandoffFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := NewHandoff(f.db.Pool, f.conn, nil, hclog.NewNullLogger(), PublisherConfig{PerMessage: 2}, nil)
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 20*time.Second, h.Ready, "handoff never became ready")

	hid, written := f.writeBatch(t, "e1", 3, time.Minute)
	h.Offer(ctx, hid, written)
	envs := f.consume(t, 3)
	seen := map[string]Wire{}
	for _, env := range envs {
		if env.V != 2 {
			t.Fatalf("envelope version %d, want 2", env.V)
		}
		if len(env.Deliveries) > 2 {
			t.Fatalf("message carries %d deliveries, per_message is 2", len(env.Deliveries))
		}
		for _, w := range env.Deliveries {
			seen[w.ID] = w
		}
	}
	for _, d := range written {
		w, ok := seen[d.ID]
		if !ok {
			t.Fatalf("delivery %s was not published", d.ID)
		}
		c := w.claimed()
		if c.Attempt != 1 || c.MaxAttempts != 3 || c.Channel != "EMAIL" || c.UserID != d.UserID ||
			string(c.Content) != string(d.Content) || string(c.Recipient) != string(d.Recipient) {
			t.Fatalf("delivery %s published as %+v, written as %+v", d.ID, c, d)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return f.handoffRows(t) == 0 }, "handoff row not deleted after the confirm")
}

// TestPublisherTakesOverDueHandoff plays a daemon that died between the
// relay's commit and the broker's confirm: its handoff row comes due, and
// the publisher publishes the deliveries no listener has taken, keeping
// them PUBLISHED (states only move forward), and deletes the row.
func TestPublisherTakesOverDueHandoff(t *testing.T) {
	f := newHandoffFixture(t)
	ctx := context.Background()
	_, written := f.writeBatch(t, "e2", 3, 0)
	// A listener already sent the first one.
	sent := store.Outcome{ID: written[0].ID, Attempt: 1, Kind: "sent", Status: store.StatusSent, StartedAt: time.Now()}
	if n, err := store.RecordOutcomes(ctx, f.db.Pool, []store.Outcome{sent}); err != nil || n != 1 {
		t.Fatalf("record sent: %d %v", n, err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	p := NewPublisher(f.db.Pool, f.conn, hclog.NewNullLogger(), PublisherConfig{Workers: 1, PollInterval: 100 * time.Millisecond})
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	envs := f.consume(t, 2)
	got := map[string]int{}
	for _, env := range envs {
		for _, w := range env.Deliveries {
			got[w.ID] = w.Attempt
		}
	}
	if len(got) != 2 || got[written[1].ID] != 1 || got[written[2].ID] != 1 {
		t.Fatalf("republished %v, want attempt 1 of %s and %s only", got, written[1].ID, written[2].ID)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return f.handoffRows(t) == 0 }, "due handoff row not deleted")
	var published, sentRows int
	if err := f.db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'PUBLISHED'), count(*) FILTER (WHERE status = 'SENT')
		FROM deliveries`).Scan(&published, &sentRows); err != nil {
		t.Fatal(err)
	}
	if published != 2 || sentRows != 1 {
		t.Fatalf("PUBLISHED %d, SENT %d; want 2 and 1", published, sentRows)
	}
}

// TestHandoffNotDueIsLeftAlone: a handoff inside its grace period belongs
// to a live relay, and the publisher does not touch it.
func TestHandoffNotDueIsLeftAlone(t *testing.T) {
	f := newHandoffFixture(t)
	ctx := context.Background()
	f.writeBatch(t, "e3", 1, time.Hour)
	tx, err := f.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows, taken, err := store.ClaimHandoffs(ctx, tx, 10)
	if err != nil || len(rows) != 0 || taken != 0 {
		t.Fatalf("claimed %d deliveries of %d handoffs (%v); want none", len(rows), taken, err)
	}
}

// TestDecodeEnvelopeVersion2NeedsContent: a version-2 message without
// what the plugin is sent is malformed, not a delivery with empty fields.
func TestDecodeEnvelopeVersion2NeedsContent(t *testing.T) {
	id := "0190d0a0-0000-7000-8000-000000000001"
	cases := map[string]string{
		"no channel":  `{"v":2,"deliveries":[{"id":"` + id + `","attempt":1,"tenant_id":"t","max_attempts":1,"recipient":{},"content":{}}]}`,
		"no content":  `{"v":2,"deliveries":[{"id":"` + id + `","attempt":1,"tenant_id":"t","channel":"EMAIL","max_attempts":1,"recipient":{}}]}`,
		"no attempts": `{"v":2,"deliveries":[{"id":"` + id + `","attempt":1,"tenant_id":"t","channel":"EMAIL","recipient":{},"content":{}}]}`,
		"version 3":   `{"v":3,"deliveries":[{"id":"` + id + `","attempt":1}]}`,
	}
	for name, body := range cases {
		if _, err := DecodeEnvelope([]byte(body)); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
	ok := `{"v":2,"deliveries":[{"id":"` + id + `","attempt":1,"tenant_id":"t","channel":"EMAIL","max_attempts":1,"recipient":{},"content":{}}]}`
	if _, err := DecodeEnvelope([]byte(ok)); err != nil {
		t.Fatalf("well-formed version 2: %v", err)
	}
}

// TestHandoffGivesUpWhatItCouldNotPublish: batches the handoff could not
// publish (here: it stopped with them queued) are made due at once, so the
// publisher takes them over without waiting for the grace period.
func TestHandoffGivesUpWhatItCouldNotPublish(t *testing.T) {
	f := newHandoffFixture(t)
	kicked, kick := kicks()
	h := NewHandoff(f.db.Pool, f.conn, nil, hclog.NewNullLogger(), PublisherConfig{}, kick)
	hid, written := f.writeBatch(t, "e4", 2, time.Hour)
	h.Offer(context.Background(), hid, written)
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	_ = h.Run(stopped)
	select {
	case <-kicked:
	default:
		t.Fatal("the publisher was not woken")
	}
	ctx := context.Background()
	tx, err := f.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows, taken, err := store.ClaimHandoffs(ctx, tx, 10)
	if err != nil || taken != 1 || len(rows) != 2 {
		t.Fatalf("claimed %d deliveries of %d handoffs (%v); want the 2 given up", len(rows), taken, err)
	}
}

// TestHandoffBrokerGoneGivesTheBatchUp: a batch handed over after the
// broker connection went away is not lost: its handoff row is made due at
// once and the publisher is woken to take it over.
func TestHandoffBrokerGoneGivesTheBatchUp(t *testing.T) {
	f := newHandoffFixture(t)
	kicked, kick := kicks()
	h := NewHandoff(f.db.Pool, f.conn, nil, hclog.NewNullLogger(), PublisherConfig{}, kick)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 20*time.Second, h.Ready, "handoff never became ready")

	f.conn.Close() // the broker connection is gone for good
	hid, written := f.writeBatch(t, "e5", 2, time.Hour)
	h.Offer(ctx, hid, written)
	select {
	case <-kicked:
	case <-time.After(20 * time.Second):
		t.Fatal("the publisher was never woken")
	}
	var due bool
	if err := f.db.Pool.QueryRow(ctx, `SELECT due_at <= now() FROM delivery_handoffs WHERE handoff_id = $1`, hid).Scan(&due); err != nil {
		t.Fatal(err)
	}
	if !due {
		t.Fatal("the handoff row is not due: its deliveries would wait for the grace period")
	}
	if h.Ready() {
		t.Fatal("handoff still ready without a broker")
	}
}

// kicks returns a channel that receives when kick is called.
func kicks() (<-chan struct{}, func()) {
	kicked := make(chan struct{}, 1)
	return kicked, func() {
		select {
		case kicked <- struct{}{}:
		default:
		}
	}
}

// TestHandoffOfferNeverWaits: a batch offered when the queue is full (the
// broker is away, nothing drains it) is given up to the publisher at
// once instead of holding the relay.
func TestHandoffOfferNeverWaits(t *testing.T) {
	f := newHandoffFixture(t)
	kicked, kick := kicks()
	h := NewHandoff(f.db.Pool, f.conn, nil, hclog.NewNullLogger(), PublisherConfig{}, kick)
	for range handoffQueue {
		h.Offer(context.Background(), 0, nil) // fills the queue; nothing runs it
	}
	hid, written := f.writeBatch(t, "e6", 1, time.Hour)
	offered := make(chan struct{})
	go func() { defer close(offered); h.Offer(context.Background(), hid, written) }()
	select {
	case <-offered:
	case <-time.After(10 * time.Second):
		t.Fatal("Offer waited on a full queue")
	}
	select {
	case <-kicked:
	default:
		t.Fatal("the publisher was not woken for the batch the queue had no room for")
	}
	var due bool
	if err := f.db.Pool.QueryRow(context.Background(), `SELECT due_at <= now() FROM delivery_handoffs WHERE handoff_id = $1`, hid).Scan(&due); err != nil || !due {
		t.Fatalf("handoff row due = %v (%v); want due now", due, err)
	}
}

// confirmedCount is how many confirmed handoff rows h holds for a relay
// transaction to delete.
func confirmedCount(h *Handoff) int {
	h.doneMu.Lock()
	defer h.doneMu.Unlock()
	return len(h.done)
}

// TestHandoffLeavesConfirmedRowsToTheRelay: a confirmed round's handoff
// row is not deleted in a transaction of its own at once: the relay's
// next transaction takes it (TakeConfirmed). One that no relay took is
// deleted when the handoff stops, and one a relay gave back (its
// transaction rolled back) after deleteAfter.
func TestHandoffLeavesConfirmedRowsToTheRelay(t *testing.T) {
	f := newHandoffFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := NewHandoff(f.db.Pool, f.conn, nil, hclog.NewNullLogger(), PublisherConfig{}, nil)
	h.deleteAfter = time.Hour // only the relay or the stop deletes here
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 20*time.Second, h.Ready, "handoff never became ready")

	// Taken by the relay: the handoff forgets it and deletes nothing.
	hid, written := f.writeBatch(t, "e7", 2, time.Hour)
	h.Offer(ctx, hid, written)
	f.consume(t, 2)
	var taken []int64
	testenv.Eventually(t, 10*time.Second, func() bool {
		taken = append(taken, h.TakeConfirmed()...)
		return len(taken) > 0
	}, "the confirmed handoff row was never offered to the relay")
	if len(taken) != 1 || taken[0] != hid {
		t.Fatalf("TakeConfirmed = %v, want [%d]", taken, hid)
	}
	if n := f.handoffRows(t); n != 1 {
		t.Fatalf("%d handoff rows; the handoff deleted a row it left to the relay", n)
	}

	// Given back by a relay whose transaction rolled back: deleted after
	// deleteAfter.
	back := NewHandoff(f.db.Pool, f.conn, nil, hclog.NewNullLogger(), PublisherConfig{}, nil)
	back.deleteAfter = 10 * time.Millisecond
	back.ReturnConfirmed(taken)
	testenv.Eventually(t, 10*time.Second, func() bool { return f.handoffRows(t) == 0 }, "a handoff row given back was never deleted")

	// Not taken by any relay: deleted when the handoff stops.
	hid, written = f.writeBatch(t, "e8-other", 1, time.Hour) // notification ids of their own
	h.Offer(ctx, hid, written)
	f.consume(t, 1)
	testenv.Eventually(t, 10*time.Second, func() bool { return confirmedCount(h) == 1 }, "the handoff row was never confirmed")
	cancel()
	<-done
	if n := f.handoffRows(t); n != 0 {
		t.Fatalf("%d handoff rows after the handoff stopped; want its confirmed row deleted", n)
	}
}
