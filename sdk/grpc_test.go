package sdk

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/heraldhq/herald/sdk/internal/hostapi"
)

// fakeChannel is an in-process Channel for transport tests.
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

// connect serves impl in-process through go-plugin's gRPC test connection
// and returns the host-side Channel.
func connect(t *testing.T, impl Channel) (*grpcClient, *plugin.GRPCServer) {
	t.Helper()
	ps := map[string]plugin.Plugin{dispenseName: &channelPlugin{impl: impl, logger: hclog.NewNullLogger()}}
	client, server := plugin.TestPluginGRPCConn(t, false, ps)
	t.Cleanup(func() { _ = client.Close() }) // Close shuts the server down too.
	raw, err := client.Dispense(dispenseName)
	if err != nil {
		t.Fatalf("dispense: %v", err)
	}
	ch, ok := raw.(*grpcClient)
	if !ok {
		t.Fatalf("dispensed %T, not a Channel", raw)
	}
	return ch, server
}

func TestTransportDescribe(t *testing.T) {
	t.Parallel()
	ch, _ := connect(t, &fakeChannel{})
	resp, err := ch.Describe(context.Background(), DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Description
	want := Description{
		ChannelType: "EMAIL", Provider: "fake", PluginVersion: "0.1.0", MaxBatch: 10,
		APIVersions: []int{ProtocolVersion}, SDKVersion: Version,
		Config: []FieldSpec{
			{Name: "host", Type: FieldString, Required: true},
			{Name: "port", Type: FieldInt, Default: "25"},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("describe (-want +got):\n%s", diff)
	}
}

func TestTransportConfigure(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		config    map[string]any
		configure func(ConfigureRequest) error
		wantErr   error
		wantCfg   map[string]any
	}{
		"defaults applied and typed": {
			config:  map[string]any{"host": "smtp.local"},
			wantCfg: map[string]any{"host": "smtp.local", "port": 25},
		},
		"unknown key refused in the plugin": {
			config:  map[string]any{"host": "h", "hots": "x"},
			wantErr: &ConfigError{Field: "hots", Msg: "unknown field (known: host, port)"},
		},
		"wrong type refused": {
			config:  map[string]any{"host": 5},
			wantErr: &ConfigError{Field: "host", Msg: "must be a string, got int"},
		},
		"plugin refuses meaning": {
			config:    map[string]any{"host": "h", "port": 70000},
			configure: func(ConfigureRequest) error { return &ConfigError{Field: "port", Msg: "out of range"} },
			wantErr:   &ConfigError{Field: "port", Msg: "out of range"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := &fakeChannel{configure: tc.configure}
			ch, _ := connect(t, f)
			_, err := ch.Configure(context.Background(), ConfigureRequest{ProviderName: "p", Config: tc.config})
			if tc.wantErr != nil {
				var ce *ConfigError
				if !errors.As(err, &ce) {
					t.Fatalf("error = %v, want *ConfigError", err)
				}
				if diff := cmp.Diff(tc.wantErr, ce); diff != "" {
					t.Errorf("config error (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if diff := cmp.Diff(tc.wantCfg, f.got.Config); diff != "" {
				t.Errorf("config the plugin saw (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTransportSend(t *testing.T) {
	t.Parallel()
	batch := []Delivery{
		{DeliveryID: "a", IdempotencyKey: "ka", Attempt: 1, CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)},
		{DeliveryID: "b", IdempotencyKey: "kb", Attempt: 2},
	}
	tests := map[string]struct {
		send        func([]Delivery) ([]Result, error)
		want        []Result
		wantErr     bool
		retryable   bool
		rateLimited bool
		permanent   bool
		retryAfter  time.Duration
	}{
		"results as data": {
			send: func(b []Delivery) ([]Result, error) {
				return []Result{Sent("a", "m1"), RateLimited("b", "429", time.Minute)}, nil
			},
			want: []Result{Sent("a", "m1"), RateLimited("b", "429", time.Minute)},
		},
		"an unset outcome travels as unspecified": {
			send: func(b []Delivery) ([]Result, error) {
				return []Result{{DeliveryID: "a"}, Sent("b", "m2")}, nil
			},
			want: []Result{{DeliveryID: "a", Outcome: OutcomeUnspecified}, Sent("b", "m2")},
		},
		"default echoes idempotency keys": {
			want: []Result{Sent("a", "msg-ka"), Sent("b", "msg-kb")},
		},
		"rate limited batch error": {
			send: func([]Delivery) ([]Result, error) {
				return nil, RateLimitedError(errors.New("slow down"), 3*time.Second)
			},
			wantErr:     true,
			rateLimited: true,
			retryAfter:  3 * time.Second,
		},
		"permanent batch error": {
			send:      func([]Delivery) ([]Result, error) { return nil, PermanentError(errors.New("bad creds"), "401") },
			wantErr:   true,
			permanent: true,
		},
		"unclassified batch error is not classified on the host": {
			send:    func([]Delivery) ([]Result, error) { return nil, errors.New("boom") },
			wantErr: true,
		},
		"panic becomes a retryable batch error": {
			send:      func([]Delivery) ([]Result, error) { panic("kaboom") },
			wantErr:   true,
			retryable: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ch, _ := connect(t, &fakeChannel{send: tc.send})
			resp, err := ch.Send(context.Background(), SendRequest{Deliveries: batch})
			got := resp.Results
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				if IsRetryable(err) != tc.retryable || IsRateLimited(err) != tc.rateLimited || IsPermanent(err) != tc.permanent {
					t.Errorf("classification of %v: retryable %v rate limited %v permanent %v", err,
						IsRetryable(err), IsRateLimited(err), IsPermanent(err))
				}
				if RetryAfter(err) != tc.retryAfter {
					t.Errorf("RetryAfter = %v, want %v", RetryAfter(err), tc.retryAfter)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTransportHealth(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		health func() (HealthResponse, error)
		want   HealthResponse
	}{
		"healthy":         {want: HealthResponse{Healthy: true, Message: "ok"}},
		"unhealthy":       {health: func() (HealthResponse, error) { return HealthResponse{Message: "down"}, nil }, want: HealthResponse{Message: "down"}},
		"error unhealthy": {health: func() (HealthResponse, error) { return HealthResponse{}, errors.New("dial") }, want: HealthResponse{Message: "dial"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ch, _ := connect(t, &fakeChannel{health: tc.health})
			got, err := ch.Health(context.Background(), HealthRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestTransportServerGoneIsPluginExited(t *testing.T) {
	t.Parallel()
	ch, server := connect(t, &fakeChannel{})
	if _, err := ch.Health(context.Background(), HealthRequest{}); err != nil {
		t.Fatal(err)
	}
	server.Stop()
	_, err := ch.Send(context.Background(), SendRequest{Deliveries: []Delivery{{DeliveryID: "a"}}})
	if !errors.Is(err, hostapi.ErrPluginExited) {
		t.Fatalf("error = %v, want hostapi.ErrPluginExited", err)
	}
	if !IsRetryable(err) {
		t.Errorf("hostapi.ErrPluginExited-wrapped error is not retryable: %v", err)
	}
}

func TestTransportCallerDeadline(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	ch, _ := connect(t, &fakeChannel{send: func([]Delivery) ([]Result, error) {
		<-release
		return nil, nil
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := ch.Send(ctx, SendRequest{Deliveries: []Delivery{{DeliveryID: "a"}}})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, hostapi.ErrPluginExited) {
		t.Fatalf("error = %v, want context.DeadlineExceeded and not hostapi.ErrPluginExited", err)
	}
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
	for _, v := range []int{1, ProtocolVersion} {
		if _, ok := hostapi.PluginSet()[v][dispenseName]; !ok {
			t.Errorf("the host's plugin set has no %q at version %d", dispenseName, v)
		}
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(Handshake.MagicCookieValue) {
		t.Errorf("magic cookie %q is not 64 hex characters", Handshake.MagicCookieValue)
	}
}
