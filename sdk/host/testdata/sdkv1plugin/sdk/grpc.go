package sdk

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/heraldhq/herald/sdk/internal/wire"
	pb "github.com/heraldhq/herald/sdk/proto/herald/channel/v1"
)

// channelPlugin is the go-plugin GRPCPlugin for protocol version 1: the
// plugin side registers grpcServer, the host side gets a grpcClient.
type channelPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// impl is the plugin's Channel; nil on the host side.
	impl Channel
	// logger is the plugin's logger; nil on the host side.
	logger hclog.Logger
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
	pb.RegisterChannelPluginServer(s, &grpcServer{impl: p.impl, log: logger})
	return nil
}

// GRPCClient returns the host-side Channel. ctx is cancelled by go-plugin
// when the plugin process exits.
func (p *channelPlugin) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &grpcClient{rpc: pb.NewChannelPluginClient(c), exited: ctx}, nil
}

// grpcServer serves a Channel over herald.channel.v1.
type grpcServer struct {
	pb.UnimplementedChannelPluginServer
	impl Channel
	log  hclog.Logger

	mu   sync.Mutex
	desc *Description
}

func (s *grpcServer) describe(ctx context.Context) (Description, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.desc != nil {
		return *s.desc, nil
	}
	d, err := s.impl.Describe(ctx)
	if err != nil {
		return Description{}, err
	}
	d.SDKVersion = Version
	if len(d.APIVersions) == 0 {
		d.APIVersions = []int{ProtocolVersion}
	}
	s.desc = &d
	return d, nil
}

func (s *grpcServer) Describe(ctx context.Context, _ *pb.DescribeRequest) (resp *pb.DescribeResponse, err error) {
	defer s.recoverTo("describe", &err)
	d, err := s.describe(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "describe: %v", err)
	}
	return wire.DescriptionToProto(d), nil
}

func (s *grpcServer) Configure(ctx context.Context, in *pb.ConfigureRequest) (resp *pb.ConfigureResponse, err error) {
	defer s.recoverTo("configure", &err)
	d, err := s.describe(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "configure: describe: %v", err)
	}
	req := wire.ConfigureRequestFromProto(in)
	cfg, err := CheckConfig(d.Config, req.Config)
	if err == nil {
		req.Config = cfg
		err = s.impl.Configure(ctx, req)
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
	batch := wire.DeliveriesFromProto(in.GetDeliveries())
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("plugin panicked in send", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			resp, err = &pb.SendResponse{BatchError: &pb.BatchError{
				Message: fmt.Sprintf("plugin panicked: %v", r),
				Outcome: pb.Outcome_OUTCOME_RETRYABLE,
			}}, nil
		}
	}()
	results, sendErr := s.impl.Send(ctx, batch)
	if sendErr != nil {
		outcome, classified := Classify(sendErr)
		if outcome == OutcomeSent {
			outcome = OutcomeRetryable
		}
		if !classified {
			s.log.Warn("send failed with an unclassified error", "unclassified", true, "error", sendErr, "batch", len(batch))
		}
		return &pb.SendResponse{BatchError: &pb.BatchError{
			Message:      sendErr.Error(),
			Outcome:      wire.OutcomeToProto(outcome),
			RetryAfter:   wire.DurationToProto(RetryAfter(sendErr)),
			Code:         ErrorCode(sendErr),
			Unclassified: !classified,
		}}, nil
	}
	for _, r := range results {
		if r.Unclassified {
			s.log.Warn("delivery failed with an unclassified error", "unclassified", true, "delivery_id", r.DeliveryID, "reason", r.Reason)
		}
	}
	if len(results) != len(batch) {
		s.log.Warn("send returned a result count different from the batch size", "batch", len(batch), "results", len(results))
	}
	return &pb.SendResponse{Results: wire.ResultsToProto(results)}, nil
}

func (s *grpcServer) Health(ctx context.Context, _ *pb.HealthRequest) (resp *pb.HealthResponse, err error) {
	defer s.recoverTo("health", &err)
	h, err := s.impl.Health(ctx)
	if err != nil {
		return &pb.HealthResponse{Healthy: false, Message: err.Error()}, nil
	}
	return wire.HealthToProto(h), nil
}

