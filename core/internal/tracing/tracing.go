// Package tracing is Herald's OpenTelemetry tracing: the daemon's tracer,
// the W3C trace context an event and its deliveries carry from the
// producer to the plugin, and the exporter setup from the standard OTEL_*
// environment variables.
//
// Tracing is off unless the config says tracing.exporter = "otlp" or the
// environment says OTEL_TRACES_EXPORTER=otlp (the environment wins, and
// OTEL_SDK_DISABLED=true turns it off whatever else is set). Off, the
// process keeps OpenTelemetry's no-op TracerProvider: no span is recorded
// or exported, and a trace context that came with an event still travels
// unchanged with its deliveries to the plugin.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/sdk/producer"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the daemon's spans.
const ScopeName = "github.com/heraldhq/herald"

// Span attribute keys. Every value is of low cardinality: no user ids,
// event ids or payloads go on a span.
const (
	// Tenant is the tenant id.
	Tenant = attribute.Key("herald.tenant")
	// Channel is the delivery channel, e.g. "EMAIL".
	Channel = attribute.Key("herald.channel")
	// Provider is the provider (plugin) name that served a Send.
	Provider = attribute.Key("herald.provider")
	// Outcome is what became of the work: sent, retry, failed, deferred,
	// processed, published, nacked, error...
	Outcome = attribute.Key("herald.outcome")
	// EventType is the event's type (a rule name, bounded by the rules).
	EventType = attribute.Key("herald.event_type")
	// Stage is the pipeline stage that published (handoff or publisher).
	Stage = attribute.Key("herald.stage")
	// BatchSize is the number of deliveries in a Send.
	BatchSize = attribute.Key("herald.batch_size")
)

// tracer is taken once: the global provider's tracers delegate to the
// provider SetTracerProvider installs first, later too.
var tracer = otel.Tracer(ScopeName)

// Tracer is the daemon's tracer, through the global TracerProvider (a
// no-op one unless Init turned tracing on, or a test installed its own).
func Tracer() trace.Tracer { return tracer }

// w3c is the W3C Trace Context propagator.
var w3c = propagation.TraceContext{}

// Remote returns ctx with the remote span context of a stored W3C
// traceparent and tracestate; ctx itself when parent is empty or not
// valid.
func Remote(ctx context.Context, parent, state string) context.Context {
	if parent == "" {
		return ctx
	}
	return w3c.Extract(ctx, propagation.MapCarrier{"traceparent": parent, "tracestate": state})
}

// Header returns the W3C traceparent and tracestate of the span context
// in ctx, or two empty strings. A tracestate longer than
// producer.MaxTraceStateBytes is dropped (the W3C spec lets a vendor
// drop members): it is stored with the event and every delivery.
func Header(ctx context.Context) (parent, state string) {
	parent, state = producer.TraceFromContext(ctx)
	if len(state) > producer.MaxTraceStateBytes {
		state = ""
	}
	return parent, state
}

// Start starts a span named name as a child of the stored trace context
// (parent, state), or of ctx's span when parent is empty. It returns the
// span's context and the span; end it with End.
func Start(ctx context.Context, parent, state, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if parent != "" {
		ctx = Remote(ctx, parent, state)
	}
	return Tracer().Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// End ends span with its outcome, marking it failed when failed is set.
// The error's text stays in the log: it may name users or hold payload
// values, which a span must not carry.
func End(span trace.Span, outcome string, failed bool) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(Outcome.String(outcome))
	if failed {
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}

type linksKey struct{}

// WithLinks returns ctx carrying links for the next span started with
// StartLinked: the other deliveries of a batch whose Send span has the
// first one's as parent.
func WithLinks(ctx context.Context, links []trace.Link) context.Context {
	if len(links) == 0 {
		return ctx
	}
	return context.WithValue(ctx, linksKey{}, links)
}

// StartLinked starts a span named name, child of ctx's span, with the
// links WithLinks put in ctx.
func StartLinked(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	links, _ := ctx.Value(linksKey{}).([]trace.Link)
	return Tracer().Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...), trace.WithLinks(links...))
}

