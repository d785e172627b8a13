package host

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/heraldhq/herald/sdk/internal/tracemd"
)

// The host's half of tracing across the host/plugin boundary (the plugin's
// half, and the whole story, is in package sdk's trace.go): every Send
// call carries the W3C trace context of the caller's span, traceparent and
// tracestate, as gRPC metadata.

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
	tracemd.TraceContext.Inject(ctx, tracemd.Carrier(md))
	return metadata.NewOutgoingContext(ctx, md)
}
