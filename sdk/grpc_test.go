package sdk

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	pb "github.com/heraldhq/herald/sdk/internal/proto/herald/channel/v2"
)

// fakeChannel is an in-process Channel for the plugin side's tests. (The
// transport tests, which need the host side too, are in package sdk/host.)
type fakeChannel struct {
	mu        sync.Mutex
	configure func(ConfigureRequest) error
	send      func([]Delivery) ([]Result, error)
	health    func() (HealthResponse, error)
	got       ConfigureRequest
}

var _ Channel = (*fakeChannel)(nil)

func (f *fakeChannel) Describe(context.Context, DescribeRequest) (DescribeResponse, error) {
	return DescribeResponse{Description: Description{
		ChannelType: "EMAIL", Provider: "fake", PluginVersion: "0.1.0", MaxBatch: 10,
		Config: []FieldSpec{
			{Name: "host", Type: FieldString, Required: true},
			{Name: "port", Type: FieldInt, Default: "25"},
		},
	}}, nil
}

func (f *fakeChannel) Configure(_ context.Context, req ConfigureRequest) (ConfigureResponse, error) {
	f.mu.Lock()
	f.got = req
	f.mu.Unlock()
	if f.configure != nil {
		return ConfigureResponse{}, f.configure(req)
	}
	return ConfigureResponse{}, nil
}

func (f *fakeChannel) Send(_ context.Context, req SendRequest) (SendResponse, error) {
	if f.send != nil {
		res, err := f.send(req.Deliveries)
		return SendResponse{Results: res}, err
	}
	out := make([]Result, len(req.Deliveries))
	for i, d := range req.Deliveries {
		out[i] = Sent(d.DeliveryID, "msg-"+d.IdempotencyKey)
	}
	return SendResponse{Results: out}, nil
}

func (f *fakeChannel) Health(context.Context, HealthRequest) (HealthResponse, error) {
	if f.health != nil {
		return f.health()
	}
	return HealthResponse{Healthy: true, Message: "ok"}, nil
}

// rawPlugin is the plugin side of protocol 2 with a raw gRPC client for a
// host: tests of the plugin side drive it with the generated messages.
type rawPlugin struct{ channelPlugin }

func (p *rawPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return pb.NewChannelPluginClient(c), nil
}

// rawConnect serves impl in-process through go-plugin's gRPC test
// connection, with host as the plugin's host watch, and returns a raw
// client of the served protocol.
func rawConnect(t *testing.T, impl Channel, host *hostWatch) pb.ChannelPluginClient {
	t.Helper()
	ps := map[string]plugin.Plugin{dispenseName: &rawPlugin{channelPlugin{impl: impl, logger: hclog.NewNullLogger(), host: host}}}
	client, _ := plugin.TestPluginGRPCConn(t, false, ps)
	t.Cleanup(func() { _ = client.Close() }) // Close shuts the server down too.
	raw, err := client.Dispense(dispenseName)
	if err != nil {
		t.Fatalf("dispense: %v", err)
	}
	return raw.(pb.ChannelPluginClient)
}

func TestProtocolVersionMatchesProto(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("proto/herald/channel/v2/channel.proto")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^// Protocol version: (\d+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal(`channel.proto has no "// Protocol version: N" header line`)
	}
	if got, _ := strconv.Atoi(string(m[1])); got != ProtocolVersion {
		t.Errorf("channel.proto says protocol version %d, sdk.ProtocolVersion is %d", got, ProtocolVersion)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(Handshake.MagicCookieValue) {
		t.Errorf("magic cookie %q is not 64 hex characters", Handshake.MagicCookieValue)
	}
}

// TestSkippedNeedsTheHostCapability: a skipped result reaches a host that
// listed HostCapabilitySkipped as OUTCOME_SKIPPED, and a host that did not
// (an older one) as OUTCOME_PERMANENT with the reason as its code, which
// it records as before; a whole-batch SkippedError likewise.
func TestSkippedNeedsTheHostCapability(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		caps        []string
		want        pb.Outcome
		wantCode    string
		wantBatchAs pb.Outcome
	}{
		"host with the capability": {[]string{"other", HostCapabilitySkipped}, pb.Outcome_OUTCOME_SKIPPED, "", pb.Outcome_OUTCOME_SKIPPED},
		"older host":               {nil, pb.Outcome_OUTCOME_PERMANENT, "offline", pb.Outcome_OUTCOME_PERMANENT},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			batchErr := false
			impl := &fakeChannel{send: func(ds []Delivery) ([]Result, error) {
				if batchErr {
					return nil, SkippedError(errors.New("offline"))
				}
				return []Result{Skipped(ds[0].DeliveryID, "offline")}, nil
			}}
			ch := rawConnect(t, impl, nil)
			ctx := context.Background()
			cfg := map[string]*pb.ConfigValue{"host": {Kind: &pb.ConfigValue_StringValue{StringValue: "h"}}}
			if _, err := ch.Configure(ctx, &pb.ConfigureRequest{ProviderName: "p", Config: cfg, HostCapabilities: c.caps}); err != nil {
				t.Fatal(err)
			}
			resp, err := ch.Send(ctx, &pb.SendRequest{Deliveries: []*pb.Delivery{{DeliveryId: "d1"}}})
			if err != nil || len(resp.GetResults()) != 1 {
				t.Fatalf("send: %v, %v", resp, err)
			}
			r := resp.GetResults()[0]
			if r.GetOutcome() != c.want || r.GetCode() != c.wantCode || r.GetReason() != "offline" {
				t.Errorf("result %v code %q reason %q; want %v code %q reason offline", r.GetOutcome(), r.GetCode(), r.GetReason(), c.want, c.wantCode)
			}
			batchErr = true
			resp, err = ch.Send(ctx, &pb.SendRequest{Deliveries: []*pb.Delivery{{DeliveryId: "d2"}}})
			if err != nil || resp.GetBatchError().GetOutcome() != c.wantBatchAs {
				t.Errorf("batch error: %v, %v; want outcome %v", resp, err, c.wantBatchAs)
			}
		})
	}
}
