package relay_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/metrics"
	"github.com/heraldhq/herald/core/internal/relay"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/prometheus/client_golang/prometheus"
)

// failedTotal reads herald_events_failed_total{reason} from reg.
func failedTotal(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "herald_events_failed_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("herald_events_failed_total{reason=%q} is not served", reason)
	return 0
}

// An event over the contract's payload limit (written before the contract,
// or by the owner with the trigger off) ends FAILED at the first claim,
// with a reason naming the field, counted by reason, and the events around
// it are relayed.
func TestRelayFailsAnOversizeEventAndGoesOn(t *testing.T) {
	t.Parallel()
	db, rs := setup(t)
	ctx := context.Background()
	enqueue(t, db, "before", "PING", `{"user":"u1"}`)
	big := `{"user":"u1","pad":"` + strings.Repeat("x", 3<<20) + `"}`
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`ALTER TABLE event_outbox DISABLE TRIGGER event_outbox_contract`,
		`INSERT INTO event_outbox (tenant_id, event_id, event_type, payload) VALUES ('t1', 'huge', 'PING', $1)`,
		`ALTER TABLE event_outbox ENABLE TRIGGER event_outbox_contract`} {
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{big}
		}
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue(t, db, "after", "PING", `{"user":"u1"}`)

	reg := prometheus.NewRegistry()
	r := relay.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(),
		relay.Config{BatchSize: 10, MaxAttempts: 5, Metrics: metrics.New(reg)})
	n, err := r.RunOnce(ctx)
	if err != nil || n != 3 {
		t.Fatalf("RunOnce = %d, %v; want 3 events (2 relayed, 1 failed)", n, err)
	}
	st, err := store.GetEvent(ctx, db.Pool, "t1", "huge")
	if err != nil {
		t.Fatal(err)
	}
	want := "event_outbox.payload: larger than 262144 bytes (3145753 bytes as stored); the relay does not load it"
	if st.Status != "FAILED" || st.Attempts != 1 || st.LastError != want {
		t.Fatalf("oversize event: %s after %d attempts, %q; want FAILED after 1 with %q", st.Status, st.Attempts, st.LastError, want)
	}
	if n := count(t, db, `SELECT count(*) FROM event_outbox WHERE status = 'PROCESSED' AND event_id IN ('before', 'after')`); n != 2 {
		t.Fatalf("%d of the events around it processed, want 2", n)
	}
	if n := count(t, db, `SELECT count(*) FROM notifications WHERE event_id = 'huge'`); n != 0 {
		t.Fatalf("the oversize event has %d notifications", n)
	}
	if got := failedTotal(t, reg, metrics.ReasonPayloadTooLarge); got != 1 {
		t.Fatalf("herald_events_failed_total{reason=payload_too_large} = %g, want 1", got)
	}
	if got := failedTotal(t, reg, metrics.ReasonAttemptsExhausted); got != 0 {
		t.Fatalf("herald_events_failed_total{reason=attempts_exhausted} = %g, want 0", got)
	}
}

// A backlog of large but legal payloads is claimed in several
// transactions, each within the byte budget (and at least one event even
// when that one alone is over it).
func TestRelayClaimsByByteBudget(t *testing.T) {
	t.Parallel()
	db, rs := setup(t)
	ctx := context.Background()
	pad := strings.Repeat("x", 100_000)
	for i := range 10 {
		enqueue(t, db, "e"+strconv.Itoa(i), "PING", `{"user":"u1","pad":"`+pad+`"}`)
	}
	// Stored as {"pad": "...", "user": "u1"}: 100,024 bytes each.
	const budget = 350_000
	var sizes []int
	{
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c, err := store.ClaimEvents(ctx, tx, 100, budget)
		if err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback(ctx)
		var sum int
		for _, e := range c.Events {
			sum += len(e.Payload)
		}
		if sum > budget {
			t.Fatalf("a claim loaded %d bytes of payloads, over the budget %d", sum, budget)
		}
		if len(c.Events) != 3 || !c.Full {
			t.Fatalf("claim of %d events (full %v), want 3 of 100 KB within %d bytes, and more due", len(c.Events), c.Full, budget)
		}
	}
	r := relay.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(),
		relay.Config{BatchSize: 100, BatchBytes: budget})
	for {
		n, err := r.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		sizes = append(sizes, n)
	}
	want := []int{3, 3, 3, 1}
	if len(sizes) != len(want) {
		t.Fatalf("claims of %v events, want %v", sizes, want)
	}
	for i := range want {
		if sizes[i] != want[i] {
			t.Fatalf("claims of %v events, want %v", sizes, want)
		}
	}
	// A budget smaller than one payload still moves one event a claim.
	for i := range 2 {
		enqueue(t, db, "solo"+strconv.Itoa(i), "PING", `{"user":"u1","pad":"`+pad+`"}`)
	}
	small := relay.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(),
		relay.Config{BatchSize: 100, BatchBytes: 1000})
	for i := range 2 {
		if n, err := small.RunOnce(ctx); err != nil || n != 1 {
			t.Fatalf("claim %d under a 1000-byte budget: %d events, %v; want 1", i, n, err)
		}
	}
	if n := count(t, db, `SELECT count(*) FROM event_outbox WHERE status = 'PROCESSED'`); n != 12 {
		t.Fatalf("processed %d events, want 12", n)
	}
}
