package host_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sdk/host"
)

// fakeChannel is an in-process sdk.Channel for transport tests.
type fakeChannel struct {
	mu        sync.Mutex
	configure func(sdk.ConfigureRequest) error
	send      func([]sdk.Delivery) ([]sdk.Result, error)
	health    func() (sdk.HealthResponse, error)
	got       sdk.ConfigureRequest
}

var _ sdk.Channel = (*fakeChannel)(nil)

func (f *fakeChannel) Describe(context.Context, sdk.DescribeRequest) (sdk.DescribeResponse, error) {
	return sdk.DescribeResponse{Description: sdk.Description{
		ChannelType: "EMAIL", Provider: "fake", PluginVersion: "0.1.0", MaxBatch: 10,
		Config: []sdk.FieldSpec{
			{Name: "host", Type: sdk.FieldString, Required: true},
			{Name: "port", Type: sdk.FieldInt, Default: "25"},
		},
	}}, nil
}

func (f *fakeChannel) Configure(_ context.Context, req sdk.ConfigureRequest) (sdk.ConfigureResponse, error) {
	f.mu.Lock()
	f.got = req
	f.mu.Unlock()
	if f.configure != nil {
		return sdk.ConfigureResponse{}, f.configure(req)
	}
	return sdk.ConfigureResponse{}, nil
}

func (f *fakeChannel) Send(_ context.Context, req sdk.SendRequest) (sdk.SendResponse, error) {
	if f.send != nil {
		res, err := f.send(req.Deliveries)
		return sdk.SendResponse{Results: res}, err
	}
	out := make([]sdk.Result, len(req.Deliveries))
	for i, d := range req.Deliveries {
		out[i] = sdk.Sent(d.DeliveryID, "msg-"+d.IdempotencyKey)
	}
	return sdk.SendResponse{Results: out}, nil
}

func (f *fakeChannel) Health(context.Context, sdk.HealthRequest) (sdk.HealthResponse, error) {
	if f.health != nil {
		return f.health()
	}
	return sdk.HealthResponse{Healthy: true, Message: "ok"}, nil
}

// serveStart serializes the start of sdk.Serve across parallel tests:
// Serve installs its logger as hclog's default, a package variable that
// hclog does not guard.
var serveStart sync.Mutex

// connect serves impl in-process with sdk.Serve in debug (reattach) mode,
// as a plugin's own main would serve it, connects to it through
// host.PluginSet as the Herald host does, and returns the dispensed Client
// and a function that stops the plugin's server (the plugin is gone).
func connect(t *testing.T, impl sdk.Channel) (host.Client, func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	reattach := make(chan *plugin.ReattachConfig, 1)
	closed := make(chan struct{})
	serveStart.Lock()
	go sdk.Serve(func() sdk.Channel { return impl }, sdk.WithLogger(hclog.NewNullLogger()), sdk.WithDebug(ctx, reattach, closed))
	var rc *plugin.ReattachConfig
	select {
	case rc = <-reattach:
		serveStart.Unlock()
	case <-time.After(10 * time.Second):
		serveStart.Unlock()
		stop()
		t.Fatal("sdk.Serve sent no reattach config")
	}
	// A reattached client dispenses from Plugins: the host's set for the
	// version the plugin serves.
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  sdk.Handshake,
		Plugins:          host.PluginSet()[rc.ProtocolVersion],
		Reattach:         rc,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.NewNullLogger(),
	})
	rpc, err := client.Client()
	if err != nil {
		stop()
		t.Fatalf("connect: %v", err)
	}
	gone := func() {
		stop()
		<-closed // Serve has returned: its gRPC server is stopped
	}
	// Stop the server first: closing the client asks a live plugin to shut
	// down, and go-plugin's two ways of stopping its server race.
	t.Cleanup(func() {
		gone()
		_ = rpc.Close()
	})
	ch, err := host.Dispense(rpc)
	if err != nil {
		t.Fatal(err)
	}
	if v := ch.ProtocolVersion(); v != sdk.ProtocolVersion {
		t.Fatalf("client speaks protocol version %d, want %d", v, sdk.ProtocolVersion)
	}
	return ch, gone
}

