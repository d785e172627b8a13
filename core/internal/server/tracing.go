package server

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/tracing"
)

// Version is the daemon's version as spans report it (service.version);
// the CLI sets it.
var Version = "dev"

// initTracing turns OpenTelemetry tracing on when tracing.exporter or
// OTEL_TRACES_EXPORTER says otlp (see package tracing) and returns the
// function that flushes the spans still buffered, within a few seconds,
// at shutdown.
func initTracing(ctx context.Context, d config.Daemon, log hclog.Logger) (func(), error) {
	shutdown, err := tracing.Init(ctx, d.Tracing.Exporter, Version, log.Named("tracing"))
	if err != nil {
		return nil, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn("tracing: flushing the last spans failed", "error", err)
		}
	}, nil
}
