package sdk

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// hostSpan is a sampled remote span context as the host's Send span
// would have. (The trace's trip across the transport is tested with the
// host side, in package sdk/host.)
func hostSpan(t *testing.T) trace.SpanContext {
	t.Helper()
	tid, err := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	if err != nil {
		t.Fatal(err)
	}
	sid, err := trace.SpanIDFromHex("00f067aa0ba902b7")
	if err != nil {
		t.Fatal(err)
	}
	ts, err := trace.ParseTraceState("herald=1")
	if err != nil {
		t.Fatal(err)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
}

// TestDeliveryContext checks which trace a delivery of a batch is sent
// under: its own, unless it is in the Send's trace already.
func TestDeliveryContext(t *testing.T) {
	t.Parallel()
	host := hostSpan(t)
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), host)
	const other = "00-11111111111111111111111111111111-2222222222222222-01"
	tests := map[string]struct {
		d        Delivery
		wantSpan string
	}{
		"no trace":      {Delivery{}, host.SpanID().String()},
		"garbage":       {Delivery{TraceParent: "zz"}, host.SpanID().String()},
		"same trace":    {Delivery{TraceParent: "00-" + host.TraceID().String() + "-3333333333333333-01"}, host.SpanID().String()},
		"another trace": {Delivery{TraceParent: other, TraceState: "a=1"}, "2222222222222222"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := trace.SpanContextFromContext(DeliveryContext(ctx, tc.d)).SpanID().String(); got != tc.wantSpan {
				t.Errorf("DeliveryContext span = %s, want %s", got, tc.wantSpan)
			}
		})
	}
	// SendEach gives each call its delivery's context.
	var got []string
	send := SendEach(func(ctx context.Context, d Delivery) (string, error) {
		got = append(got, trace.SpanContextFromContext(ctx).TraceID().String())
		return "id", nil
	})
	if _, err := send(ctx, SendRequest{Deliveries: []Delivery{{DeliveryID: "1"}, {DeliveryID: "2", TraceParent: other}}}); err != nil {
		t.Fatal(err)
	}
	want := []string{host.TraceID().String(), "11111111111111111111111111111111"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("SendEach traces = %v, want %v", got, want)
	}
}
