package server

import (
	"context"
	"net/http"
	"time"

	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/metrics"
	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsPath is where the admin listener serves the Prometheus metrics.
const MetricsPath = "/metrics"

// BacklogInterval is how often at most a scrape of /metrics runs the
// backlog query; scrapes in between get the figures it cached.
const BacklogInterval = 5 * time.Second

// backlogTimeout bounds one backlog query.
const backlogTimeout = 2 * time.Second

// RegisterStateCollectors adds the collectors that read state at scrape
// time to reg: the backlog (a bounded query on worker, at most every
// BacklogInterval), the plugin host's providers (host may be nil) and the
// broker connection (conn may be nil).
func RegisterStateCollectors(reg prometheus.Registerer, worker *pgxpool.Pool, host *pluginhost.Host, conn *broker.Conn) {
	if worker != nil {
		reg.MustRegister(metrics.NewBacklogCollector(func(ctx context.Context) (metrics.Backlog, error) {
			b, err := store.ReadBacklog(ctx, worker)
			return metrics.Backlog{EventsPending: b.EventsPending, OldestEventAge: b.OldestEventAge,
				Pending: b.Pending, Retry: b.Retry, Deferred: b.Deferred, OldestPendingAge: b.OldestPendingAge,
				DigestWindows: b.DigestWindows, OldestDueDigestAge: b.OldestDueDigestAge}, err
		}, BacklogInterval, backlogTimeout))
	}
	if host != nil {
		reg.MustRegister(metrics.NewProvidersCollector(func() []metrics.Provider {
			st := host.Status()
			out := make([]metrics.Provider, len(st))
			for i, s := range st {
				out[i] = metrics.Provider{Channel: s.Channel, Provider: s.Provider, Restarts: s.Restarts,
					Up:          s.State == pluginhost.StateServing || s.State == pluginhost.StateCircuitOpen,
					BreakerOpen: s.State == pluginhost.StateCircuitOpen}
			}
			return out
		}))
	}
	if conn != nil {
		reg.MustRegister(metrics.BrokerConnected(conn.Connected))
	}
}

// MetricsHandler serves reg's metrics in the Prometheus text format (or
// what the scraper negotiates).
func MetricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
