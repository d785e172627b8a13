package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/heraldhq/herald/sdk"
	pbv1 "github.com/heraldhq/herald/sdk/internal/proto/herald/channel/v1"
	pb "github.com/heraldhq/herald/sdk/internal/proto/herald/channel/v2"
	"github.com/heraldhq/herald/sdk/internal/wire"
)

// This file is the host side of the protocol: the go-plugin plugins a host
// launches a channel plugin with, and the Client they dispense.

// channelPlugin is the host side of protocol version 2, the version this
// SDK's plugins serve (sdk.ProtocolVersion).
type channelPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

var _ plugin.GRPCPlugin = (*channelPlugin)(nil)

// GRPCServer refuses: the host calls plugins, it serves none (plugins
// serve with sdk.Serve).
func (p *channelPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("host: a plugin serves with sdk.Serve, not with the host's plugin set")
}

// GRPCClient returns the host-side Channel. ctx is cancelled by go-plugin
// when the plugin process exits.
func (p *channelPlugin) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &grpcClient{rpc: pb.NewChannelPluginClient(c), exited: ctx, version: sdk.ProtocolVersion}, nil
}

// channelPluginV1 is the host side of protocol version 1, spoken by plugins
// built before SDK v1. Only the host uses it: this SDK's plugins serve
// version 2.
type channelPluginV1 struct {
	plugin.NetRPCUnsupportedPlugin
}

var _ plugin.GRPCPlugin = (*channelPluginV1)(nil)

// GRPCServer refuses: protocol version 1 is served only by plugins built
// before SDK v1.
func (p *channelPluginV1) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("host: protocol version 1 is served only by plugins built before SDK v1")
}

// GRPCClient returns the host-side Channel over herald.channel.v1.
func (p *channelPluginV1) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &grpcClient{rpc: v1Client{pbv1.NewChannelPluginClient(c)}, exited: ctx, version: 1}, nil
}

// grpcClient is the host side of a plugin: a Channel whose calls cross the
// process boundary. Transport failures come back as errors wrapping
// ErrPluginExited (plugin gone) or the context's error; outcomes travel as
// data.
type grpcClient struct {
	rpc pb.ChannelPluginClient
	// exited is cancelled by go-plugin when the plugin process exits.
	exited context.Context
	// version is the negotiated protocol version.
	version int
}

var _ Client = (*grpcClient)(nil)

// Done is closed when the plugin process has exited.
func (c *grpcClient) Done() <-chan struct{} { return c.exited.Done() }

// ProtocolVersion is the protocol version spoken with the plugin.
func (c *grpcClient) ProtocolVersion() int { return c.version }

func (c *grpcClient) Describe(ctx context.Context, _ sdk.DescribeRequest) (sdk.DescribeResponse, error) {
	resp, err := c.rpc.Describe(ctx, &pb.DescribeRequest{})
	if err != nil {
		return sdk.DescribeResponse{}, c.transportErr(ctx, "describe", err)
	}
	return sdk.DescribeResponse{Description: wire.DescriptionFromProto(resp)}, nil
}

func (c *grpcClient) Configure(ctx context.Context, req sdk.ConfigureRequest) (sdk.ConfigureResponse, error) {
	in, err := wire.ConfigureRequestToProto(req)
	if err != nil {
		return sdk.ConfigureResponse{}, fmt.Errorf("configure: %w", err)
	}
	resp, err := c.rpc.Configure(ctx, in)
	if err != nil {
		return sdk.ConfigureResponse{}, c.transportErr(ctx, "configure", err)
	}
	if ce := resp.GetConfigError(); ce != nil {
		return sdk.ConfigureResponse{}, &sdk.ConfigError{Field: ce.GetField(), Msg: ce.GetMessage()}
	}
	return sdk.ConfigureResponse{}, nil
}

func (c *grpcClient) Send(ctx context.Context, req sdk.SendRequest) (sdk.SendResponse, error) {
	resp, err := c.rpc.Send(withOutgoingTrace(ctx), &pb.SendRequest{Deliveries: wire.DeliveriesToProto(req.Deliveries)})
	if err != nil {
		return sdk.SendResponse{}, c.transportErr(ctx, "send", err)
	}
	if be := resp.GetBatchError(); be != nil {
		return sdk.SendResponse{}, batchError(be)
	}
	return sdk.SendResponse{Results: wire.ResultsFromProto(resp.GetResults())}, nil
}

