package digest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/digest"
	"github.com/heraldhq/herald/core/internal/metrics"
	"github.com/heraldhq/herald/core/internal/relay"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestDigestAndThrottleMetricsMoveWithARealFlush relays five reservations
// for one manager (four at restaurant 1, one at restaurant 2) under a rule
// that collects EMAIL (max 3 items) and throttles WEBSOCKET to 2 per hour,
// cancels restaurant 2's item and flushes every window: the items,
// throttled, windows-open, flushed (sent and empty) and lag figures are
// what happened.
func TestDigestAndThrottleMetricsMoveWithARealFlush(t *testing.T) {
	t.Parallel()
	text := strings.Replace(testRules, "  inbox {", `  throttle {
    channels = ["WEBSOCKET"]
    key      = "manager:{{ .payload.manager }}"
    limit    = 2
    per      = "1h"
  }
  inbox {`, 1)
	db, rs := setupRules(t, 1, text)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	for i := range 4 {
		enqueue(t, db, fmt.Sprintf("r1-%d", i), fmt.Sprintf(`{"manager": "m0", "restaurant": 1, "n": %d}`, i))
	}
	enqueue(t, db, "r2-0", `{"manager": "m0", "restaurant": 2, "n": 100}`)
	r := relay.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(), relay.Config{BatchSize: 100, Metrics: m})
	for {
		n, err := r.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if got := counter(t, reg, "herald_digest_items_total", "EMAIL"); got != 5 {
		t.Errorf("herald_digest_items_total{EMAIL} = %v, want 5", got)
	}
	if got := counter(t, reg, "herald_throttled_total", "WEBSOCKET"); got != 3 {
		t.Errorf("herald_throttled_total{WEBSOCKET} = %v, want 3 (5 sent, limit 2)", got)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE channel = 'WEBSOCKET' AND status = 'SKIPPED'`); n != 3 {
		t.Fatalf("%d WEBSOCKET deliveries SKIPPED, want 3", n)
	}
	// One FULL window (r1-0..2, due at once), restaurant 1's open one and
	// restaurant 2's.
	b, err := store.ReadBacklog(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if b.DigestWindows != 3 {
		t.Fatalf("backlog: %d digest windows, want 3", b.DigestWindows)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE deliveries SET status = 'CANCELLED', last_error = 'cancelled' WHERE event_id = 'r2-0' AND channel = 'EMAIL' AND status = 'WAITING'`); err != nil {
		t.Fatal(err)
	}

	f := digest.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(), digest.Config{Metrics: m})
	if _, err := f.FlushOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, reg, "herald_digests_flushed_total", "EMAIL", metrics.OutcomeSent); got != 1 {
		t.Fatalf("herald_digests_flushed_total{EMAIL,sent} = %v after the full window, want 1", got)
	}
	// The open windows fell due 2 seconds ago: their lag is at least that.
	if _, err := db.Pool.Exec(ctx, `UPDATE digest_windows SET closes_at = now() - interval '2 seconds'`); err != nil {
		t.Fatal(err)
	}
	if b, err = store.ReadBacklog(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if b.DigestWindows != 2 || b.OldestDueDigestAge < 2*time.Second {
		t.Fatalf("backlog: %d digest windows, oldest due %v; want 2, at least 2s", b.DigestWindows, b.OldestDueDigestAge)
	}
	if _, err := f.FlushOnce(ctx); err != nil {
		t.Fatal(err)
	}
	for outcome, want := range map[string]float64{metrics.OutcomeSent: 2, metrics.OutcomeEmpty: 1, metrics.OutcomeFailed: 0} {
		if got := counter(t, reg, "herald_digests_flushed_total", "EMAIL", outcome); got != want {
			t.Errorf("herald_digests_flushed_total{EMAIL,%s} = %v, want %v", outcome, got, want)
		}
	}
	obs, sum := histogram(t, reg, "herald_digest_flush_lag_seconds", "EMAIL")
	if obs != 3 || sum < 4 || sum > 60 {
		t.Errorf("herald_digest_flush_lag_seconds: %d observations summing %.3fs, want 3 summing at least 4s", obs, sum)
	}
	if n := count(t, db, `SELECT count(*) FROM digest_windows`); n != 0 {
		t.Fatalf("%d windows left", n)
	}
}

// series returns the gathered series of name whose label values are
// values, in order (nil: none).
func series(t *testing.T, reg *prometheus.Registry, name string, values ...string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(values) {
				continue
			}
			for i, l := range m.GetLabel() {
				if l.GetValue() != values[i] {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

func counter(t *testing.T, reg *prometheus.Registry, name string, values ...string) float64 {
	t.Helper()
	return series(t, reg, name, values...).GetCounter().GetValue()
}

func histogram(t *testing.T, reg *prometheus.Registry, name string, values ...string) (uint64, float64) {
	t.Helper()
	h := series(t, reg, name, values...).GetHistogram()
	return h.GetSampleCount(), h.GetSampleSum()
}
