// Package metrics holds Herald's Prometheus metrics: one Metrics per
// daemon, registered on the registry server.Run creates and serves on the
// admin listener's /metrics. Every method is safe on a nil *Metrics, so
// the stages' tests and constructors run without one. Labels are bounded
// sets only (channel, provider, outcome, stage, status, reason): never a
// user or event id, and a tenant only on herald_live_sessions, whose
// series exists while the tenant holds a session on the daemon.
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
	// OutcomeSkipped: the plugin did not send by design (a live delivery
	// to a user with no open session); not a failure.
	OutcomeSkipped = "skipped"
	// OutcomeCancelled: called off before it was sent (DELETE
	// /v1/events/{id}).
	OutcomeCancelled = "cancelled"
	// OutcomeEmpty: a digest window whose items were all cancelled
	// before it closed; nothing was sent (herald_digests_flushed_total).
	OutcomeEmpty = "empty"
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
	eventsFailed    *prometheus.CounterVec
	deliveries      *prometheus.CounterVec
	latency         *prometheus.HistogramVec
	relaySize       prometheus.Histogram
	relayDuration   prometheus.Histogram
	pubSize         *prometheus.HistogramVec
	pubDuration     *prometheus.HistogramVec
	unconfirmed     *prometheus.GaugeVec
	pluginSend      *prometheus.HistogramVec
	liveSessions    *prometheus.GaugeVec
	liveRefused     *prometheus.CounterVec
	httpConns       prometheus.Gauge
	httpRefused     *prometheus.CounterVec
	httpIdleClosed  prometheus.Counter
	pluginLogDrop   *prometheus.CounterVec
	digestItems     *prometheus.CounterVec
	digestsFlushed  *prometheus.CounterVec
	digestLag       *prometheus.HistogramVec
	throttled       *prometheus.CounterVec
}

// Reasons a live session or a connection is refused, the reason label of
// herald_live_sessions_refused_total and herald_http_connections_refused_total.
const (
	RefusedUser    = "user"
	RefusedTenant  = "tenant"
	RefusedAddress = "address"
	RefusedDaemon  = "daemon"
)

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
		eventsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_events_failed_total",
			Help: "Outbox events the relay marked FAILED, by reason: attempts_exhausted (after their last attempt), payload_too_large (over the event contract's payload limit, failed without being loaded)."},
			[]string{"reason"}),
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
		liveSessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "herald_live_sessions",
			Help: "Open live (WebSocket) sessions on this daemon, by tenant (a tenant's series goes away when it holds none)."}, []string{"tenant"}),
		liveRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_live_sessions_refused_total",
			Help: "Live sessions refused with 429 at GET /v1/live, by the cap that was full: user (live.max_sessions_per_user), tenant (live.max_sessions_per_tenant or the tenant's own), address (live.max_sessions_per_ip), daemon (live.max_sessions)."},
			[]string{"reason"}),
		httpConns: prometheus.NewGauge(prometheus.GaugeOpts{Name: "herald_http_connections",
			Help: "Open connections on the public API listener (live sessions included)."}),
		httpRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_http_connections_refused_total",
			Help: "Connections to the public API answered 429 and closed at accept, by reason: address (http.max_conns_per_ip)."},
			[]string{"reason"}),
		httpIdleClosed: prometheus.NewCounter(prometheus.CounterOpts{Name: "herald_http_idle_connections_closed_total",
			Help: "Idle keep-alive connections the public API closed early because its open connections passed three quarters of http.max_conns (after http.pressure_idle_timeout)."}),
		pluginLogDrop: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_plugin_log_lines_dropped_total",
			Help: "Log lines of a plugin the host did not re-emit because the plugin logged over the host's bound, by channel and provider."},
			[]string{"channel", "provider"}),
		digestItems: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_digest_items_total",
			Help: "Deliveries the relay collected into a digest window (WAITING, hold digest), by channel."}, []string{"channel"}),
		digestsFlushed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_digests_flushed_total",
			Help: "Digest windows flushed (committed), by channel and outcome: sent (one digest delivery written PENDING), failed (written FAILED: the rule or its template could not render it), empty (every item was cancelled; nothing sent)."},
			[]string{"channel", "outcome"}),
		digestLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "herald_digest_flush_lag_seconds",
			Help:    "From the time a digest window fell due (its window ended, or it reached max_items) to the commit of its flush, by channel.",
			Buckets: latencyBuckets}, []string{"channel"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_throttled_total",
			Help: "Deliveries the relay wrote SKIPPED because they went over their throttle's limit, by channel."}, []string{"channel"}),
	}
	reg.MustRegister(m.digestItems, m.digestsFlushed, m.digestLag, m.throttled)
	reg.MustRegister(m.eventsAccepted, m.eventsProcessed, m.eventsFailed, m.deliveries, m.latency, m.relaySize,
		m.relayDuration, m.pubSize, m.pubDuration, m.unconfirmed, m.pluginSend, m.liveSessions, m.liveRefused, m.httpConns, m.httpRefused, m.httpIdleClosed, m.pluginLogDrop,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, s := range []string{StagePublisher, StageHandoff} {
		m.unconfirmed.WithLabelValues(s)
	}
	for _, r := range []string{ReasonAttemptsExhausted, ReasonPayloadTooLarge, ReasonUnknownType, ReasonPayloadNotObject, ReasonPayloadSchema} {
		m.eventsFailed.WithLabelValues(r)
	}
	for _, r := range []string{RefusedUser, RefusedTenant, RefusedAddress, RefusedDaemon} {
		m.liveRefused.WithLabelValues(r)
	}
	m.httpRefused.WithLabelValues(RefusedAddress)
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
	m.eventsFailed.WithLabelValues(ReasonAttemptsExhausted).Add(float64(failed))
	m.relaySize.Observe(float64(events))
	m.relayDuration.Observe(d.Seconds())
}

