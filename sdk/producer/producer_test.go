package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/heraldhq/herald/sdk/producer"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"
)

// noDB fails the test if Enqueue touches the database.
type noDB struct{ t *testing.T }

func (d noDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	d.t.Fatalf("the database was queried: %s", sql)
	return nil
}

func TestValidateRefusesHostileStrings(t *testing.T) {
	t.Parallel()
	valid := producer.Event{TenantID: "t1", ProjectID: "default", EventID: "evt-1", Type: "ORDER_PLACED",
		AggregateType: "order", AggregateID: "o-1", Payload: json.RawMessage(`{"a":{"b":[1,"x"]}}`)}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	deep := strings.Repeat(`{"a":`, producer.MaxPayloadDepth) + "1" + strings.Repeat("}", producer.MaxPayloadDepth)
	tests := map[string]struct {
		edit  func(e *producer.Event)
		field string // "" when the event is valid
	}{
		"valid":                       {edit: func(e *producer.Event) {}},
		"empty payload":               {edit: func(e *producer.Event) { e.Payload = nil }},
		"unicode type":                {edit: func(e *producer.Event) { e.Type = "Bestellung_eingegangen_ü" }},
		"payload at depth limit":      {edit: func(e *producer.Event) { e.Payload = json.RawMessage(deep) }},
		"event_id invalid utf-8":      {edit: func(e *producer.Event) { e.EventID = "evt-\xff" }, field: "event_id"},
		"event_id nul":                {edit: func(e *producer.Event) { e.EventID = "evt\x00" }, field: "event_id"},
		"event_id space":              {edit: func(e *producer.Event) { e.EventID = "evt 1" }, field: "event_id"},
		"event_id non-ascii":          {edit: func(e *producer.Event) { e.EventID = "évt" }, field: "event_id"},
		"event_id replacement char":   {edit: func(e *producer.Event) { e.EventID = "evt-\ufffd" }, field: "event_id"},
		"event_id too long":           {edit: func(e *producer.Event) { e.EventID = strings.Repeat("e", producer.MaxIDLength+1) }, field: "event_id"},
		"event_id missing":            {edit: func(e *producer.Event) { e.EventID = "" }, field: "event_id"},
		"type invalid utf-8":          {edit: func(e *producer.Event) { e.Type = "T\xc3" }, field: "type"},
		"type nul":                    {edit: func(e *producer.Event) { e.Type = "T\x00" }, field: "type"},
		"type control":                {edit: func(e *producer.Event) { e.Type = "T\u0085" }, field: "type"},
		"type too long":               {edit: func(e *producer.Event) { e.Type = strings.Repeat("T", producer.MaxIDLength+1) }, field: "type"},
		"aggregate_id nul":            {edit: func(e *producer.Event) { e.AggregateID = "a\x00" }, field: "aggregate_id"},
		"aggregate_type invalid":      {edit: func(e *producer.Event) { e.AggregateType = "\xfe" }, field: "aggregate_type"},
		"project_id invalid utf-8":    {edit: func(e *producer.Event) { e.ProjectID = "p\xff" }, field: "project_id"},
		"project_id nul":              {edit: func(e *producer.Event) { e.ProjectID = "p\x00" }, field: "project_id"},
		"tenant_id nul":               {edit: func(e *producer.Event) { e.TenantID = "t\x00" }, field: "tenant_id"},
		"payload nul escape":          {edit: func(e *producer.Event) { e.Payload = json.RawMessage(`{"a":"\u0000"}`) }, field: "payload"},
		"payload nul escape in key":   {edit: func(e *producer.Event) { e.Payload = json.RawMessage(`{"\u0000":1}`) }, field: "payload"},
		"payload invalid utf-8":       {edit: func(e *producer.Event) { e.Payload = json.RawMessage("{\"a\":\"\xff\"}") }, field: "payload"},
		"payload lone surrogate":      {edit: func(e *producer.Event) { e.Payload = json.RawMessage(`{"a":"\ud800"}`) }, field: "payload"},
		"payload too deep":            {edit: func(e *producer.Event) { e.Payload = json.RawMessage(`{"a":` + deep + `}`) }, field: "payload"},
		"payload too large":           {edit: func(e *producer.Event) { e.Payload = bigPayload(producer.MaxPayloadBytes + 1) }, field: "payload"},
		"payload number out of range": {edit: func(e *producer.Event) { e.Payload = json.RawMessage(`{"a":1e400}`) }, field: "payload"},
		"payload not an object":       {edit: func(e *producer.Event) { e.Payload = json.RawMessage(`[1]`) }, field: "payload"},
		"payload null":                {edit: func(e *producer.Event) { e.Payload = json.RawMessage(`null`) }, field: "payload"},
		"traceparent":                 {edit: func(e *producer.Event) { e.TraceParent, e.TraceState = tp, "a=1,b@v=2" }},
		"traceparent future version":  {edit: func(e *producer.Event) { e.TraceParent = "01" + tp[2:] + "-extra" }},
		"traceparent upper case":      {edit: func(e *producer.Event) { e.TraceParent = strings.ToUpper(tp) }, field: "traceparent"},
		"traceparent zero trace id":   {edit: func(e *producer.Event) { e.TraceParent = "00-" + strings.Repeat("0", 32) + tp[35:] }, field: "traceparent"},
		"traceparent zero span id":    {edit: func(e *producer.Event) { e.TraceParent = tp[:36] + strings.Repeat("0", 16) + "-01" }, field: "traceparent"},
		"traceparent version ff":      {edit: func(e *producer.Event) { e.TraceParent = "ff" + tp[2:] }, field: "traceparent"},
		"traceparent 00 with extra":   {edit: func(e *producer.Event) { e.TraceParent = tp + "-x" }, field: "traceparent"},
		"traceparent short":           {edit: func(e *producer.Event) { e.TraceParent = tp[:54] }, field: "traceparent"},
		"traceparent invalid utf-8":   {edit: func(e *producer.Event) { e.TraceParent = tp[:54] + "\xff" }, field: "traceparent"},
		"traceparent huge":            {edit: func(e *producer.Event) { e.TraceParent = "01" + tp[2:] + "-" + strings.Repeat("a", 1<<20) }, field: "traceparent"},
		"tracestate without parent":   {edit: func(e *producer.Event) { e.TraceState = "a=1" }, field: "tracestate"},
		"tracestate malformed":        {edit: func(e *producer.Event) { e.TraceParent, e.TraceState = tp, "a=1,,=" }, field: "tracestate"},
		"tracestate too long":         {edit: func(e *producer.Event) { e.TraceParent, e.TraceState = tp, "a="+strings.Repeat("b", 600) }, field: "tracestate"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ev := valid
			tc.edit(&ev)
			err := ev.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var fe *producer.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("Validate() = %v, want a *FieldError on %s", err, tc.field)
			}
			// Enqueue refuses the same event before it reaches the database.
			err = producer.Enqueue(context.Background(), noDB{t}, ev)
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("Enqueue() = %v, want a *FieldError on %s", err, tc.field)
			}
		})
	}
}

