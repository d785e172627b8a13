package host

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// The host's half of tracing across the host/plugin boundary (the plugin's
// half, and the whole story, is in package sdk's trace.go): every Send
// call carries the W3C trace context of the caller's span, traceparent and
// tracestate, as gRPC metadata.

// traceContext is the W3C Trace Context propagator: traceparent and
// tracestate only, whatever global propagator the process set.
var traceContext = propagation.TraceContext{}

// mdCarrier adapts gRPC metadata to a propagation.TextMapCarrier.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// withOutgoingTrace adds the span context of ctx, if any, to the gRPC
// metadata of the calls made with the returned context.
func withOutgoingTrace(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	md, ok := metadata.FromOutgoingContext(ctx)
	if ok {
		md = md.Copy()
	} else {
		md = metadata.MD{}
	}
	traceContext.Inject(ctx, mdCarrier(md))
	return metadata.NewOutgoingContext(ctx, md)
}