// Reasons of herald_events_failed_total.
const (
	// ReasonAttemptsExhausted: the event failed its last attempt.
	ReasonAttemptsExhausted = "attempts_exhausted"
	// ReasonPayloadTooLarge: the event's payload is over the event
	// contract's limit; the relay failed it without loading it.
	ReasonPayloadTooLarge = "payload_too_large"
	// ReasonUnknownType: no rule handles the event's type; the relay
	// failed it at once.
	ReasonUnknownType = "unknown_event_type"
	// ReasonPayloadNotObject: the event's payload is not a JSON object;
	// the relay failed it at once.
	ReasonPayloadNotObject = "payload_not_object"
	// ReasonPayloadSchema: the event's payload does not match its type's
	// JSON Schema; the relay failed it at once.
	ReasonPayloadSchema = "payload_schema"
)

// EventsFailed counts n events the relay marked FAILED for reason.
func (m *Metrics) EventsFailed(reason string, n int) {
	if m != nil && n > 0 {
		m.eventsFailed.WithLabelValues(reason).Add(float64(n))
	}
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

// LiveSessions sets the tenant's open live sessions on this daemon to n;
// at 0 the tenant's series is removed.
func (m *Metrics) LiveSessions(tenant string, n int) {
	if m == nil {
		return
	}
	if n <= 0 {
		m.liveSessions.DeleteLabelValues(tenant)
		return
	}
	m.liveSessions.WithLabelValues(tenant).Set(float64(n))
}

// LiveRefused counts a live session refused because of reason's cap.
func (m *Metrics) LiveRefused(reason string) {
	if m != nil {
		m.liveRefused.WithLabelValues(reason).Inc()
	}
}

// HTTPConns adds delta to the public listener's open connections.
func (m *Metrics) HTTPConns(delta int) {
	if m != nil {
		m.httpConns.Add(float64(delta))
	}
}

// HTTPRefused counts a connection refused at accept because of reason.
func (m *Metrics) HTTPRefused(reason string) {
	if m != nil {
		m.httpRefused.WithLabelValues(reason).Inc()
	}
}

// HTTPIdleClosed counts n idle connections closed under pressure.
func (m *Metrics) HTTPIdleClosed(n int) {
	if m != nil && n > 0 {
		m.httpIdleClosed.Add(float64(n))
	}
}

// DigestItems counts n deliveries of channel the relay collected into
// digest windows.
func (m *Metrics) DigestItems(channel string, n int) {
	if m != nil && n > 0 {
		m.digestItems.WithLabelValues(channel).Add(float64(n))
	}
}

// DigestFlushed counts a digest window of channel flushed with outcome
// (OutcomeSent, OutcomeFailed, OutcomeEmpty), lag after it fell due.
func (m *Metrics) DigestFlushed(channel, outcome string, lag time.Duration) {
	if m != nil {
		m.digestsFlushed.WithLabelValues(channel, outcome).Inc()
		m.digestLag.WithLabelValues(channel).Observe(max(lag, 0).Seconds())
	}
}

// Throttled counts n deliveries of channel the relay skipped over their
// throttle's limit.
func (m *Metrics) Throttled(channel string, n int) {
	if m != nil && n > 0 {
		m.throttled.WithLabelValues(channel).Add(float64(n))
	}
}
