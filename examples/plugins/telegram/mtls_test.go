package telegram_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sdk/host"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAutoMTLS checks that the Python plugin serves only over TLS with the
// host's client certificate: the host (go-plugin with AutoMTLS) talks to
// it, while a client without TLS, or with TLS but no client certificate,
// is refused.
func TestAutoMTLS(t *testing.T) {
	bin := buildPlugin(t)
	logs := &syncBuffer{}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  sdk.Handshake,
		VersionedPlugins: host.PluginSet(),
		Cmd:              exec.Command(bin),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug}),
		StartTimeout:     30 * time.Second,
	})
	defer client.Kill()
	rpc, err := client.Client()
	if err != nil {
		t.Fatalf("launch: %v\n%s", err, logs)
	}
	if err := rpc.Ping(); err != nil {
		t.Fatalf("ping (gRPC health over mTLS): %v", err)
	}
	if v := client.NegotiatedVersion(); v != sdk.ProtocolVersion {
		t.Errorf("negotiated protocol %d, want %d", v, sdk.ProtocolVersion)
	}
	if !strings.Contains(logs.String(), "mtls=true") {
		t.Errorf("the plugin did not report serving with mTLS:\n%s", logs)
	}
	addr := client.ReattachConfig().Addr.String()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, creds := range map[string]credentials.TransportCredentials{
		"plaintext":                 insecure.NewCredentials(),
		"TLS without a client cert": credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, ServerName: "localhost"}),
	} {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatalf("%s: dial: %v", name, err)
		}
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "plugin"})
		conn.Close()
		if err == nil {
			t.Errorf("%s: the plugin answered a client without the host's certificate", name)
		}
	}
}
