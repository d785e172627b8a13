package host_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldhq/herald/sdk"
)

// traceChannel records the span context each Send call's ctx holds.
type traceChannel struct {
	fakeChannel
	got chan trace.SpanContext
}

func (c *traceChannel) Send(ctx context.Context, req sdk.SendRequest) (sdk.SendResponse, error) {
	c.got <- trace.SpanContextFromContext(ctx)
	return c.fakeChannel.Send(ctx, req)
}

// hostSpan is a sampled remote span context as the host's Send span
// would have.
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

// TestSendCarriesTheTraceContext checks that the host's span context
// reaches the plugin's Send ctx through the gRPC metadata, tracestate
// included, and that a Send without one gets none. It runs before
// TestPluginSendSpanIsAChildOfTheHosts installs a TracerProvider (which
// stays the global one's delegate), not in parallel.
func TestSendCarriesTheTraceContext(t *testing.T) {
	f := &traceChannel{got: make(chan trace.SpanContext, 1)}
	ch, _ := connect(t, f)
	batch := sdk.SendRequest{Deliveries: []sdk.Delivery{{DeliveryID: "d1", IdempotencyKey: "k1"}}}

	want := hostSpan(t)
	if _, err := ch.Send(trace.ContextWithSpanContext(context.Background(), want), batch); err != nil {
		t.Fatal(err)
	}
	got := <-f.got
	// No TracerProvider in this process: the sdk's span is a no-op one
	// that keeps the host's context, which the plugin sees as remote.
	if got.TraceID() != want.TraceID() || got.SpanID() != want.SpanID() || !got.IsSampled() || !got.IsRemote() ||
		got.TraceState().Get("herald") != "1" {
		t.Errorf("the plugin's Send ctx holds %v (remote %t, state %q), want the host's %v", got, got.IsRemote(), got.TraceState(), want)
	}

	if _, err := ch.Send(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if got := <-f.got; got.IsValid() {
		t.Errorf("a Send without a trace gave the plugin %v, want none", got)
	}
}

// TestPluginSendSpanIsAChildOfTheHosts checks, with a TracerProvider
// installed as a plugin that uses OpenTelemetry would, that the sdk's
// herald.plugin.send span is a child of the host's span and that the
// plugin's Send ctx holds that span.
func TestPluginSendSpanIsAChildOfTheHosts(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	f := &traceChannel{got: make(chan trace.SpanContext, 1)}
	ch, _ := connect(t, f)
	want := hostSpan(t)
	_, err := ch.Send(trace.ContextWithSpanContext(context.Background(), want),
		sdk.SendRequest{Deliveries: []sdk.Delivery{{DeliveryID: "d1", IdempotencyKey: "k1"}}})
	if err != nil {
		t.Fatal(err)
	}
	inSend := <-f.got
	var span sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == want.TraceID() {
			span = s
		}
	}
	if span == nil {
		t.Fatal("no herald.plugin.send span was recorded in the host's trace")
	}
	if span.Name() != "herald.plugin.send" || span.Parent().SpanID() != want.SpanID() || !span.Parent().IsRemote() ||
		span.SpanKind() != trace.SpanKindServer {
		t.Errorf("span %q kind %v parent %v (remote %t), want herald.plugin.send, server, parent %v remote",
			span.Name(), span.SpanKind(), span.Parent().SpanID(), span.Parent().IsRemote(), want.SpanID())
	}
	if inSend.SpanID() != span.SpanContext().SpanID() {
		t.Errorf("the plugin's Send ctx holds span %v, want the sdk's span %v", inSend.SpanID(), span.SpanContext().SpanID())
	}
	attrs := map[string]string{}
	for _, kv := range span.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	for k, v := range map[string]string{"herald.channel": "EMAIL", "herald.provider": "fake", "herald.batch_size": "1", "herald.outcome": "sent"} {
		if attrs[k] != v {
			t.Errorf("attribute %s = %q, want %q (all: %v)", k, attrs[k], v, attrs)
		}
	}
}

// panicChannel panics in Send.
type panicChannel struct{ fakeChannel }

func (*panicChannel) Send(context.Context, sdk.SendRequest) (sdk.SendResponse, error) { panic("boom") }

// TestPanickingSendEndsItsSpan checks that a plugin that panics in Send
// answers the host with a retryable batch error and still ends its span,
// marked failed. It runs after TestPluginSendSpanIsAChildOfTheHosts
// installed a TracerProvider.
func TestPanickingSendEndsItsSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	ch, _ := connect(t, &panicChannel{})
	want := hostSpan(t)
	_, err := ch.Send(trace.ContextWithSpanContext(context.Background(), want),
		sdk.SendRequest{Deliveries: []sdk.Delivery{{DeliveryID: "d1", IdempotencyKey: "k1"}}})
	if err == nil || !sdk.IsRetryable(err) {
		t.Fatalf("Send = %v, want a retryable batch error", err)
	}
	var found bool
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() != want.TraceID() {
			continue
		}
		found = true
		if s.Status().Code != codes.Error {
			t.Errorf("span %s status %v, want Error", s.Name(), s.Status())
		}
	}
	if !found {
		t.Error("the panicking Send's span was not ended")
	}
}
