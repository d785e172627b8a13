package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/metrics"
	"github.com/heraldhq/herald/core/internal/source"
	"github.com/heraldhq/herald/core/internal/statusev"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape is one parsed GET /metrics of the admin listener.
type scrape map[string]*dto.MetricFamily

// scrapeMetrics reads the daemon's metrics with the admin token and parses
// them with the Prometheus text parser.
func (e *env) scrapeMetrics() scrape {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.admin+"/metrics", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		e.t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// sum adds the values (counter, gauge, or a histogram's sample count) of
// name's series whose labels include every pair of want.
func (s scrape) sum(name string, want ...string) float64 {
	f, ok := s[name]
	if !ok {
		return -1
	}
	total := 0.0
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if labels[want[i]] != want[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total
}

func (s scrape) String() string {
	var names []string
	for n := range s {
		if strings.HasPrefix(n, "herald_") {
			names = append(names, fmt.Sprintf("%s=%g", n, s.sum(n)))
		}
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

func TestMetricsMoveAsDeliveriesFlow(t *testing.T) {
	e := newEnv(t, "sent")
	e.start()

	// Behind the admin token like the rest of the admin listener.
	resp, err := http.Get(e.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without the admin token: %d, want 401", resp.StatusCode)
	}

	before := e.scrapeMetrics()
	for _, n := range []string{"go_goroutines", "process_resident_memory_bytes", "herald_broker_connected", "herald_plugin_up"} {
		if _, ok := before[n]; !ok {
			t.Fatalf("%s missing from the scrape", n)
		}
	}
	if got := before.sum("herald_deliveries_total", "outcome", "sent"); got > 0 {
		t.Fatalf("sent deliveries before any event = %g", got)
	}

	const events = 4
	c := e.client()
	ctx := context.Background()
	for i := range events {
		if _, created, err := c.Emit(ctx, reservation(fmt.Sprintf("evt-m%d", i))); err != nil || !created {
			t.Fatalf("emit: created=%v err=%v", created, err)
		}
	}
	want := events * deliveriesPerEvent
	e.waitAllSent(want, 30*time.Second)

	// The counters catch up with the database, and the backlog (cached
	// for a few seconds) drains to zero.
	var s scrape
	testenv.Eventually(t, 30*time.Second, func() bool {
		s = e.scrapeMetrics()
		return s.sum("herald_deliveries_total", "outcome", "sent") == float64(want) &&
			s.sum("herald_events_processed_total") == events &&
			s.sum("herald_events_pending") == 0 && s.sum("herald_deliveries_backlog") == 0 &&
			s.sum("herald_deliveries_oldest_pending_age_seconds") == 0 &&
			s.sum("herald_broker_unconfirmed_publishes") == 0
	}, "metrics to reflect %d sent deliveries and an empty backlog", want)

	sentInDB := e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT'`)
	if got := s.sum("herald_deliveries_total", "outcome", "sent"); got != float64(sentInDB) {
		t.Errorf("herald_deliveries_total{outcome=sent} = %g, want %d (the database's SENT)", got, sentInDB)
	}
	for _, ch := range []string{"EMAIL", "PUSH", "WEBSOCKET"} {
		if got := s.sum("herald_deliveries_total", "channel", ch, "provider", "sink", "outcome", "sent"); got != events*3 {
			t.Errorf("sent on %s by sink = %g, want %d", ch, got, events*3)
		}
	}
	checks := []struct {
		name   string
		labels []string
		want   func(float64) bool
		what   string
	}{
		{"herald_events_accepted_total", nil, func(v float64) bool { return v == events }, fmt.Sprint(events)},
		{"herald_events_failed_total", nil, func(v float64) bool { return v == 0 }, "0"},
		{"herald_deliveries_total", []string{"outcome", "failed"}, func(v float64) bool { return v == 0 }, "0"},
		// Every delivery made its first attempt: one latency sample each.
		{"herald_delivery_latency_seconds", nil, func(v float64) bool { return v == float64(want) }, fmt.Sprint(want)},
		{"herald_plugin_send_duration_seconds", []string{"provider", "sink"}, func(v float64) bool { return v > 0 }, "> 0"},
		{"herald_relay_batch_events", nil, func(v float64) bool { return v > 0 }, "> 0"},
		{"herald_relay_batch_duration_seconds", nil, func(v float64) bool { return v > 0 }, "> 0"},
		{"herald_publisher_batch_deliveries", nil, func(v float64) bool { return v > 0 }, "> 0"},
		{"herald_publisher_batch_duration_seconds", nil, func(v float64) bool { return v > 0 }, "> 0"},
		{"herald_broker_connected", nil, func(v float64) bool { return v == 1 }, "1"},
		{"herald_plugin_up", []string{"channel", "EMAIL"}, func(v float64) bool { return v == 1 }, "1"},
		{"herald_plugin_breaker_open", nil, func(v float64) bool { return v == 0 }, "0"},
		{"herald_plugin_restarts_total", nil, func(v float64) bool { return v == 0 }, "0"},
		{"herald_backlog_query_up", nil, func(v float64) bool { return v == 1 }, "1"},
	}
	for _, c := range checks {
		if got := s.sum(c.name, c.labels...); !c.want(got) {
			t.Errorf("%s%v = %g, want %s", c.name, c.labels, got, c.what)
		}
	}
	// Bounded labels only: no tenant, user or event ids.
	for name, f := range s {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "tenant", "tenant_id", "user", "user_id", "event", "event_id", "delivery_id":
					t.Errorf("%s has an unbounded label %s", name, l.GetName())
				}
			}
		}
	}
	if t.Failed() {
		t.Logf("scrape: %s", s)
	}

	// Every herald metric served is one TestDashboardShowsEveryMetric
	// knows of, and every metric the shipped Grafana dashboard queries is
	// served, or declared and without a sample yet (a labelled series of
	// a feature this run does not use: digests, sources, webhooks).
	declared := declaredMetrics(t)
	for n := range s {
		if strings.HasPrefix(n, "herald_") && !declared[n] {
			t.Errorf("/metrics serves %s, which declaredMetrics does not register: add its constructor there", n)
		}
	}
	for _, n := range dashboardMetrics(t) {
		if _, ok := s[n]; !ok && !declared[n] {
			t.Errorf("examples/grafana/herald.json queries %s, which /metrics does not serve", n)
		}
	}
}

// TestDashboardShowsEveryMetric checks the shipped Grafana dashboard
// against every metric the daemon declares: each herald metric has a
// panel that queries it, and the dashboard queries no metric the daemon
// does not declare.
func TestDashboardShowsEveryMetric(t *testing.T) {
	t.Parallel()
	declared := declaredMetrics(t)
	shown := map[string]bool{}
	for _, n := range dashboardMetrics(t) {
		shown[n] = true
		if !declared[n] && strings.HasPrefix(n, "herald_") {
			t.Errorf("examples/grafana/herald.json queries %s, which the daemon does not declare", n)
		}
	}
	var missing []string
	for n := range declared {
		if strings.HasPrefix(n, "herald_") && !shown[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	for _, n := range missing {
		t.Errorf("%s has no panel in examples/grafana/herald.json", n)
	}
}

// declaredMetrics returns the name of every metric herald serve registers
// (server.go and RegisterStateCollectors: metrics.New, the state
// collectors, statusev.NewMetrics and source.NewMetrics), whether or not
// it has a sample yet: a vector's family is served only once one of its
// series is.
func declaredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	reg := &describing{Registerer: prometheus.NewRegistry()}
	metrics.New(reg)
	reg.MustRegister(metrics.NewBacklogCollector(func(context.Context) (metrics.Backlog, error) { return metrics.Backlog{}, nil },
		time.Second, time.Second))
	reg.MustRegister(metrics.NewProvidersCollector(func() []metrics.Provider { return nil }))
	reg.MustRegister(metrics.BrokerConnected(func() bool { return true }))
	statusev.NewMetrics(reg)
	source.NewMetrics(reg)
	name := regexp.MustCompile(`fqName: "([a-z0-9_]+)"`)
	out := map[string]bool{}
	for _, d := range reg.descs {
		m := name.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		out[m[1]] = true
	}
	if !out["herald_deliveries_total"] {
		t.Fatalf("declared metrics %v lack herald_deliveries_total", out)
	}
	return out
}

// describing is a Registerer that keeps the descriptors of what it
// registers.
type describing struct {
	prometheus.Registerer
	descs []*prometheus.Desc
}

// Register records c's descriptors and registers it.
func (r *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		r.descs = append(r.descs, d)
	}
	return r.Registerer.Register(c)
}

// MustRegister is Register that panics on an error.
func (r *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// dashboardMetrics returns the metric names the dashboard's expressions
// reference (a histogram's _bucket, _sum and _count as its family name).
func dashboardMetrics(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "examples", "grafana", "herald.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("herald.json: %v", err)
	}
	name := regexp.MustCompile(`\b(?:herald|go|process)_[a-z0-9_]+`)
	seen := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(n, suf); ok && strings.HasPrefix(b, "herald_") {
						n = b
					}
				}
				seen[n] = true
			}
		}
	}
	if len(seen) == 0 {
		t.Fatal("the dashboard references no metric")
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func TestMetricsCountFailedDeliveries(t *testing.T) {
	e := newEnv(t, "permanent")
	e.start()
	if _, created, err := e.client().Emit(context.Background(), reservation("evt-f1")); err != nil || !created {
		t.Fatalf("emit: created=%v err=%v", created, err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE status = 'FAILED'`) == deliveriesPerEvent
	}, "%d deliveries FAILED (now: %s)", deliveriesPerEvent, e.statusSummary())
	var s scrape
	testenv.Eventually(t, 30*time.Second, func() bool {
		s = e.scrapeMetrics()
		return s.sum("herald_deliveries_total", "outcome", "failed") == deliveriesPerEvent
	}, "herald_deliveries_total{outcome=failed} = %d", deliveriesPerEvent)
	if got := s.sum("herald_deliveries_total", "channel", "EMAIL", "provider", "sink", "outcome", "failed"); got != 3 {
		t.Errorf("failed on EMAIL by sink = %g, want 3", got)
	}
	for _, o := range []string{"sent", "retry"} {
		if got := s.sum("herald_deliveries_total", "outcome", o); got != 0 {
			t.Errorf("herald_deliveries_total{outcome=%s} = %g, want 0", o, got)
		}
	}
}
