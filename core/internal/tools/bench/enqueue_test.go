package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestEnqueueCeilings runs the three ways on a small scale: each writes
// every one of its events (EnqueueCeilings counts them), the producer
// login and the scratch database are gone afterwards, and bad sizes are
// refused before anything is created.
func TestEnqueueCeilings(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t) // checks that PostgreSQL answers; its pool lists databases
	adminURL := testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// 61 events over 3 producers and 20 rounds: neither divides evenly.
	const events = 61
	name := testenv.RandomName("herald_bench_enqueue_")
	var before int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname LIKE 'bench_producer_%'`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	cs, rounds, err := EnqueueCeilings(ctx, adminURL, name, events, 3)
	if err != nil {
		t.Fatalf("EnqueueCeilings: %v", err)
	}
	if len(rounds) != enqueueRounds {
		t.Fatalf("rounds = %v, want %d", rounds, enqueueRounds)
	}
	sum := 0
	for _, rd := range rounds {
		sum += rd.Events
		if len(rd.PerSec) != 3 || rd.PerSec[0] <= 0 || rd.PerSec[1] <= 0 || rd.PerSec[2] <= 0 {
			t.Errorf("round %+v: want the events/s of the three ways", rd)
		}
	}
	if sum != events {
		t.Errorf("the rounds wrote %d events each way, want %d", sum, events)
	}
	if len(cs) != 3 {
		t.Fatalf("ceilings = %v, want 3", cs)
	}
	for i, prefix := range []string{EnqueueDirectName, EnqueueOwnerName, EnqueueProducerName} {
		t.Logf("%s", cs[i])
		checkCeiling(t, cs[i], events, "events/s", prefix+" (3 producers")
	}
	if databaseExists(t, db, name) {
		t.Errorf("scratch database %s left behind", name)
	}
	var after int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname LIKE 'bench_producer_%'`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after > before {
		t.Errorf("%d bench_producer_ roles left behind", after-before)
	}

	for _, bad := range [][2]int{{19, 3}, {60, 0}} {
		if _, _, err := EnqueueCeilings(ctx, adminURL, name, bad[0], bad[1]); err == nil || !strings.Contains(err.Error(), "want events ≥ 20 and producers > 0") {
			t.Errorf("events=%d producers=%d: err = %v, want the sizes refused", bad[0], bad[1], err)
		}
	}
}
