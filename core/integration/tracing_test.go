package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk/producer"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// traceparent returns a new sampled W3C traceparent and its trace and
// span ids.
func traceparent(t *testing.T) (header, traceID, spanID string) {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	traceID, spanID = hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])
	return "00-" + traceID + "-" + spanID + "-01", traceID, spanID
}

// spanIDOf is the parent span id of a traceparent (zero if malformed).
func spanIDOf(t *testing.T, traceparent string) trace.SpanID {
	t.Helper()
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 {
		return trace.SpanID{}
	}
	id, _ := trace.SpanIDFromHex(parts[2])
	return id
}

// sinkTrace is what the sink plugin saw of one delivery's trace.
type sinkTrace struct {
	DeliveryID   string `json:"delivery_id"`
	EventID      string `json:"event_id"`
	TraceID      string `json:"trace_id"`
	ParentSpanID string `json:"parent_span_id"`
	// DeliveryTraceParent is sdk.Delivery.TraceParent as the plugin got it.
	DeliveryTraceParent string `json:"delivery_traceparent"`
}

// sinkTraces reads the sink's records of event eventID.
func (e *env) sinkTraces(eventID string) []sinkTrace {
	e.t.Helper()
	data, err := os.ReadFile(e.record)
	if err != nil && !os.IsNotExist(err) {
		e.t.Fatal(err)
	}
	var out []sinkTrace
	for _, line := range completeLines(data) {
		var rec sinkTrace
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			e.t.Fatalf("sink record %q: %v", line, err)
		}
		if rec.EventID == eventID {
			out = append(out, rec)
		}
	}
	return out
}

// runInProcess runs `herald serve` with e's config inside the test
// process (so that its spans reach the test's TracerProvider) until the
// test ends, and waits until its API is ready.
func (e *env) runInProcess() {
	t := e.t
	t.Helper()
	d, err := config.LoadDaemon(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var logBuf bytes.Buffer
	var logMu sync.Mutex
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: lockedWriter{&logMu, &logBuf}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, d, log, nil) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("server.Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("server.Run did not return within 30s of its context ending")
		}
		if t.Failed() {
			logMu.Lock()
			t.Logf("herald log:\n%s", tail(logBuf.String(), 200))
			logMu.Unlock()
		}
	})
	testenv.Eventually(t, 60*time.Second, func() bool {
		select {
		case err := <-done:
			t.Fatalf("server.Run returned during start: %v", err)
		default:
		}
		resp, err := http.Get(e.apiURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "in-process herald ready at %s", e.apiURL)
}

// emitTraced posts a reservation eventID with a new traceparent and a
// tracestate and checks that the sink plugin's Send context held the
// request's trace with the host's Send span as parent, whose ancestors,
// recorded in rec, are the listener's, the publish's (by stage), the
// relay's and the HTTP accept spans, the last one child of the request's
// traceparent.
func emitTraced(t *testing.T, e *env, rec *tracetest.SpanRecorder, eventID, stage string) {
	t.Helper()
	header, traceID, requestSpan := traceparent(t)
	ev := reservation(eventID)
	ev.TraceParent, ev.TraceState = header, "vendor=opaque"
	if _, created, err := e.client().Emit(context.Background(), ev); err != nil || !created {
		t.Fatalf("emit: created=%t err=%v", created, err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return len(e.sinkTraces(eventID)) == deliveriesPerEvent },
		"%d deliveries of %s at the sink (now %d; %s)", deliveriesPerEvent, eventID, len(e.sinkTraces(eventID)), e.statusSummary())

	// The spans of a delivery end once its outcome is known, just after
	// the plugin answered: wait for every one of them.
	byID := func() map[trace.SpanID]sdktrace.ReadOnlySpan {
		m := map[trace.SpanID]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID().String() == traceID {
				m[s.SpanContext().SpanID()] = s
			}
		}
		return m
	}
	count := func(name string) int {
		n := 0
		for _, s := range byID() {
			if s.Name() == name {
				n++
			}
		}
		return n
	}
	testenv.Eventually(t, 15*time.Second, func() bool { return count("herald.deliver") == deliveriesPerEvent },
		"%d herald.deliver spans (now %d)", deliveriesPerEvent, count("herald.deliver"))

	spans := byID()
	wantChain := []string{"herald.plugin.send", "herald.deliver", "herald.publish", "herald.relay.event", "POST /v1/events"}
	for _, st := range e.sinkTraces(eventID) {
		if st.TraceID != traceID {
			t.Fatalf("the plugin's Send context of delivery %s held trace %q, want the request's %s", st.DeliveryID, st.TraceID, traceID)
		}
		id, err := trace.SpanIDFromHex(st.ParentSpanID)
		if err != nil {
			t.Fatalf("delivery %s: parent span id %q: %v", st.DeliveryID, st.ParentSpanID, err)
		}
		// Walk up from the span the plugin saw as its parent: the host's
		// Send span, then the core's stages, to the request's own span.
		var names []string
		for {
			s, ok := spans[id]
			if !ok {
				break
			}
			names = append(names, s.Name())
			if s.Name() == "POST /v1/events" {
				if got := s.Parent().SpanID().String(); got != requestSpan || !s.Parent().IsRemote() {
					t.Errorf("the accept span's parent is %s (remote %t), want the request's span %s", got, s.Parent().IsRemote(), requestSpan)
				}
				if ts := s.SpanContext().TraceState().Get("vendor"); ts != "opaque" {
					t.Errorf("the accept span's tracestate vendor = %q, want the request's \"opaque\"", ts)
				}
			}
			id = s.Parent().SpanID()
		}
		if strings.Join(names, " < ") != strings.Join(wantChain, " < ") {
			t.Fatalf("delivery %s: the spans from the plugin's parent up are %q, want %q", st.DeliveryID, names, wantChain)
		}
		// The delivery itself carries its own listener span's context
		// (a batch may mix traces; sdk.DeliveryContext uses it).
		own, ok := spans[spanIDOf(t, st.DeliveryTraceParent)]
		if !ok || own.Name() != "herald.deliver" || !strings.Contains(st.DeliveryTraceParent, traceID) {
			t.Fatalf("delivery %s: its traceparent %q is not a herald.deliver span of the trace", st.DeliveryID, st.DeliveryTraceParent)
		}
	}
	// Attributes: low cardinality only, and the outcome of each stage.
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "herald.tenant":
				if kv.Value.AsString() != e.tenant {
					t.Errorf("span %s: herald.tenant = %q, want %q", s.Name(), kv.Value.AsString(), e.tenant)
				}
			case "herald.stage":
				if kv.Value.AsString() != stage {
					t.Errorf("span %s: herald.stage = %q, want %q", s.Name(), kv.Value.AsString(), stage)
				}
			case "herald.outcome":
				want := map[string]string{"POST /v1/events": "accepted", "herald.relay.event": "processed", "herald.publish": "published",
					"herald.deliver": "sent", "herald.plugin.send": "sent"}[s.Name()]
				if kv.Value.AsString() != want {
					t.Errorf("span %s: herald.outcome = %q, want %q", s.Name(), kv.Value.AsString(), want)
				}
			}
			if v := kv.Value.String(); strings.Contains(v, "staff") || strings.Contains(v, "Rossi") || strings.Contains(v, eventID) {
				t.Errorf("span %s: attribute %s = %q names a user, an event id or a payload value", s.Name(), kv.Key, v)
			}
		}
	}
}

