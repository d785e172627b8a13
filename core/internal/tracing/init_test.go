package tracing

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// helperEnv makes the test binary act as TestInitHelper's daemon.
const helperEnv = "HERALD_TRACING_INIT_HELPER"

// TestMain makes the test binary, re-run by TestInitExportsOverOTLP with
// helperEnv set, act as a daemon instead (Init sets process-wide state):
// it calls Init from the environment, records one span under a known
// parent and shuts down, which flushes the span to the exporter.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "1" {
		os.Exit(m.Run())
	}
	shutdown, err := Init(context.Background(), "", "9.9.9", hclog.NewNullLogger())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx := Remote(context.Background(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	_, span := Start(ctx, "", "", "herald.init.test", 0, Tenant.String("acme"))
	End(span, "sent", false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// received collects the exported spans' trace ids, names and service
// names.
type received struct {
	mu    sync.Mutex
	spans []string // "<trace id> <name> <service.name> <service.version>"
}

func (r *received) add(m *collectortrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range m.GetResourceSpans() {
		res := map[string]string{}
		for _, a := range rs.GetResource().GetAttributes() {
			res[a.GetKey()] = a.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, strings.Join([]string{hex.EncodeToString(s.GetTraceId()), s.GetName(),
					res["service.name"], res["service.version"]}, " "))
			}
		}
	}
}

type grpcReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	r *received
}

func (g grpcReceiver) Export(_ context.Context, m *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	g.r.add(m)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// TestInitExportsOverOTLP runs Init, turned on by OTEL_TRACES_EXPORTER
// alone, in a child process against an OTLP receiver of each protocol
// (HTTP/protobuf and gRPC) and checks that the span arrives with its
// trace and the resource from OTEL_SERVICE_NAME.
func TestInitExportsOverOTLP(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			r := &received{}
			var endpoint string
			if protocol == "grpc" {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				srv := grpc.NewServer()
				collectortrace.RegisterTraceServiceServer(srv, grpcReceiver{r: r})
				go func() { _ = srv.Serve(ln) }()
				t.Cleanup(srv.Stop)
				endpoint = "http://" + ln.Addr().String()
			} else {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
					body, _ := io.ReadAll(req.Body)
					var m collectortrace.ExportTraceServiceRequest
					if req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &m) != nil {
						http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
						return
					}
					r.add(&m)
					out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
					w.Header().Set("Content-Type", "application/x-protobuf")
					_, _ = w.Write(out)
				}))
				t.Cleanup(srv.Close)
				endpoint = srv.URL
			}
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), helperEnv+"=1", "OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL="+protocol,
				"OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_SERVICE_NAME=herald-init-test", "OTEL_SDK_DISABLED=")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("helper: %v\n%s", err, out)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			want := "4bf92f3577b34da6a3ce929d0e0e4736 herald.init.test herald-init-test 9.9.9"
			if len(r.spans) != 1 || r.spans[0] != want {
				t.Errorf("received %q, want [%q]", r.spans, want)
			}
		})
	}
}