func (c *grpcClient) Health(ctx context.Context, _ sdk.HealthRequest) (sdk.HealthResponse, error) {
	resp, err := c.rpc.Health(ctx, &pb.HealthRequest{})
	if err != nil {
		return sdk.HealthResponse{}, c.transportErr(ctx, "health", err)
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
// An unspecified outcome is retryable.
func batchError(be *pb.BatchError) error {
	err := fmt.Errorf("plugin send: %s", be.GetMessage())
	if be.GetUnclassified() {
		return err
	}
	after := wire.DurationFromProto(be.GetRetryAfter())
	switch wire.OutcomeFromProto(be.GetOutcome()) {
	case sdk.OutcomePermanent:
		return sdk.PermanentError(err, be.GetCode())
	case sdk.OutcomeSkipped:
		return sdk.SkippedError(err)
	case sdk.OutcomeRateLimited:
		return sdk.RateLimitedError(err, after)
	}
	return sdk.RetryableError(err, after)
}

// v1Client speaks herald.channel.v1 behind the v2 client interface. The two
// protocols have the same messages and field numbers; only the Outcome
// enum moved (v1 SENT=0 … PERMANENT=3, v2 UNSPECIFIED=0, SENT=1 …
// PERMANENT=4). Messages are converted by re-encoding them and shifting
// the outcomes of responses by one.
type v1Client struct {
	rpc pbv1.ChannelPluginClient
}

var _ pb.ChannelPluginClient = v1Client{}

func (c v1Client) Describe(ctx context.Context, in *pb.DescribeRequest, opts ...grpc.CallOption) (*pb.DescribeResponse, error) {
	in1, err := recode(in, &pbv1.DescribeRequest{})
	if err != nil {
		return nil, err
	}
	resp, err := c.rpc.Describe(ctx, in1, opts...)
	if err != nil {
		return nil, err
	}
	return recode(resp, &pb.DescribeResponse{})
}

func (c v1Client) Configure(ctx context.Context, in *pb.ConfigureRequest, opts ...grpc.CallOption) (*pb.ConfigureResponse, error) {
	in1, err := recode(in, &pbv1.ConfigureRequest{})
	if err != nil {
		return nil, err
	}
	resp, err := c.rpc.Configure(ctx, in1, opts...)
	if err != nil {
		return nil, err
	}
	return recode(resp, &pb.ConfigureResponse{})
}

func (c v1Client) Send(ctx context.Context, in *pb.SendRequest, opts ...grpc.CallOption) (*pb.SendResponse, error) {
	in1, err := recode(in, &pbv1.SendRequest{})
	if err != nil {
		return nil, err
	}
	resp, err := c.rpc.Send(ctx, in1, opts...)
	if err != nil {
		return nil, err
	}
	out, err := recode(resp, &pb.SendResponse{})
	if err != nil {
		return nil, err
	}
	// Same order, same length: recode kept every repeated entry.
	for i, r := range resp.GetResults() {
		out.Results[i].Outcome = outcomeV1ToV2(r.GetOutcome())
	}
	if be := resp.GetBatchError(); be != nil {
		out.BatchError.Outcome = outcomeV1ToV2(be.GetOutcome())
	}
	return out, nil
}

func (c v1Client) Health(ctx context.Context, in *pb.HealthRequest, opts ...grpc.CallOption) (*pb.HealthResponse, error) {
	in1, err := recode(in, &pbv1.HealthRequest{})
	if err != nil {
		return nil, err
	}
	resp, err := c.rpc.Health(ctx, in1, opts...)
	if err != nil {
		return nil, err
	}
	return recode(resp, &pb.HealthResponse{})
}

// outcomeV1ToV2 maps a protocol 1 outcome; values v1 does not define are
// unspecified (retryable).
func outcomeV1ToV2(o pbv1.Outcome) pb.Outcome {
	switch o {
	case pbv1.Outcome_OUTCOME_SENT:
		return pb.Outcome_OUTCOME_SENT
	case pbv1.Outcome_OUTCOME_RETRYABLE:
		return pb.Outcome_OUTCOME_RETRYABLE
	case pbv1.Outcome_OUTCOME_RATE_LIMITED:
		return pb.Outcome_OUTCOME_RATE_LIMITED
	case pbv1.Outcome_OUTCOME_PERMANENT:
		return pb.Outcome_OUTCOME_PERMANENT
	}
	return pb.Outcome_OUTCOME_UNSPECIFIED
}

// recode copies in into out through the wire encoding: the v1 and v2
// messages share their field numbers, and requests carry no outcome. It
// fails as a gRPC Internal error (which the caller reports like any other
// failed call) only on a message proto cannot encode.
func recode[T proto.Message](in proto.Message, out T) (T, error) {
	b, err := proto.Marshal(in)
	if err == nil {
		err = proto.Unmarshal(b, out)
	}
	if err != nil {
		return out, status.Errorf(codes.Internal, "protocol 1: convert %T: %v", in, err)
	}
	return out, nil
}
