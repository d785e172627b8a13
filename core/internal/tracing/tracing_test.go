package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/trace"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		config  string
		env     map[string]string
		want    Settings
		wantErr []string // substrings of the error
	}{
		"off by default":            {want: Settings{Exporter: ExporterNone, Source: "tracing.exporter"}},
		"config none":               {config: "none", want: Settings{Exporter: ExporterNone, Source: "tracing.exporter"}},
		"config otlp":               {config: "otlp", want: Settings{Exporter: ExporterOTLP, Protocol: "http/protobuf", Source: "tracing.exporter"}},
		"env turns it on":           {env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: Settings{Exporter: ExporterOTLP, Protocol: "http/protobuf", Source: "OTEL_TRACES_EXPORTER"}},
		"env wins over config":      {config: "otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}, want: Settings{Exporter: ExporterNone, Source: "OTEL_TRACES_EXPORTER"}},
		"sdk disabled wins":         {config: "otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "TRUE"}, want: Settings{Exporter: ExporterNone, Source: "OTEL_SDK_DISABLED"}},
		"sdk disabled false":        {env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "false"}, want: Settings{Exporter: ExporterOTLP, Protocol: "http/protobuf", Source: "OTEL_TRACES_EXPORTER"}},
		"grpc":                      {config: "otlp", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: Settings{Exporter: ExporterOTLP, Protocol: "grpc", Source: "tracing.exporter"}},
		"traces protocol wins":      {config: "otlp", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, want: Settings{Exporter: ExporterOTLP, Protocol: "http/protobuf", Source: "tracing.exporter"}},
		"unknown exporter in env":   {env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: []string{"OTEL_TRACES_EXPORTER", `"zipkin"`}},
		"unknown exporter config":   {config: "jaeger", wantErr: []string{"tracing.exporter", `"jaeger"`}},
		"list of exporters":         {env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp,console"}, wantErr: []string{"OTEL_TRACES_EXPORTER"}},
		"http/json not supported":   {config: "otlp", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, wantErr: []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}},
		"protocol ignored when off": {env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "bogus"}, want: Settings{Exporter: ExporterNone, Source: "tracing.exporter"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := Resolve(tc.config, func(k string) string { return tc.env[k] })
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("Resolve = %+v, want an error naming %q", got, tc.wantErr)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Resolve (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRemoteAndHeader checks the round trip of a stored trace context,
// and that what is not W3C trace context is dropped rather than carried.
func TestRemoteAndHeader(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := map[string]struct{ parent, state, wantParent, wantState string }{
		"round trip":         {tp, "a=1,b=2", tp, "a=1,b=2"},
		"no state":           {tp, "", tp, ""},
		"unsampled":          {tp[:53] + "00", "", tp[:53] + "00", ""},
		"none":               {"", "", "", ""},
		"garbage":            {"garbage", "a=1", "", ""},
		"zero trace id":      {"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", "", ""},
		"bad state dropped":  {tp, "=,=", tp, ""},
		"upper case refused": {strings.ToUpper(tp), "", "", ""},
		"huge state dropped": {tp, "a=" + strings.Repeat("b", 250) + ",c=" + strings.Repeat("d", 250) + ",e=" + strings.Repeat("f", 250), tp, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, s := Header(Remote(context.Background(), tc.parent, tc.state))
			if p != tc.wantParent || s != tc.wantState {
				t.Errorf("Header(Remote(%q, %q)) = %q, %q; want %q, %q", tc.parent, tc.state, p, s, tc.wantParent, tc.wantState)
			}
		})
	}
}

// TestHTTPContinuesTheRequestTrace checks that, tracing off, the handler
// behind HTTP sees the request's trace context as its span's, and a
// malformed traceparent none.
func TestHTTPContinuesTheRequestTrace(t *testing.T) {
	t.Parallel()
	var got trace.SpanContext
	h := HTTP("POST /x", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = trace.SpanContextFromContext(r.Context())
		w.WriteHeader(http.StatusTeapot)
	}))
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for header, want := range map[string]string{tp: tp, "00-zz": "", "": ""} {
		req := httptest.NewRequest(http.MethodPost, "/x", nil)
		if header != "" {
			req.Header.Set("traceparent", header)
		}
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, req)
		if rr.Code != http.StatusTeapot {
			t.Errorf("status %d, want the handler's 418", rr.Code)
		}
		if p, _ := Header(trace.ContextWithSpanContext(context.Background(), got)); p != want {
			t.Errorf("traceparent %q: the handler saw %q, want %q", header, p, want)
		}
	}
}