// bigPayload is a JSON object of exactly n bytes.
func bigPayload(n int) json.RawMessage {
	return json.RawMessage(`{"a":"` + strings.Repeat("x", n-8) + `"}`)
}

// TestTraceFromContext checks that an event without a
// TraceParent takes the span context of Enqueue's ctx, and that Client
// sends it as the traceparent header.
func TestTraceFromContext(t *testing.T) {
	t.Parallel()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, _ := trace.ParseTraceState("vendor=x")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true}))
	parent, state := producer.TraceFromContext(ctx)
	if parent != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" || state != "vendor=x" {
		t.Fatalf("TraceFromContext = %q, %q", parent, state)
	}
	if p, s := producer.TraceFromContext(context.Background()); p != "" || s != "" {
		t.Fatalf("TraceFromContext(no span) = %q, %q, want empty", p, s)
	}
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"event_id":"e1","deliveries":[]}`))
	}))
	defer srv.Close()
	c := &producer.Client{BaseURL: srv.URL, APIKey: "k"}
	ev := producer.Event{EventID: "e1", Type: "T", Payload: json.RawMessage(`{}`)}
	if _, _, err := c.Emit(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if got.Get("Traceparent") != parent || got.Get("Tracestate") != "vendor=x" {
		t.Errorf("Emit sent traceparent %q tracestate %q, want %q %q", got.Get("Traceparent"), got.Get("Tracestate"), parent, "vendor=x")
	}
	// The event's own wins over the context's; a bad one is refused
	// before anything is sent.
	ev.TraceParent = "00-11111111111111111111111111111111-2222222222222222-00"
	if _, _, err := c.Emit(ctx, ev); err != nil || got.Get("Traceparent") != ev.TraceParent || got.Get("Tracestate") != "" {
		t.Errorf("Emit with its own traceparent: err %v, sent %q %q", err, got.Get("Traceparent"), got.Get("Tracestate"))
	}
	got = nil
	ev.TraceParent = "garbage"
	var fe *producer.FieldError
	if _, _, err := c.Emit(ctx, ev); !errors.As(err, &fe) || fe.Field != "traceparent" || got != nil {
		t.Errorf("Emit with a bad traceparent = %v (request sent: %t), want a *FieldError on traceparent and no request", err, got != nil)
	}
}
