// Package tracemd carries W3C Trace Context in gRPC metadata: the host
// injects the span context of a call (sdk/host), the plugin extracts it
// (sdk). Both sides share this one carrier and propagator.
package tracemd

import (
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/metadata"
)

// TraceContext is the W3C Trace Context propagator: traceparent and
// tracestate only, whatever global propagator the process set.
var TraceContext = propagation.TraceContext{}

// Carrier adapts gRPC metadata to a propagation.TextMapCarrier.
type Carrier metadata.MD

// Get returns the first value of key, or "".
func (c Carrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key to value (metadata keys are lower-cased).
func (c Carrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

// Keys lists the metadata's keys.
func (c Carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
