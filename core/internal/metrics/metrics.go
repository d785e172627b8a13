// Package metrics holds Herald's Prometheus metrics: one Metrics per
// daemon, registered on the registry server.Run creates and serves on the
// admin listener's /metrics. Every method is safe on a nil *Metrics, so
// the stages' tests and constructors run without one. Labels are bounded
// sets only (channel, provider, outcome, stage, status): never a tenant,
// user or event id.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Delivery outcomes, the outcome label of herald_deliveries_total.
const (
	OutcomeSent     = "sent"
	OutcomeRetry    = "retry"
	OutcomeFailed   = "failed"
	OutcomeDeferred = "deferred"
	OutcomeDropped  = "dropped"
)

// Publishing stages, the stage label of the publisher's metrics.
const (
	StagePublisher = "publisher"
	StageHandoff   = "handoff"
)

// Metrics is the daemon's set of pipeline metrics.
type Metrics struct {
	eventsAccepted  prometheus.Counter
	eventsProcessed prometheus.Counter
	eventsFailed    prometheus.Counter
	deliveries      *prometheus.CounterVec
	latency         *prometheus.HistogramVec
	relaySize       prometheus.Histogram
	relayDuration   prometheus.Histogram
	pubSize         *prometheus.HistogramVec
	pubDuration     *prometheus.HistogramVec
	unconfirmed     *prometheus.GaugeVec
	pluginSend      *prometheus.HistogramVec
	pluginLogDrop   *prometheus.CounterVec
}

// latencyBuckets spans a few milliseconds (a quiet daemon) to minutes (a
// backlog or a broker outage).
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// sizeBuckets fits batches of 1 to a few thousand.
var sizeBuckets = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000}

// New returns the metrics registered on reg, with the Go runtime and
// process collectors.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		eventsAccepted: prometheus.NewCounter(prometheus.CounterOpts{Name: "herald_events_accepted_total",
			Help: "Events accepted by POST /v1/events and written to the outbox (a replayed event_id is not counted again)."}),
		eventsProcessed: prometheus.NewCounter(prometheus.CounterOpts{Name: "herald_events_processed_total",
			Help: "Outbox events the relay turned into notifications and deliveries (committed)."}),
		eventsFailed: prometheus.NewCounter(prometheus.CounterOpts{Name: "herald_events_failed_total",
			Help: "Outbox events the relay marked FAILED after their last attempt."}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_deliveries_total",
			Help: "Delivery outcomes by channel, provider and outcome: sent, retry, failed (recorded by the listeners; failed also counts unroutable deliveries, provider empty), deferred (written DEFERRED by the relay for quiet hours, provider empty), dropped (malformed broker messages, channel and provider empty)."},
			[]string{"channel", "provider", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "herald_delivery_latency_seconds",
			Help:    "From the delivery's write (the relay transaction that committed it, the time in its UUIDv7 id) to the moment the plugin Send of its first attempt is called, by channel.",
			Buckets: latencyBuckets}, []string{"channel"}),
		relaySize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "herald_relay_batch_events",
			Help: "Events claimed per committed relay batch.", Buckets: sizeBuckets}),
		relayDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "herald_relay_batch_duration_seconds",
			Help: "Duration of a committed relay batch: claim, rules, fan-out writes and commit.", Buckets: latencyBuckets}),
		pubSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "herald_publisher_batch_deliveries",
			Help: "Deliveries published per batch, by stage (publisher: claimed rows; handoff: a relay batch's deliveries).", Buckets: sizeBuckets},
			[]string{"stage"}),
		pubDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "herald_publisher_batch_duration_seconds",
			Help:    "Duration of a published batch from claim (publisher) or publish (handoff) to its broker confirms, by stage.",
			Buckets: latencyBuckets}, []string{"stage"}),
		unconfirmed: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "herald_broker_unconfirmed_publishes",
			Help: "Messages published and not yet confirmed by the broker, by stage."}, []string{"stage"}),
		pluginSend: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "herald_plugin_send_duration_seconds",
			Help:    "Duration of one plugin Send call (one chunk of at most the plugin's MaxBatch), by channel and provider.",
			Buckets: latencyBuckets}, []string{"channel", "provider"}),
		pluginLogDrop: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_plugin_log_lines_dropped_total",
			Help: "Log lines of a plugin the host did not re-emit because the plugin logged over the host's bound, by channel and provider."},
			[]string{"channel", "provider"}),
	}
	reg.MustRegister(m.eventsAccepted, m.eventsProcessed, m.eventsFailed, m.deliveries, m.latency, m.relaySize,
		m.relayDuration, m.pubSize, m.pubDuration, m.unconfirmed, m.pluginSend, m.pluginLogDrop,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, s := range []string{StagePublisher, StageHandoff} {
		m.unconfirmed.WithLabelValues(s)
	}
	return m
}

// EventAccepted counts an event the API wrote to the outbox.
func (m *Metrics) EventAccepted() {
	if m != nil {
		m.eventsAccepted.Inc()
	}
}

// RelayBatch records a committed relay batch of events claimed events, of
// which processed were processed and failed marked FAILED, that took d.
func (m *Metrics) RelayBatch(events, processed, failed int, d time.Duration) {
	if m == nil {
		return
	}
	m.eventsProcessed.Add(float64(processed))
	m.eventsFailed.Add(float64(failed))
	m.relaySize.Observe(float64(events))
	m.relayDuration.Observe(d.Seconds())
}

// Delivery counts n deliveries of channel and provider with outcome.
func (m *Metrics) Delivery(channel, provider, outcome string, n int) {
	if m != nil && n > 0 {
		m.deliveries.WithLabelValues(channel, provider, outcome).Add(float64(n))
	}
}

// SendLatency records the time from a delivery's write (its UUIDv7 id) to its plugin
// Send.
func (m *Metrics) SendLatency(channel string, d time.Duration) {
	m.SendLatencies(channel)(d)
}

// SendLatencies returns SendLatency for channel, its series looked up once
// for a batch.
func (m *Metrics) SendLatencies(channel string) func(time.Duration) {
	if m == nil {
		return func(time.Duration) {}
	}
	o := m.latency.WithLabelValues(channel)
	return func(d time.Duration) { o.Observe(max(d, 0).Seconds()) }
}

// PublishBatch records a batch of n deliveries the stage published and
// saw confirmed in d.
func (m *Metrics) PublishBatch(stage string, n int, d time.Duration) {
	if m != nil {
		m.pubSize.WithLabelValues(stage).Observe(float64(n))
		m.pubDuration.WithLabelValues(stage).Observe(d.Seconds())
	}
}

// Unconfirmed adds delta (negative once confirmed, nacked or given up) to
// the stage's messages awaiting a broker confirm.
func (m *Metrics) Unconfirmed(stage string, delta int) {
	if m != nil && delta != 0 {
		m.unconfirmed.WithLabelValues(stage).Add(float64(delta))
	}
}

// PluginLogDropped counts n log lines of channel's provider's plugin that
// the host dropped.
func (m *Metrics) PluginLogDropped(channel, provider string, n int) {
	if m != nil {
		m.pluginLogDrop.WithLabelValues(channel, provider).Add(float64(n))
	}
}

// PluginSend records one plugin Send call of channel's provider.
func (m *Metrics) PluginSend(channel, provider string, d time.Duration) {
	if m != nil {
		m.pluginSend.WithLabelValues(channel, provider).Observe(d.Seconds())
	}
}