// HTTP wraps next with a server span named route whose parent is the
// request's traceparent/tracestate headers. A header that is not valid
// W3C trace context is ignored, as the W3C spec has a receiver do: the
// request starts a new trace.
func HTTP(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := w3c.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := Tracer().Start(ctx, route, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", route)))
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			if span.IsRecording() {
				span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
				if sw.status >= 500 {
					span.SetStatus(codes.Error, http.StatusText(sw.status))
				}
			}
			span.End()
		}()
		next.ServeHTTP(sw, r.WithContext(ctx))
	})
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Exporters a config or OTEL_TRACES_EXPORTER may name.
const (
	// ExporterNone keeps tracing off.
	ExporterNone = "none"
	// ExporterOTLP exports spans over OTLP, configured by the
	// OTEL_EXPORTER_OTLP_* variables.
	ExporterOTLP = "otlp"
)

// Settings is what Resolve decided.
type Settings struct {
	// Exporter is ExporterNone or ExporterOTLP.
	Exporter string
	// Protocol is the OTLP protocol: "http/protobuf" or "grpc".
	Protocol string
	// Source names where the exporter choice came from, for the log.
	Source string
}

// Enabled reports whether spans are recorded and exported.
func (s Settings) Enabled() bool { return s.Exporter == ExporterOTLP }

// Resolve decides the tracing settings from the config's exporter
// (tracing.exporter: "", "none" or "otlp") and the environment read
// through getenv: OTEL_SDK_DISABLED=true turns tracing off; otherwise
// OTEL_TRACES_EXPORTER, when set, overrides the config;
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL choose
// the protocol (http/protobuf by default, or grpc). Errors name the
// setting at fault.
func Resolve(configExporter string, getenv func(string) string) (Settings, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return Settings{Exporter: ExporterNone, Source: "OTEL_SDK_DISABLED"}, nil
	}
	s := Settings{Exporter: strings.TrimSpace(configExporter), Source: "tracing.exporter"}
	if env := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); env != "" {
		s.Exporter, s.Source = env, "OTEL_TRACES_EXPORTER"
	}
	// The spec allows a comma-separated list; Herald takes one exporter.
	switch strings.ToLower(s.Exporter) {
	case "", ExporterNone:
		s.Exporter = ExporterNone
		return s, nil
	case ExporterOTLP:
		s.Exporter = ExporterOTLP
	default:
		return Settings{}, fmt.Errorf("%s: unsupported traces exporter %q (want %q or %q)", s.Source, s.Exporter, ExporterOTLP, ExporterNone)
	}
	s.Protocol = "http/protobuf"
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			continue
		}
		if v != "http/protobuf" && v != "grpc" {
			return Settings{}, fmt.Errorf("%s: unsupported OTLP protocol %q (want \"http/protobuf\" or \"grpc\")", name, v)
		}
		s.Protocol = v
		break
	}
	return s, nil
}

// Init turns tracing on when Resolve says so: it installs a global
// TracerProvider that batches spans to the OTLP exporter (endpoint,
// headers, timeout and TLS from the OTEL_EXPORTER_OTLP_* variables;
// sampler from OTEL_TRACES_SAMPLER, parent-based always-on by default;
// resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, service
// name "herald" by default) and the W3C propagators. It returns the
// function that flushes and stops the provider (a no-op when tracing is
// off).
func Init(ctx context.Context, configExporter, version string, log hclog.Logger) (func(context.Context) error, error) {
	s, err := Resolve(configExporter, os.Getenv)
	if err != nil {
		return nil, err
	}
	noop := func(context.Context) error { return nil }
	if !s.Enabled() {
		return noop, nil
	}
	var exp sdktrace.SpanExporter
	if s.Protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: otlp exporter: %w", s.Source, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "herald"), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		// A malformed OTEL_RESOURCE_ATTRIBUTES entry is dropped with
		// this error; the rest of the resource is still good.
		log.Warn("tracing: part of the resource from the environment was not understood", "error", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: exporting spans failed", "error", err)
	}))
	log.Info("tracing on: spans go to the OTLP exporter", "protocol", s.Protocol, "source", s.Source)
	return tp.Shutdown, nil
}
