package statusev

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts what the stage publishes and POSTs; a nil *Metrics
// counts nothing.
type Metrics struct {
	publishedTotal *prometheus.CounterVec
	webhookTotal   *prometheus.CounterVec
	backlogGauge   *prometheus.GaugeVec
	oldestGauge    *prometheus.GaugeVec
}

// NewMetrics registers the stage's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		publishedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_status_events_published_total",
			Help: "Status events (final delivery outcomes, inbox reads and actions) the broker confirmed on the status exchange, by tenant."},
			[]string{"tenant"}),
		webhookTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_webhook_deliveries_total",
			Help: "POSTs of status events to tenants' webhooks by outcome: delivered (2xx), retried (failed, due again after a backoff), failed (given up after status_events.webhook_max_attempts)."},
			[]string{"tenant", "outcome"}),
		backlogGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "herald_status_events_backlog",
			Help: "Status events still owed, by sink: broker (not yet confirmed) or webhook (owed to a tenant's webhook, due or waiting for a retry)."},
			[]string{"sink"}),
		oldestGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "herald_status_events_oldest_seconds",
			Help: "Age of the oldest status event still owed, by sink (0 when none is)."}, []string{"sink"}),
	}
	reg.MustRegister(m.publishedTotal, m.webhookTotal, m.backlogGauge, m.oldestGauge)
	return m
}

func (m *Metrics) published(tenant string) {
	if m != nil {
		m.publishedTotal.WithLabelValues(tenant).Inc()
	}
}

func (m *Metrics) webhook(tenant, outcome string) {
	if m != nil {
		m.webhookTotal.WithLabelValues(tenant, outcome).Inc()
	}
}

func (m *Metrics) backlog(b BacklogStats) {
	if m == nil {
		return
	}
	m.backlogGauge.WithLabelValues("broker").Set(float64(b.Unpublished))
	m.backlogGauge.WithLabelValues("webhook").Set(float64(b.WebhookDue))
	m.oldestGauge.WithLabelValues("broker").Set(b.OldestUnpublished.Seconds())
	m.oldestGauge.WithLabelValues("webhook").Set(b.OldestWebhookDue.Seconds())
}
