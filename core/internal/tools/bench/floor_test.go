package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// floorDatabases counts the databases of floor runs named name.
func floorDatabases(t *testing.T, db *testenv.DB, name string) int {
	t.Helper()
	var n int
	err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_database WHERE starts_with(datname, $1)`,
		"herald_bench_floor_"+name+"_").Scan(&n)
	if err != nil {
		t.Fatalf("list databases: %v", err)
	}
	return n
}

// TestRunFloorSmall runs the database floor at a tiny size against the
// real PostgreSQL: every delivery ends SENT exactly once, every event
// PROCESSED, the row writes it reports include what the relay must write
// (one delivery row per delivery, one notification per recipient, one
// outbox row per event) and the outcomes recorded, and its database is
// dropped afterwards.
func TestRunFloorSmall(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t) // checks that PostgreSQL answers; its pool lists databases
	env := Env{AdminDatabaseURL: testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL), Log: t.Logf}
	name := testenv.RandomName("small")
	sc := Scenario{Name: name, Events: 60, Recipients: 3, Channels: 2, Producers: 3, Serve: 1, Duration: 2 * time.Minute}
	res, err := RunFloor(context.Background(), env, sc)
	if err != nil {
		t.Fatal(err)
	}
	const deliveries = 60 * 3 * 2
	if !res.Check.OK || res.Deliveries != deliveries || res.EventsEnqueued != 60 || res.Check.SinkRecords != deliveries {
		t.Fatalf("check: %+v; %d deliveries of %d events", res.Check, res.Deliveries, res.EventsEnqueued)
	}
	if res.Elapsed <= 0 || res.DeliveriesPerS <= 0 || res.EventsPerSec <= 0 || res.Redelivered != 0 {
		t.Errorf("elapsed %s, %.0f deliveries/s, %.0f events/s, %d redelivered", res.Elapsed, res.DeliveriesPerS, res.EventsPerSec, res.Redelivered)
	}
	writes := map[string]TableWrites{}
	for _, w := range res.Writes {
		writes[w.Table] = w
	}
	for table, inserts := range map[string]int64{"deliveries": deliveries, "notifications": 60 * 3, "event_outbox": 60} {
		if got := writes[table].Inserts; got != inserts {
			t.Errorf("%s: %d inserts, want %d (writes %+v)", table, got, inserts, res.Writes)
		}
	}
	// The relay marks every event PROCESSED, the listener every delivery
	// SENT.
	if writes["event_outbox"].Updates < 60 || writes["deliveries"].Updates < deliveries {
		t.Errorf("event_outbox %+v, deliveries %+v: want every event and delivery updated", writes["event_outbox"], writes["deliveries"])
	}
	if res.WritesPerDelivery < float64(deliveries+60*3+60*2+deliveries)/deliveries {
		t.Errorf("%.2f writes per delivery, fewer than the inserts and updates above", res.WritesPerDelivery)
	}
	if !strings.Contains(res.Concurrency, "relay 2 workers") {
		t.Errorf("concurrency = %q, want the daemon's relay workers", res.Concurrency)
	}
	if n := floorDatabases(t, db, name); n != 0 {
		t.Errorf("%d floor databases left behind", n)
	}
	rep := Report{Floors: []Floor{res}}
	rep.Evaluate()
	if !rep.OK || rep.Err() != nil {
		t.Errorf("report not OK: %v", rep.Err())
	}
}

// TestRunFloorRefuses checks that the floor refuses what it does not
// measure (a paced, soak or other-role shape, no events) before it creates
// anything.
func TestRunFloorRefuses(t *testing.T) {
	t.Parallel()
	base := Scenario{Name: "refused", Events: 10, Recipients: 1, Channels: 1, Producers: 1, Serve: 1, Duration: time.Minute}
	for name, sc := range map[string]Scenario{
		"paced":    func() Scenario { s := base; s.Rate = 10; return s }(),
		"soak":     func() Scenario { s := base; s.Window, s.Deliveries, s.Backlog = 10, 10, 10; return s }(),
		"policies": func() Scenario { s := base; s.RLS = RLSPolicies; return s }(),
		"source":   func() Scenario { s := base; s.Source = true; return s }(),
		"empty":    func() Scenario { s := base; s.Events = 0; return s }(),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// No database URL: a floor that got past its checks would fail
			// to connect instead.
			_, err := RunFloor(context.Background(), Env{AdminDatabaseURL: "postgres://127.0.0.1:1/none"}, sc)
			if err == nil || strings.Contains(err.Error(), "127.0.0.1:1") {
				t.Errorf("RunFloor(%s) = %v, want it refused before connecting", name, err)
			}
		})
	}
}

// TestRunFloorCutOff runs a floor whose Duration ends before its producers
// can finish: it returns the deadline's error and drops its database.
func TestRunFloorCutOff(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	env := Env{AdminDatabaseURL: testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL), Log: t.Logf}
	name := testenv.RandomName("cut")
	sc := Scenario{Name: name, Events: 1_000_000, Recipients: 1, Channels: 1, Producers: 2, Serve: 1, Duration: 300 * time.Millisecond}
	_, err := RunFloor(context.Background(), env, sc)
	if err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("RunFloor = %v, want the run's deadline", err)
	}
	if n := floorDatabases(t, db, name); n != 0 {
		t.Errorf("%d floor databases left behind", n)
	}
}

// TestFloorAck checks the floor's broker stand-in: an ack counts the
// message's deliveries and the last one ends the wait; a nack with requeue
// hands the message to its channel's queue again, one without fails the
// run.
func TestFloorAck(t *testing.T) {
	t.Parallel()
	r := &floorRun{expected: 3, done: make(chan struct{}), queues: map[string]chan amqp.Delivery{"C": make(chan amqp.Delivery, 1)}}
	stopped := make(chan struct{})
	defer close(stopped)
	r.stopped = stopped
	body := []byte(`{"v":2,"deliveries":[{"id":"0191d0c4-0000-7000-8000-000000000001","attempt":1,"channel":"C"}]}`)
	a := &floorAck{run: r, n: 2}
	a.m = amqp.Delivery{Body: body, Acknowledger: a}
	if err := a.m.Ack(false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.done:
		t.Fatal("done after 2 of 3 deliveries")
	default:
	}
	if err := a.m.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-r.queues["C"]:
		if string(m.Body) != string(body) {
			t.Errorf("requeued %s, want %s", m.Body, body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the nacked message was not queued again")
	}
	if r.redelivered.Load() != 1 || r.failure() != nil {
		t.Errorf("redelivered %d, failure %v; want 1 and none", r.redelivered.Load(), r.failure())
	}
	b := &floorAck{run: r, n: 1}
	b.m = amqp.Delivery{Body: body, Acknowledger: b}
	if err := b.m.Ack(false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.done:
	default:
		t.Fatal("not done after every delivery was acked")
	}
	if r.lastRecorded.Load() == 0 {
		t.Error("no time of the last record")
	}
	if err := b.m.Reject(false); err != nil {
		t.Fatal(err)
	}
	if err := r.failure(); err == nil || !strings.Contains(err.Error(), "dropped") {
		t.Errorf("failure = %v, want the dropped message", err)
	}
}
