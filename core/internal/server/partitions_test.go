package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
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