// TestTraceFromRequestToPluginSend shows one trace from POST /v1/events to
// the plugin's Send: the daemon runs in this process with an in-memory
// span recorder, the sink plugin (a separate process) records the trace
// and parent span its Send context held, and those must be the request's
// trace and the host's Send span, whose ancestors are the listener's,
// the publish's, the relay's and the HTTP accept spans, the last one
// child of the request's traceparent. A producer's own traceparent given
// to sdk/producer.Enqueue travels the same way.
func TestTraceFromRequestToPluginSend(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "none") // the recorder below, not an exporter
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	// The global provider delegates to tp from now on, for the rest of
	// the process (an OpenTelemetry rule); nothing else here traces.
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	// Without the relay's handoff the publisher claims the rows and
	// publishes version-1 messages, whose deliveries the listener reads
	// from the database: the trace must survive that path too.
	t.Run("publisher", func(t *testing.T) {
		t.Setenv("HERALD_PUBLISHER_HANDOFF", "false")
		e := newEnv(t, "sent")
		e.runInProcess()
		emitTraced(t, e, rec, "traced-pub", "publisher")
	})

	e := newEnv(t, "sent")
	e.runInProcess()
	emitTraced(t, e, rec, "traced-1", "handoff")

	// A producer writing straight into the outbox passes its trace through
	// sdk/producer: the plugin sees that trace too.
	header2, traceID2, _ := traceparent(t)
	ev2 := reservation("traced-2")
	ev2.TenantID, ev2.TraceParent = e.tenant, header2
	err := pgx.BeginFunc(context.Background(), e.db.Pool, func(tx pgx.Tx) error {
		return producer.Enqueue(context.Background(), tx, ev2)
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return len(e.sinkTraces("traced-2")) == deliveriesPerEvent },
		"%d deliveries of traced-2 at the sink", deliveriesPerEvent)
	for _, st := range e.sinkTraces("traced-2") {
		if st.TraceID != traceID2 {
			t.Fatalf("the plugin's Send context of delivery %s held trace %q, want the producer's %s", st.DeliveryID, st.TraceID, traceID2)
		}
	}

	// A traceparent that is not W3C trace context is ignored, as the spec
	// has a receiver do: the request is accepted and starts a trace of
	// its own.
	for i, bad := range []string{"00-" + strings.Repeat("0", 32) + "-" + strings.Repeat("1", 16) + "-01", "zz", "00-\xff\xfe", strings.Repeat("a", 4000)} {
		id := fmt.Sprintf("badtrace-%d", i)
		body, _ := json.Marshal(map[string]any{"event_id": id, "type": "RESERVATION_REQUESTED",
			"payload": map[string]any{"restaurant_id": 5, "customer_name": "Rossi", "pax": 4}})
		req, _ := http.NewRequest(http.MethodPost, e.apiURL+"/v1/events", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.apiKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Traceparent", bad)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("traceparent %.40q: %d %s, want 201", bad, resp.StatusCode, out)
		}
		var stored string
		if err := e.db.Pool.QueryRow(context.Background(), `SELECT COALESCE(traceparent, '') FROM event_outbox WHERE event_id = $1`, id).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if stored == "" || strings.Contains(stored, strings.Repeat("0", 32)) || !producer.ValidTraceParent(stored) {
			t.Errorf("traceparent %.40q: the event keeps %q, want a new valid trace's", bad, stored)
		}
	}
}

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes every
// ExportTraceServiceRequest posted to /v1/traces.
type otlpReceiver struct {
	mu   sync.Mutex
	reqs []*collectortrace.ExportTraceServiceRequest
	bad  []string
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		r.bad = append(r.bad, fmt.Sprintf("%s %s %s %v", req.Method, req.URL.Path, req.Header.Get("Content-Type"), err))
		http.Error(w, "unexpected request", http.StatusBadRequest)
		return
	}
	var m collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &m); err != nil {
		r.bad = append(r.bad, "decode: "+err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.reqs = append(r.reqs, &m)
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// spans returns the names of the spans received in trace traceID, and the
// service.name each came with.
func (r *otlpReceiver) spans(traceID string) (names map[string]int, services map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	names, services = map[string]int{}, map[string]bool{}
	for _, m := range r.reqs {
		for _, rs := range m.GetResourceSpans() {
			svc := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					svc = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					if hex.EncodeToString(s.GetTraceId()) == traceID {
						names[s.GetName()]++
						services[svc] = true
					}
				}
			}
		}
	}
	return names, services
}

