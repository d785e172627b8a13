package sdk

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/heraldhq/herald/sdk/internal/proto/herald/channel/v2"
)

// dispenseName is the name the channel plugin is served under in the
// plugin's own plugin set. With gRPC the name never crosses the wire: the
// host dispenses under its own (host.DispenseName).
const dispenseName = "channel"

// channelPlugin is the plugin side of protocol version 2: it registers
// grpcServer on the plugin's gRPC server. The host side is package
// sdk/host.
type channelPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// impl is the plugin's Channel.
	impl Channel
	// logger is the plugin's logger; nil logs nowhere.
	logger hclog.Logger
	// host cancels Send calls when the host process is gone; nil in debug
	// mode.
	host *hostWatch
}

var _ plugin.GRPCPlugin = (*channelPlugin)(nil)

// GRPCServer registers the channel service on the plugin's gRPC server.
func (p *channelPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.impl == nil {
		return errors.New("sdk: no Channel to serve")
	}
	logger := p.logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	pb.RegisterChannelPluginServer(s, &grpcServer{impl: p.impl, log: logger, host: p.host})
	return nil
}

// GRPCClient refuses: a plugin serves, the host (package sdk/host) calls.
func (p *channelPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("sdk: the host side of the plugin protocol is package sdk/host")
}

// grpcServer serves a Channel over herald.channel.v2.
type grpcServer struct {
	pb.UnimplementedChannelPluginServer
	impl Channel
	log  hclog.Logger
	host *hostWatch // nil: no host watch

	mu   sync.Mutex
	desc *Description
	// skipOK: the host listed HostCapabilitySkipped when it configured
	// the plugin.
	skipOK atomic.Bool
}

func (s *grpcServer) describe(ctx context.Context) (Description, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.desc != nil {
		return *s.desc, nil
	}
	resp, err := s.impl.Describe(ctx, DescribeRequest{})
	if err != nil {
		return Description{}, err
	}
	d := resp.Description
	d.SDKVersion = Version
	d.APIVersions = []int{ProtocolVersion}
	s.desc = &d
	return d, nil
}

func (s *grpcServer) Describe(ctx context.Context, _ *pb.DescribeRequest) (resp *pb.DescribeResponse, err error) {
	defer s.recoverTo("describe", &err)
	d, err := s.describe(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "describe: %v", err)
	}
	return descriptionToProto(d), nil
}

func (s *grpcServer) Configure(ctx context.Context, in *pb.ConfigureRequest) (resp *pb.ConfigureResponse, err error) {
	defer s.recoverTo("configure", &err)
	d, err := s.describe(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "configure: describe: %v", err)
	}
	req := configureRequestFromProto(in)
	s.skipOK.Store(slices.Contains(req.HostCapabilities, HostCapabilitySkipped))
	cfg, err := CheckConfig(d.Config, req.Config)
	if err == nil {
		req.Config = cfg
		_, err = s.impl.Configure(ctx, req)
	}
	var ce *ConfigError
	if errors.As(err, &ce) {
		s.log.Warn("config refused", "provider", req.ProviderName, "field", ce.Field, "error", ce.Msg)
		return &pb.ConfigureResponse{ConfigError: &pb.ConfigError{Field: ce.Field, Message: ce.Msg}}, nil
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "configure: %v", err)
	}
	s.log.Info("configured", "provider", req.ProviderName)
	return &pb.ConfigureResponse{}, nil
}

func (s *grpcServer) Send(ctx context.Context, in *pb.SendRequest) (resp *pb.SendResponse, err error) {
	batch := deliveriesFromProto(in.GetDeliveries())
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("plugin panicked in send", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			resp, err = &pb.SendResponse{BatchError: &pb.BatchError{
				Message: fmt.Sprintf("plugin panicked: %v", r),
				Outcome: pb.Outcome_OUTCOME_RETRYABLE,
			}}, nil
		}
	}()
	// A host that dies cancels the batch (see hostWatch).
	ctx, done := s.host.bind(ctx)
	defer done()
	d, _ := s.describe(ctx)
	ctx, span := startSendSpan(ctx, d, len(batch))
	defer func() {
		if r := recover(); r != nil {
			endSendSpan(span, nil, errors.New("plugin panicked"))
			panic(r) // to the recover above, which answers the host
		}
	}()
	out, sendErr := s.impl.Send(ctx, SendRequest{Deliveries: batch})
	endSendSpan(span, out.Results, sendErr)
	if sendErr != nil {
		outcome, classified := Classify(sendErr)
		if outcome == OutcomeSent {
			outcome = OutcomeRetryable
		}
		if outcome == OutcomeSkipped && !s.skipOK.Load() {
			outcome = OutcomePermanent
		}
		if !classified {
			s.log.Warn("send failed with an unclassified error", "unclassified", true, "error", sendErr, "batch", len(batch))
		}
		return &pb.SendResponse{BatchError: &pb.BatchError{
			Message:      sendErr.Error(),
			Outcome:      outcomeToProto(outcome),
			RetryAfter:   durationToProto(RetryAfter(sendErr)),
			Code:         ErrorCode(sendErr),
			Unclassified: !classified,
		}}, nil
	}
	for _, r := range out.Results {
		if r.Unclassified {
			s.log.Warn("delivery failed with an unclassified error", "unclassified", true, "delivery_id", r.DeliveryID, "reason", r.Reason)
		}
		if r.Outcome == OutcomeUnspecified {
			s.log.Error("contract violation: result with no outcome (the host retries it)", "delivery_id", r.DeliveryID)
		}
	}
	if len(out.Results) != len(batch) {
		s.log.Warn("send returned a result count different from the batch size", "batch", len(batch), "results", len(out.Results))
	}
	if !s.skipOK.Load() {
		downgradeSkipped(out.Results)
	}
	return &pb.SendResponse{Results: resultsToProto(out.Results)}, nil
}

// downgradeSkipped turns the skipped results for a host without
// HostCapabilitySkipped into what such a host understands: Permanent, the
// reason as the code (so "offline" stays "offline").
func downgradeSkipped(rs []Result) {
	for i, r := range rs {
		if r.Outcome == OutcomeSkipped {
			rs[i].Outcome = OutcomePermanent
			if rs[i].Code == "" {
				rs[i].Code = r.Reason
			}
		}
	}
}

func (s *grpcServer) Health(ctx context.Context, _ *pb.HealthRequest) (resp *pb.HealthResponse, err error) {
	defer s.recoverTo("health", &err)
	h, err := s.impl.Health(ctx, HealthRequest{})
	if err != nil {
		return &pb.HealthResponse{Healthy: false, Message: err.Error()}, nil
	}
	return healthToProto(h), nil
}

func (s *grpcServer) recoverTo(op string, err *error) {
	if r := recover(); r != nil {
		s.log.Error("plugin panicked", "op", op, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		*err = status.Errorf(codes.Internal, "%s: plugin panicked: %v", op, r)
	}
}
