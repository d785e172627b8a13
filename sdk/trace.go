package sdk

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/heraldhq/herald/sdk/internal/tracemd"
)

// Tracing across the host/plugin boundary.
//
// The host sends the W3C trace context of its Send span (traceparent and
// tracestate) as gRPC metadata with every Send call; a plugin's Send gets
// a context that carries it as its remote parent, under the span the sdk
// starts for the call ("herald.plugin.send", through the process's global
// OpenTelemetry TracerProvider). A plugin that installs an OpenTelemetry
// SDK sees its own spans as children of the host's, in the producer's
// trace; one that does not still finds the trace and the host's span id in
// trace.SpanContextFromContext(ctx). The metadata is ignored by plugins
// built with older sdks, whatever their protocol version. This file is the
// plugin's half; the host's (withOutgoingTrace) is in package sdk/host.

// TracerName is the instrumentation scope of the spans the sdk starts.
const TracerName = "github.com/heraldhq/herald/sdk"

// withIncomingTrace returns ctx with the remote span context the host sent
// in the call's metadata (ctx unchanged when there is none or it is not
// valid W3C trace context).
func withIncomingTrace(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	return tracemd.TraceContext.Extract(ctx, tracemd.Carrier(md))
}

// startSendSpan starts the plugin-side span of a Send call, child of the
// host's span the call carries.
func startSendSpan(ctx context.Context, d Description, batch int) (context.Context, trace.Span) {
	ctx = withIncomingTrace(ctx)
	return otel.Tracer(TracerName, trace.WithInstrumentationVersion(Version)).Start(ctx, "herald.plugin.send",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("herald.channel", d.ChannelType), attribute.String("herald.provider", d.Provider),
			attribute.Int("herald.batch_size", batch)))
}

// endSendSpan ends span with the call's outcome: "error" for a batch
// error, otherwise the outcome all results share, or "mixed".
func endSendSpan(span trace.Span, results []Result, err error) {
	outcome := ""
	switch {
	case err != nil:
		outcome = "error"
		span.SetStatus(codes.Error, "send failed")
	default:
		for _, r := range results {
			o := r.Outcome.String()
			if outcome == "" {
				outcome = o
			} else if outcome != o {
				outcome = "mixed"
			}
		}
	}
	span.SetAttributes(attribute.String("herald.outcome", outcome))
	span.End()
}

// DeliveryContext returns the context to send d under, for a plugin that
// sends each delivery of a batch on its own (SendEach does this for you):
// ctx itself when d carries no trace context or is in ctx's trace already
// (a batch of one, or the batch's first delivery: ctx's span is the
// Send's), otherwise ctx with d's own trace context as the remote parent,
// the host's span for d.
func DeliveryContext(ctx context.Context, d Delivery) context.Context {
	if d.TraceParent == "" {
		return ctx
	}
	dctx := tracemd.TraceContext.Extract(context.Background(), propagation.MapCarrier{"traceparent": d.TraceParent, "tracestate": d.TraceState})
	sc := trace.SpanContextFromContext(dctx)
	if !sc.IsValid() || sc.TraceID() == trace.SpanContextFromContext(ctx).TraceID() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}