func (s *grpcServer) recoverTo(op string, err *error) {
	if r := recover(); r != nil {
		s.log.Error("plugin panicked", "op", op, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		*err = status.Errorf(codes.Internal, "%s: plugin panicked: %v", op, r)
	}
}

// grpcClient is the host side of a plugin: a Channel whose calls cross the
// process boundary. Transport failures come back as errors wrapping
// ErrPluginExited (plugin gone) or the context's error; outcomes travel as
// data.
type grpcClient struct {
	rpc pb.ChannelPluginClient
	// exited is cancelled by go-plugin when the plugin process exits.
	exited context.Context
}

var _ Channel = (*grpcClient)(nil)

// Done is closed when the plugin process has exited. The host finds it by
// type-asserting interface{ Done() <-chan struct{} } on the dispensed Channel.
func (c *grpcClient) Done() <-chan struct{} { return c.exited.Done() }

func (c *grpcClient) Describe(ctx context.Context) (Description, error) {
	resp, err := c.rpc.Describe(ctx, &pb.DescribeRequest{})
	if err != nil {
		return Description{}, c.transportErr(ctx, "describe", err)
	}
	return wire.DescriptionFromProto(resp), nil
}

func (c *grpcClient) Configure(ctx context.Context, req ConfigureRequest) error {
	in, err := wire.ConfigureRequestToProto(req)
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	resp, err := c.rpc.Configure(ctx, in)
	if err != nil {
		return c.transportErr(ctx, "configure", err)
	}
	if ce := resp.GetConfigError(); ce != nil {
		return &ConfigError{Field: ce.GetField(), Msg: ce.GetMessage()}
	}
	return nil
}

func (c *grpcClient) Send(ctx context.Context, batch []Delivery) ([]Result, error) {
	resp, err := c.rpc.Send(ctx, &pb.SendRequest{Deliveries: wire.DeliveriesToProto(batch)})
	if err != nil {
		return nil, c.transportErr(ctx, "send", err)
	}
	if be := resp.GetBatchError(); be != nil {
		return nil, batchError(be)
	}
	return wire.ResultsFromProto(resp.GetResults()), nil
}

func (c *grpcClient) Health(ctx context.Context) (HealthReport, error) {
	resp, err := c.rpc.Health(ctx, &pb.HealthRequest{})
	if err != nil {
		return HealthReport{}, c.transportErr(ctx, "health", err)
	}
	return wire.HealthFromProto(resp), nil
}

// transportErr maps a gRPC failure. The caller's own cancellation or
// deadline keeps the context error. Otherwise Unavailable (connection
// gone), Canceled (the host closed the connection to a dying plugin) or a
// plugin process that has exited becomes ErrPluginExited.
func (c *grpcClient) transportErr(ctx context.Context, op string, err error) error {
	st, _ := status.FromError(err)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("plugin %s: %w", op, ctx.Err())
	case st.Code() == codes.Unavailable || st.Code() == codes.Canceled || c.exited.Err() != nil:
		return fmt.Errorf("plugin %s: %w: %s", op, ErrPluginExited, st.Message())
	case st.Code() == codes.DeadlineExceeded:
		return fmt.Errorf("plugin %s: %w", op, context.DeadlineExceeded)
	}
	return fmt.Errorf("plugin %s: %s", op, st.Message())
}

// batchError turns a SendResponse.batch_error back into a classified error.
func batchError(be *pb.BatchError) error {
	err := fmt.Errorf("plugin send: %s", be.GetMessage())
	if be.GetUnclassified() {
		return err
	}
	after := wire.DurationFromProto(be.GetRetryAfter())
	switch wire.OutcomeFromProto(be.GetOutcome()) {
	case OutcomePermanent:
		return PermanentError(err, be.GetCode())
	case OutcomeRateLimited:
		return RateLimitedError(err, after)
	}
	return RetryableError(err, after)
}
