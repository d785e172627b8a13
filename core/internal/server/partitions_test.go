package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/store"
)

// TestPartitionKeeperCreatesMonthsAhead runs the daemon's partition stage
// under the supervisor with its clock a year ahead: its first round
// creates that month and the ones after it, through the daemon's own
// role, and the stage stops cleanly with the daemon.
func TestPartitionKeeperCreatesMonthsAhead(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	at := time.Now().AddDate(1, 0, 0)
	rounds := make(chan error, 1)
	keeper := &server.PartitionKeeper{Pool: w.pools.Worker, Log: hclog.NewNullLogger(), Every: time.Hour,
		Now: func() time.Time { return at }, Rounds: rounds}
	sup := server.NewSupervisor(hclog.NewNullLogger(), 10*time.Second)
	sup.Add(server.PhaseIntake, "partition keeper", keeper.Run)
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	select {
	case err := <-rounds:
		if err != nil {
			t.Fatalf("first round: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no partition round within 30s")
	}
	parts, err := store.Partitions(ctx, w.pools.Worker, "delivery_attempts")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range parts {
		names = append(names, p.Name)
	}
	all := strings.Join(names, " ")
	for m := range store.PartitionsAhead + 1 {
		d := at.AddDate(0, m, 0).UTC()
		if n := "delivery_attempts_y" + d.Format("2006") + "m" + d.Format("01"); !strings.Contains(all, n) {
			t.Errorf("partition %s missing after the keeper's round: %s", n, all)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("supervisor: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the keeper did not stop")
	}
}

// TestPartitionKeeperSweepsEvents: a keeper round with the config's
// retention.events sweeps the events past it (an event posted, processed
// and aged 40 days); GET /v1/events/{id} then answers 404 for it, as for
// an id nobody has, and posting the same event_id again is a new event
// (201). The event inside the period stays.
func TestPartitionKeeperSweepsEvents(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	for _, id := range []string{"old", "new"} {
		if r := w.post(t, "a", map[string]any{"event_id": id, "type": "T", "payload": map[string]any{}}); r.code != 201 {
			t.Fatalf("post %s: %d %s", id, r.code, r.body)
		}
	}
	if _, err := w.db.Pool.Exec(ctx, `UPDATE event_outbox SET status = 'PROCESSED', processed_at = now(),
		created_at = CASE event_id WHEN 'old' THEN now() - interval '40 days' ELSE created_at END`); err != nil {
		t.Fatal(err)
	}
	if r := w.do(t, "GET", "/v1/events/old", w.keys["a"], ""); r.code != 200 {
		t.Fatalf("GET old before the sweep: %d %s", r.code, r.body)
	}
	cfg := config.DefaultDaemon().Retention
	cfg.Events = 30 * 24 * time.Hour
	r, ok := server.RetentionFromConfig(cfg)
	if !ok {
		t.Fatal("retention.events set, RetentionFromConfig says no retention")
	}
	keeper := &server.PartitionKeeper{Pool: w.pools.Worker, Log: hclog.NewNullLogger(), Retention: &r}
	if err := keeper.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if r := w.do(t, "GET", "/v1/events/old", w.keys["a"], ""); r.code != 404 {
		t.Fatalf("GET a swept event: %d %s, want 404", r.code, r.body)
	}
	if r := w.do(t, "GET", "/v1/events/new", w.keys["a"], ""); r.code != 200 {
		t.Fatalf("GET the event inside the period: %d %s", r.code, r.body)
	}
	if r := w.post(t, "a", map[string]any{"event_id": "old", "type": "T", "payload": map[string]any{}}); r.code != 201 {
		t.Fatalf("post a swept event_id again: %d %s, want 201 (a new event)", r.code, r.body)
	}
}
