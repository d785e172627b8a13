package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/delivery"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk/producer"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
)

func TestEventDeliveredEndToEndAndIdempotent(t *testing.T) {
	e := newEnv(t, "sent")
	e.start()
	ctx := context.Background()
	c := e.client()

	st, created, err := c.Emit(ctx, reservation("evt-1"))
	if err != nil || !created {
		t.Fatalf("emit: created=%v err=%v", created, err)
	}
	if st.EventID != "evt-1" {
		t.Fatalf("emit returned %+v", st)
	}
	e.waitAllSent(deliveriesPerEvent, 30*time.Second)

	// The same event_id again: 200 with the existing event, no second fan-out.
	st, created, err = c.Emit(ctx, reservation("evt-1"))
	if err != nil || created {
		t.Fatalf("duplicate emit: created=%v err=%v", created, err)
	}
	if st.Status != "PROCESSED" || len(st.Deliveries) != deliveriesPerEvent {
		t.Fatalf("duplicate emit returned status %s with %d deliveries", st.Status, len(st.Deliveries))
	}
	got, err := c.Event(ctx, "evt-1")
	if err != nil {
		t.Fatal(err)
	}
	perUser := map[string][]string{}
	for _, d := range got.Deliveries {
		if d.Status != "SENT" || d.Attempts != 1 || d.Provider == "" {
			t.Errorf("delivery %+v: want SENT after 1 attempt with a provider", d)
		}
		perUser[d.UserID] = append(perUser[d.UserID], d.Channel)
	}
	for _, u := range []string{"staff1", "staff2", "staff3"} {
		if strings.Join(perUser[u], ",") != "EMAIL,PUSH,WEBSOCKET" {
			t.Errorf("%s got channels %v, want EMAIL, PUSH, WEBSOCKET", u, perUser[u])
		}
	}
	e.assertExactlyOnce(deliveriesPerEvent)
	if n := e.count(`SELECT count(*) FROM notifications WHERE event_id = 'evt-1'`); n != 3 {
		t.Fatalf("notifications = %d, want 3", n)
	}
	if n := e.count(`SELECT coalesce(sum(unread), 0) FROM notification_counters`); n != 3 {
		t.Fatalf("unread total = %d, want 3", n)
	}
	recs := e.sinkRecords()
	if len(recs) != deliveriesPerEvent {
		t.Fatalf("sink received %d distinct deliveries, want %d", len(recs), deliveriesPerEvent)
	}
}