// TestOTLPExportFromHeraldServe turns tracing on in a real `herald serve`
// through the standard OTEL_* variables only and checks that its spans
// reach an OTLP/HTTP receiver, decoded as the protocol's protobuf, in the
// request's trace and under the configured service name.
func TestOTLPExportFromHeraldServe(t *testing.T) {
	recv := &otlpReceiver{}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)

	e := newEnv(t, "sent")
	e.daemonEnv = append(e.daemonEnv, "OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT="+srv.URL,
		"OTEL_SERVICE_NAME=herald-otlp-test", "OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SDK_DISABLED=false")
	d := e.start()

	header, traceID, _ := traceparent(t)
	ev := reservation("otlp-1")
	ev.TraceParent = header
	if _, created, err := e.client().Emit(context.Background(), ev); err != nil || !created {
		t.Fatalf("emit: created=%t err=%v", created, err)
	}
	e.waitAllSent(deliveriesPerEvent, 30*time.Second)
	want := map[string]int{"POST /v1/events": 1, "herald.relay.event": 1, "herald.publish": deliveriesPerEvent,
		"herald.deliver": deliveriesPerEvent}
	testenv.Eventually(t, 30*time.Second, func() bool {
		names, _ := recv.spans(traceID)
		for n, c := range want {
			if names[n] != c {
				return false
			}
		}
		return names["herald.plugin.send"] >= 1
	}, "the receiver got the trace's spans %v (want %v and herald.plugin.send); daemon log:\n%s",
		func() map[string]int { n, _ := recv.spans(traceID); return n }(), want, tail(d.Log(), 40))
	if _, services := recv.spans(traceID); len(services) != 1 || !services["herald-otlp-test"] {
		t.Errorf("service.name of the exported spans = %v, want only herald-otlp-test (OTEL_SERVICE_NAME)", services)
	}
	for _, st := range e.sinkTraces("otlp-1") {
		if st.TraceID != traceID {
			t.Errorf("the plugin's Send context of delivery %s held trace %q, want %s", st.DeliveryID, st.TraceID, traceID)
		}
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.bad) > 0 {
		t.Errorf("the receiver got requests that are not OTLP/HTTP protobuf: %q", recv.bad)
	}
}
