package host_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sdk/host"
)

// BuildV1Plugin builds testdata/sdkv1plugin: a plugin built against a
// frozen copy of the SDK before v1 (protocol version 1, where OUTCOME_SENT
// is 0). It returns the binary's path.
func buildV1Plugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "herald-plugin-oldv1")
	cmd := exec.Command("go", "build", "-o", bin, "./plugin")
	cmd.Dir = filepath.Join("testdata", "sdkv1plugin")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the protocol 1 plugin: %v\n%s", err, out)
	}
	return bin
}

// TestProtocol1PluginFromOldSDK runs a plugin built from the SDK before v1
// through today's host side: go-plugin negotiates protocol version 1 and
// every outcome, config error, health report and batch error means what
// the old plugin meant.
func TestProtocol1PluginFromOldSDK(t *testing.T) {
	t.Parallel()
	bin := buildV1Plugin(t)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  sdk.Handshake,
		VersionedPlugins: host.PluginSet(),
		Cmd:              exec.Command(bin),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Warn}),
		StartTimeout:     30 * time.Second,
	})
	t.Cleanup(client.Kill)
	rpc, err := client.Client()
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	if v := client.NegotiatedVersion(); v != 1 {
		t.Fatalf("negotiated protocol version %d, want 1", v)
	}
	ch, err := host.Dispense(rpc)
	if err != nil {
		t.Fatal(err)
	}
	if v := ch.ProtocolVersion(); v != 1 {
		t.Errorf("client speaks protocol version %d, want 1", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	desc, err := ch.Describe(ctx, sdk.DescribeRequest{})
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	wantDesc := sdk.Description{
		ChannelType: "OLDV1", Provider: "oldsdk", PluginVersion: "0.9.0", APIVersions: []int{1},
		MaxBatch: 10, SDKVersion: "1.0.0",
		Config: []sdk.FieldSpec{{Name: "prefix", Type: sdk.FieldString, Required: true, Description: "Prefix of provider message ids."}},
	}
	if diff := cmp.Diff(wantDesc, desc.Description); diff != "" {
		t.Errorf("describe (-want +got):\n%s", diff)
	}

	_, err = ch.Configure(ctx, sdk.ConfigureRequest{ProviderName: "old", Config: map[string]any{"prefix": "bad"}})
	var ce *sdk.ConfigError
	if !errors.As(err, &ce) || ce.Field != "prefix" {
		t.Errorf("bad config: %v, want a *sdk.ConfigError naming prefix", err)
	}
	if _, err := ch.Configure(ctx, sdk.ConfigureRequest{ProviderName: "old", Config: map[string]any{"prefix": "old-"}}); err != nil {
		t.Fatalf("configure: %v", err)
	}

	health, err := ch.Health(ctx, sdk.HealthRequest{})
	if err != nil || !health.Healthy || health.Message != "old plugin ok" {
		t.Errorf("health = %+v, %v", health, err)
	}

	batch := []sdk.Delivery{
		{DeliveryID: "d-sent", IdempotencyKey: "k1", Content: sdk.Content{Body: "hello"}},
		{DeliveryID: "d-retry", IdempotencyKey: "k2", Content: sdk.Content{Body: "retry"}},
		{DeliveryID: "d-rate", IdempotencyKey: "k3", Content: sdk.Content{Body: "rate"}},
		{DeliveryID: "d-perm", IdempotencyKey: "k4", Content: sdk.Content{Body: "permanent"}},
	}
	resp, err := ch.Send(ctx, sdk.SendRequest{Deliveries: batch})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	want := []sdk.Result{
		sdk.Sent("d-sent", "old-d-sent/k1"),
		sdk.Retry("d-retry", "old plugin: told to retry", 2*time.Second),
		sdk.RateLimited("d-rate", "old plugin: told to rate limit", 3*time.Second),
		sdk.Permanent("d-perm", "old plugin: told to fail", "OLD_PERMANENT"),
	}
	if diff := cmp.Diff(want, resp.Results); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}

	_, err = ch.Send(ctx, sdk.SendRequest{Deliveries: []sdk.Delivery{{DeliveryID: "d-batch", Content: sdk.Content{Body: "batch-error"}}}})
	if !sdk.IsPermanent(err) || sdk.ErrorCode(err) != "OLD_BATCH" {
		t.Errorf("batch error = %v (permanent %v, code %q), want permanent OLD_BATCH", err, sdk.IsPermanent(err), sdk.ErrorCode(err))
	}

	client.Kill()
	select {
	case <-ch.Done():
	case <-time.After(10 * time.Second):
		t.Errorf("Done not closed after the plugin was killed")
	}
	_, err = ch.Health(context.Background(), sdk.HealthRequest{})
	if !errors.Is(err, host.ErrPluginExited) || !sdk.IsRetryable(err) {
		t.Errorf("call to an exited plugin: %v, want a retryable error wrapping host.ErrPluginExited", err)
	}
}