func TestProducerTransactionRollbackLeavesNoEvent(t *testing.T) {
	e := newEnv(t, "sent")
	ctx := context.Background()
	// The business change and the event roll back together.
	err := pgx.BeginFunc(ctx, e.db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE reservation (id int) ON COMMIT DROP`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO reservation VALUES (1)`); err != nil {
			return err
		}
		ev := reservation("rolled-back")
		ev.TenantID = e.tenant
		if err := producer.Enqueue(ctx, tx, ev); err != nil {
			return err
		}
		return errors.New("business rule failed")
	})
	if err == nil || err.Error() != "business rule failed" {
		t.Fatalf("transaction: %v", err)
	}
	// A committed one is enqueued once, and a second Enqueue is a duplicate.
	err = pgx.BeginFunc(ctx, e.db.Pool, func(tx pgx.Tx) error {
		ev := reservation("committed")
		ev.TenantID = e.tenant
		if err := producer.Enqueue(ctx, tx, ev); err != nil {
			return err
		}
		if err := producer.Enqueue(ctx, tx, ev); !errors.Is(err, producer.ErrDuplicate) {
			return fmt.Errorf("second enqueue: %v, want ErrDuplicate", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT count(*) FROM event_outbox WHERE event_id = 'rolled-back'`); n != 0 {
		t.Fatalf("rolled-back event exists (%d rows)", n)
	}
	e.start()
	e.waitAllSent(deliveriesPerEvent, 30*time.Second)
	if n := e.count(`SELECT count(*) FROM event_outbox`); n != 1 {
		t.Fatalf("events = %d, want 1", n)
	}
	e.assertExactlyOnce(deliveriesPerEvent)
}

func TestMalformedRequestsGetProblemJSONNamingTheField(t *testing.T) {
	e := newEnv(t, "sent")
	e.start()
	if _, _, err := e.client().Emit(context.Background(), reservation("good")); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		body   string
		status int
		field  string
	}{
		"not json":            {`{"event_id":`, 400, ""},
		"missing event_id":    {`{"type":"RESERVATION_REQUESTED","payload":{}}`, 400, "event_id"},
		"missing type":        {`{"event_id":"x1","payload":{}}`, 400, "type"},
		"payload not object":  {`{"event_id":"x2","type":"RESERVATION_REQUESTED","payload":[1]}`, 400, "payload"},
		"unknown field":       {`{"event_id":"x3","type":"RESERVATION_REQUESTED","payload":{},"colour":"red"}`, 400, "colour"},
		"wrong type":          {`{"event_id":7,"type":"RESERVATION_REQUESTED","payload":{}}`, 400, "event_id"},
		"unknown event type":  {`{"event_id":"x4","type":"NOPE","payload":{}}`, 422, "type"},
		"schema: pax missing": {`{"event_id":"x5","type":"RESERVATION_REQUESTED","payload":{"restaurant_id":5,"customer_name":"A"}}`, 422, "payload"},
		"schema: pax type":    {`{"event_id":"x6","type":"RESERVATION_REQUESTED","payload":{"restaurant_id":5,"customer_name":"A","pax":"four"}}`, 422, "payload/pax"},
		// jsonb refuses \u0000: once a 500 "safe to retry" that a producer retried forever.
		"payload NUL": {`{"event_id":"x7","type":"RESERVATION_REQUESTED","payload":{"restaurant_id":5,"customer_name":"A\u0000","pax":4}}`,
			400, "payload"},
		"event_id invalid UTF-8": {"{\"event_id\":\"x8\xff\",\"type\":\"RESERVATION_REQUESTED\",\"payload\":{}}", 400, "event_id"},
		"payload too deep": {`{"event_id":"x9","type":"RESERVATION_REQUESTED","payload":` + strings.Repeat(`{"a":`, 40) + "1" +
			strings.Repeat("}", 40) + `}`, 400, "payload"},
		"reused event_id, other payload": {`{"event_id":"good","type":"RESERVATION_REQUESTED","payload":{"restaurant_id":5,"customer_name":"B","pax":4}}`,
			409, "event_id"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, e.apiURL+"/v1/events", strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+e.apiKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("status %d (%s), want %d problem+json: %s", resp.StatusCode, resp.Header.Get("Content-Type"), tc.status, body)
			}
			var p producer.Problem
			if err := json.Unmarshal(body, &p); err != nil || p.Status != tc.status || p.Detail == "" {
				t.Fatalf("problem document %s: %v", body, err)
			}
			if tc.field != "" && p.Field != tc.field {
				t.Fatalf("field = %q, want %q (%s)", p.Field, tc.field, body)
			}
		})
	}
	// Bad requests and a bad key did not block good work.
	req, _ := http.NewRequest(http.MethodPost, e.apiURL+"/v1/events", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer hk_wrong_key_000000000000000")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bad key: status %d, want 401", resp.StatusCode)
	}
	// The same event again is 200 with the original.
	if _, created, err := e.client().Emit(context.Background(), reservation("good")); err != nil || created {
		t.Fatalf("the same event again: created %v, %v", created, err)
	}
	e.waitAllSent(deliveriesPerEvent, 30*time.Second)
	if n := e.count(`SELECT count(*) FROM event_outbox`); n != 1 {
		t.Fatalf("events = %d, want only the good one", n)
	}
}

func TestRedeliveredMessageRecordsOneAttempt(t *testing.T) {
	e := newEnv(t, "sent")
	e.start()
	if _, _, err := e.client().Emit(context.Background(), reservation("evt-r")); err != nil {
		t.Fatal(err)
	}
	e.waitAllSent(deliveriesPerEvent, 30*time.Second)

	// Publish every delivery's first-attempt message again (a broker
	// redelivery), plus garbage that must not block anything.
	rows, err := e.db.Pool.Query(context.Background(), `SELECT delivery_id::text, user_type, channel FROM deliveries`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ id, userType, channel string }
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.id, &x.userType, &x.channel)
	})
	if err != nil {
		t.Fatal(err)
	}
	ch := testenv.AMQPChannel(t, e.broker.URL)
	ctx := context.Background()
	publish := func(key string, body []byte) {
		t.Helper()
		if err := ch.PublishWithContext(ctx, "herald.deliveries", key, false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	publish("STAFF.EMAIL", []byte(`not json`))
	publish("STAFF.EMAIL", []byte(`{"v":1,"deliveries":[{"id":"nope","attempt":0}]}`))
	for _, r := range all {
		body, _ := json.Marshal(delivery.Envelope{V: 1, Deliveries: []delivery.Wire{{Ref: store.Ref{ID: r.id, Attempt: 1}}}})
		for range 2 {
			publish(r.userType+"."+r.channel, body)
		}
	}
	// A new event still goes through after the duplicates and the garbage,
	// so the queue has been consumed past them.
	if _, _, err := e.client().Emit(ctx, reservation("evt-after")); err != nil {
		t.Fatal(err)
	}
	e.waitAllSent(2*deliveriesPerEvent, 30*time.Second)
	testenv.Eventually(t, 30*time.Second, func() bool {
		q, err := ch.QueueDeclarePassive("herald.email", true, false, false, false, nil)
		return err == nil && q.Messages == 0
	}, "email queue drained")
	e.assertExactlyOnce(2 * deliveriesPerEvent)
	if n := e.count(`SELECT count(*) FROM delivery_attempt_log`); n != 2*deliveriesPerEvent {
		t.Fatalf("attempts = %d, want %d (one per delivery)", n, 2*deliveriesPerEvent)
	}
	for id, n := range e.sinkRecords() {
		if n != 1 {
			t.Errorf("plugin received delivery %s %d times", id, n)
		}
	}
}

func TestBrokerDownWhileEventsArrive(t *testing.T) {
	e := newEnv(t, "sent")
	d := e.start()
	ctx := context.Background()
	if _, _, err := e.client().Emit(ctx, reservation("before")); err != nil {
		t.Fatal(err)
	}
	e.waitAllSent(deliveriesPerEvent, 30*time.Second)

	if out, err := testenv.Rabbitmqctl("stop_app"); err != nil {
		t.Fatalf("stop rabbitmq: %v: %s", err, out)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_, _ = testenv.Rabbitmqctl("start_app")
		}
	})
	const during = 10
	for i := range during {
		if _, _, err := e.client().Emit(ctx, reservation(fmt.Sprintf("during-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// The relay keeps writing deliveries; they wait for the broker.
	testenv.Eventually(t, 30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries`) == (during+1)*deliveriesPerEvent
	}, "deliveries written while the broker is down")
	if n := e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT'`); n != deliveriesPerEvent {
		t.Fatalf("%d deliveries SENT while the broker was down, want %d", n, deliveriesPerEvent)
	}
	if out, err := testenv.Rabbitmqctl("start_app"); err != nil {
		t.Fatalf("start rabbitmq: %v: %s", err, out)
	}
	restarted = true
	e.waitAllSent((during+1)*deliveriesPerEvent, 90*time.Second)
	e.assertExactlyOnce((during + 1) * deliveriesPerEvent)
	if !strings.Contains(d.Log(), "broker connection lost") {
		t.Fatalf("the daemon never noticed the broker going down")
	}
}

func TestSIGKILLMidStreamThenRestart(t *testing.T) {
	e := newEnv(t, "sent")
	d := e.start()
	ctx := context.Background()
	const events = 60
	emitted := make(chan error, 1)
	go func() {
		for i := range events {
			if _, _, err := e.client().Emit(ctx, reservation(fmt.Sprintf("k-%d", i))); err != nil {
				// The daemon is killed mid-stream: producers go through the
				// outbox directly, as a service sharing the database would.
				ev := reservation(fmt.Sprintf("k-%d", i))
				ev.TenantID = e.tenant
				if err := producer.Enqueue(ctx, e.db.Pool, ev); err != nil && !errors.Is(err, producer.ErrDuplicate) {
					emitted <- err
					return
				}
			}
		}
		emitted <- nil
	}()
	testenv.Eventually(t, 30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT'`) >= 2*deliveriesPerEvent
	}, "some deliveries sent before the kill")
	d.stop(syscall.SIGKILL)
	if err := <-emitted; err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitAllSent(events*deliveriesPerEvent, 120*time.Second)
	e.assertExactlyOnce(events * deliveriesPerEvent)
	if n := e.count(`SELECT count(*) FROM event_outbox WHERE status <> 'PROCESSED'`); n != 0 {
		t.Fatalf("%d events not processed", n)
	}
}
