package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Backlog is what waits in the database, read by a cheap periodic query.
type Backlog struct {
	// EventsPending counts PENDING outbox events (capped by the query).
	EventsPending int64
	// OldestEventAge is how long the oldest PENDING event has been due.
	OldestEventAge time.Duration
	// Deliveries counts deliveries by status: PENDING, RETRY, DEFERRED
	// (each capped by the query).
	Pending, Retry, Deferred int64
	// OldestPendingAge is how long the oldest PENDING delivery has been
	// due.
	OldestPendingAge time.Duration
	// DigestWindows counts digest windows not yet flushed (open, full or
	// due; capped by the query).
	DigestWindows int64
	// OldestDueDigestAge is how long the oldest due digest window has
	// waited for its flush (0: none).
	OldestDueDigestAge time.Duration
}

// BacklogCollector reports the backlog gauges from query, run at most
// every interval (scrapes in between get the cached figures) and bounded
// by timeout.
type BacklogCollector struct {
	query    func(context.Context) (Backlog, error)
	interval time.Duration
	timeout  time.Duration

	mu     sync.Mutex
	last   time.Time
	cached Backlog
	ok     bool

	events, eventAge, deliveries, pendingAge, up *prometheus.Desc
	digestWindows, digestDueAge                  *prometheus.Desc
	errors                                       prometheus.Counter
}

// NewBacklogCollector returns the collector; register it with
// RegisterBacklog or on its own.
func NewBacklogCollector(query func(context.Context) (Backlog, error), interval, timeout time.Duration) *BacklogCollector {
	return &BacklogCollector{query: query, interval: interval, timeout: timeout,
		events: prometheus.NewDesc("herald_events_pending",
			"PENDING outbox events waiting for the relay (capped at the query's limit; refreshed at most every few seconds).", nil, nil),
		eventAge: prometheus.NewDesc("herald_events_oldest_pending_age_seconds",
			"How long the oldest PENDING outbox event has been due (0: none).", nil, nil),
		deliveries: prometheus.NewDesc("herald_deliveries_backlog",
			"Deliveries waiting by status: pending (for the publisher), retry (for their next attempt), deferred (quiet hours); capped at the query's limit.",
			[]string{"status"}, nil),
		pendingAge: prometheus.NewDesc("herald_deliveries_oldest_pending_age_seconds",
			"How long the oldest PENDING delivery has been due (0: none).", nil, nil),
		digestWindows: prometheus.NewDesc("herald_digest_windows_open",
			"Digest windows not yet flushed (collecting, full or due), every tenant; capped at the query's limit.", nil, nil),
		digestDueAge: prometheus.NewDesc("herald_digest_windows_oldest_due_age_seconds",
			"How long the oldest due digest window has waited for its flush (0: none).", nil, nil),
		up: prometheus.NewDesc("herald_backlog_query_up",
			"1 when the last backlog query succeeded, 0 when it failed (the gauges then keep their last figures).", nil, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "herald_backlog_query_errors_total",
			Help: "Backlog queries that failed or timed out."}),
	}
}

// Describe implements prometheus.Collector.
func (c *BacklogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.events, c.eventAge, c.deliveries, c.pendingAge, c.digestWindows, c.digestDueAge, c.up} {
		ch <- d
	}
	c.errors.Describe(ch)
}

// Collect implements prometheus.Collector: it runs the query when the
// cached figures are older than the interval. Concurrent scrapes wait for
// one query.
func (c *BacklogCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if c.last.IsZero() || time.Since(c.last) >= c.interval {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		b, err := c.query(ctx)
		cancel()
		c.last = time.Now()
		if err != nil {
			c.errors.Inc()
			c.ok = false
		} else {
			c.cached, c.ok = b, true
		}
	}
	b, ok := c.cached, c.ok
	c.mu.Unlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.events, float64(b.EventsPending))
	gauge(c.eventAge, b.OldestEventAge.Seconds())
	gauge(c.deliveries, float64(b.Pending), "pending")
	gauge(c.deliveries, float64(b.Retry), "retry")
	gauge(c.deliveries, float64(b.Deferred), "deferred")
	gauge(c.pendingAge, b.OldestPendingAge.Seconds())
	gauge(c.digestWindows, float64(b.DigestWindows))
	gauge(c.digestDueAge, b.OldestDueDigestAge.Seconds())
	up := 0.0
	if ok {
		up = 1
	}
	gauge(c.up, up)
	c.errors.Collect(ch)
}

// Provider is one plugin provider's state at scrape time.
type Provider struct {
	Channel, Provider string
	// Up: a plugin process runs and takes traffic (breaker closed or not).
	Up bool
	// BreakerOpen: its circuit breaker keeps traffic on the next provider.
	BreakerOpen bool
	// Restarts counts restarts after crashes.
	Restarts int
}

// ProvidersCollector reports the plugin host's providers as read by
// status at scrape time.
type ProvidersCollector struct {
	status                 func() []Provider
	up, restarts, breakers *prometheus.Desc
}

// NewProvidersCollector returns the collector for status.
func NewProvidersCollector(status func() []Provider) *ProvidersCollector {
	labels := []string{"channel", "provider"}
	return &ProvidersCollector{status: status,
		up: prometheus.NewDesc("herald_plugin_up",
			"1 when a plugin process of the provider runs (serving, breaker open or closed), 0 while it starts, restarts, is refused or stopped.", labels, nil),
		restarts: prometheus.NewDesc("herald_plugin_restarts_total",
			"Restarts of the provider's plugin after crashes (since the provider was configured).", labels, nil),
		breakers: prometheus.NewDesc("herald_plugin_breaker_open",
			"1 while the provider's circuit breaker is open or half-open (traffic goes to the next provider), 0 when closed.", labels, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *ProvidersCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.restarts
	ch <- c.breakers
}

// Collect implements prometheus.Collector.
func (c *ProvidersCollector) Collect(ch chan<- prometheus.Metric) {
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	for _, p := range c.status() {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, b(p.Up), p.Channel, p.Provider)
		ch <- prometheus.MustNewConstMetric(c.restarts, prometheus.CounterValue, float64(p.Restarts), p.Channel, p.Provider)
		ch <- prometheus.MustNewConstMetric(c.breakers, prometheus.GaugeValue, b(p.BreakerOpen), p.Channel, p.Provider)
	}
}

// BrokerConnected returns the herald_broker_connected gauge reading
// connected at scrape time.
func BrokerConnected(connected func() bool) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "herald_broker_connected",
		Help: "1 while the daemon holds a connection to a RabbitMQ node, 0 while it reconnects."}, func() float64 {
		if connected() {
			return 1
		}
		return 0
	})
}
