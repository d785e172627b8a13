package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestNilMetricsRecordNothing(t *testing.T) {
	var m *metrics.Metrics
	m.EventAccepted()
	m.RelayBatch(3, 2, 1, time.Second)
	m.Delivery("EMAIL", "ses", metrics.OutcomeSent, 1)
	m.SendLatency("EMAIL", time.Second)
	m.PublishBatch(metrics.StagePublisher, 3, time.Second)
	m.Unconfirmed(metrics.StageHandoff, 2)
	m.PluginSend("EMAIL", "ses", time.Second)
}

func TestMetricsFollowPrometheusConventions(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.EventAccepted()
	m.RelayBatch(3, 2, 1, 40*time.Millisecond)
	m.Delivery("EMAIL", "ses", metrics.OutcomeSent, 2)
	m.SendLatency("EMAIL", 30*time.Millisecond)
	m.PublishBatch(metrics.StageHandoff, 3, time.Millisecond)
	m.PluginSend("EMAIL", "ses", time.Millisecond)
	reg.MustRegister(metrics.NewBacklogCollector(func(context.Context) (metrics.Backlog, error) { return metrics.Backlog{}, nil }, time.Second, time.Second),
		metrics.NewProvidersCollector(func() []metrics.Provider { return []metrics.Provider{{Channel: "EMAIL", Provider: "ses", Up: true}} }),
		metrics.BrokerConnected(func() bool { return true }))
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "herald_") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
	want := `
# HELP herald_events_processed_total Outbox events the relay turned into notifications and deliveries (committed).
# TYPE herald_events_processed_total counter
herald_events_processed_total 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "herald_events_processed_total"); err != nil {
		t.Fatal(err)
	}
}

func TestBacklogQueryRunsAtMostEveryInterval(t *testing.T) {
	calls := 0
	fail := false
	c := metrics.NewBacklogCollector(func(context.Context) (metrics.Backlog, error) {
		calls++
		if fail {
			return metrics.Backlog{}, errors.New("database down")
		}
		return metrics.Backlog{Pending: 7}, nil
	}, time.Hour, time.Second)
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	for range 3 {
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Fatalf("3 scrapes within the interval ran the query %d times, want 1", calls)
	}
	want := `
# HELP herald_deliveries_backlog Deliveries waiting by status: pending (for the publisher), retry (for their next attempt), deferred (quiet hours); capped at the query's limit.
# TYPE herald_deliveries_backlog gauge
herald_deliveries_backlog{status="deferred"} 0
herald_deliveries_backlog{status="pending"} 7
herald_deliveries_backlog{status="retry"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "herald_deliveries_backlog"); err != nil {
		t.Fatal(err)
	}
}