func TestTransportDescribe(t *testing.T) {
	t.Parallel()
	ch, _ := connect(t, &fakeChannel{})
	resp, err := ch.Describe(context.Background(), sdk.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Description
	want := sdk.Description{
		ChannelType: "EMAIL", Provider: "fake", PluginVersion: "0.1.0", MaxBatch: 10,
		APIVersions: []int{sdk.ProtocolVersion}, SDKVersion: sdk.Version,
		Config: []sdk.FieldSpec{
			{Name: "host", Type: sdk.FieldString, Required: true},
			{Name: "port", Type: sdk.FieldInt, Default: "25"},
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
		configure func(sdk.ConfigureRequest) error
		wantErr   error
		wantCfg   map[string]any
	}{
		"defaults applied and typed": {
			config:  map[string]any{"host": "smtp.local"},
			wantCfg: map[string]any{"host": "smtp.local", "port": 25},
		},
		"unknown key refused in the plugin": {
			config:  map[string]any{"host": "h", "hots": "x"},
			wantErr: &sdk.ConfigError{Field: "hots", Msg: "unknown field (known: host, port)"},
		},
		"wrong type refused": {
			config:  map[string]any{"host": 5},
			wantErr: &sdk.ConfigError{Field: "host", Msg: "must be a string, got int"},
		},
		"plugin refuses meaning": {
			config:    map[string]any{"host": "h", "port": 70000},
			configure: func(sdk.ConfigureRequest) error { return &sdk.ConfigError{Field: "port", Msg: "out of range"} },
			wantErr:   &sdk.ConfigError{Field: "port", Msg: "out of range"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := &fakeChannel{configure: tc.configure}
			ch, _ := connect(t, f)
			_, err := ch.Configure(context.Background(), sdk.ConfigureRequest{ProviderName: "p", Config: tc.config})
			if tc.wantErr != nil {
				var ce *sdk.ConfigError
				if !errors.As(err, &ce) {
					t.Fatalf("error = %v, want *sdk.ConfigError", err)
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
	batch := []sdk.Delivery{
		{DeliveryID: "a", IdempotencyKey: "ka", Attempt: 1, CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)},
		{DeliveryID: "b", IdempotencyKey: "kb", Attempt: 2},
	}
	tests := map[string]struct {
		send        func([]sdk.Delivery) ([]sdk.Result, error)
		want        []sdk.Result
		wantErr     bool
		retryable   bool
		rateLimited bool
		permanent   bool
		retryAfter  time.Duration
	}{
		"results as data": {
			send: func(b []sdk.Delivery) ([]sdk.Result, error) {
				return []sdk.Result{sdk.Sent("a", "m1"), sdk.RateLimited("b", "429", time.Minute)}, nil
			},
			want: []sdk.Result{sdk.Sent("a", "m1"), sdk.RateLimited("b", "429", time.Minute)},
		},
		"an unset outcome travels as unspecified": {
			send: func(b []sdk.Delivery) ([]sdk.Result, error) {
				return []sdk.Result{{DeliveryID: "a"}, sdk.Sent("b", "m2")}, nil
			},
			want: []sdk.Result{{DeliveryID: "a", Outcome: sdk.OutcomeUnspecified}, sdk.Sent("b", "m2")},
		},
		"default echoes idempotency keys": {
			want: []sdk.Result{sdk.Sent("a", "msg-ka"), sdk.Sent("b", "msg-kb")},
		},
		"rate limited batch error": {
			send: func([]sdk.Delivery) ([]sdk.Result, error) {
				return nil, sdk.RateLimitedError(errors.New("slow down"), 3*time.Second)
			},
			wantErr:     true,
			rateLimited: true,
			retryAfter:  3 * time.Second,
		},
		"permanent batch error": {
			send: func([]sdk.Delivery) ([]sdk.Result, error) {
				return nil, sdk.PermanentError(errors.New("bad creds"), "401")
			},
			wantErr:   true,
			permanent: true,
		},
		"unclassified batch error is not classified on the host": {
			send:    func([]sdk.Delivery) ([]sdk.Result, error) { return nil, errors.New("boom") },
			wantErr: true,
		},
		"panic becomes a retryable batch error": {
			send:      func([]sdk.Delivery) ([]sdk.Result, error) { panic("kaboom") },
			wantErr:   true,
			retryable: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ch, _ := connect(t, &fakeChannel{send: tc.send})
			resp, err := ch.Send(context.Background(), sdk.SendRequest{Deliveries: batch})
			got := resp.Results
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				if sdk.IsRetryable(err) != tc.retryable || sdk.IsRateLimited(err) != tc.rateLimited || sdk.IsPermanent(err) != tc.permanent {
					t.Errorf("classification of %v: retryable %v rate limited %v permanent %v", err,
						sdk.IsRetryable(err), sdk.IsRateLimited(err), sdk.IsPermanent(err))
				}
				if sdk.RetryAfter(err) != tc.retryAfter {
					t.Errorf("sdk.RetryAfter = %v, want %v", sdk.RetryAfter(err), tc.retryAfter)
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
		health func() (sdk.HealthResponse, error)
		want   sdk.HealthResponse
	}{
		"healthy":         {want: sdk.HealthResponse{Healthy: true, Message: "ok"}},
		"unhealthy":       {health: func() (sdk.HealthResponse, error) { return sdk.HealthResponse{Message: "down"}, nil }, want: sdk.HealthResponse{Message: "down"}},
		"error unhealthy": {health: func() (sdk.HealthResponse, error) { return sdk.HealthResponse{}, errors.New("dial") }, want: sdk.HealthResponse{Message: "dial"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ch, _ := connect(t, &fakeChannel{health: tc.health})
			got, err := ch.Health(context.Background(), sdk.HealthRequest{})
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
	ch, stop := connect(t, &fakeChannel{})
	if _, err := ch.Health(context.Background(), sdk.HealthRequest{}); err != nil {
		t.Fatal(err)
	}
	stop() // the plugin is gone
	_, err := ch.Send(context.Background(), sdk.SendRequest{Deliveries: []sdk.Delivery{{DeliveryID: "a"}}})
	if !errors.Is(err, host.ErrPluginExited) {
		t.Fatalf("error = %v, want host.ErrPluginExited", err)
	}
	if !sdk.IsRetryable(err) {
		t.Errorf("host.ErrPluginExited-wrapped error is not retryable: %v", err)
	}
}

func TestTransportCallerDeadline(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	ch, _ := connect(t, &fakeChannel{send: func([]sdk.Delivery) ([]sdk.Result, error) {
		<-release
		return nil, nil
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := ch.Send(ctx, sdk.SendRequest{Deliveries: []sdk.Delivery{{DeliveryID: "a"}}})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, host.ErrPluginExited) {
		t.Fatalf("error = %v, want context.DeadlineExceeded and not host.ErrPluginExited", err)
	}
}

func TestPluginSetServesEveryVersion(t *testing.T) {
	t.Parallel()
	if got, want := fmt.Sprint(host.ProtocolVersions), fmt.Sprint([]int{1, sdk.ProtocolVersion}); got != want {
		t.Errorf("ProtocolVersions = %s, want %s", got, want)
	}
	for _, v := range host.ProtocolVersions {
		if _, ok := host.PluginSet()[v][host.DispenseName]; !ok {
			t.Errorf("the host's plugin set has no %q at version %d", host.DispenseName, v)
		}
	}
}

func TestErrPluginExitedIsRetryable(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("send: %w", host.ErrPluginExited)
	if outcome, classified := sdk.Classify(err); outcome != sdk.OutcomeRetryable || !classified {
		t.Errorf("Classify(%v) = %v, %v; want retryable, classified", err, outcome, classified)
	}
}
