package sdk

// This file converts between the SDK's hand-written types and the generated
// protobuf messages of herald.channel.v2 in the plugin's direction: the
// requests a plugin receives come from proto, the responses it returns go
// to proto. The host's direction is package internal/wire (which imports
// this package, so this one cannot import it); wire_test.go checks the two
// halves against each other. Generated code stays at the wire layer: no
// exported name of the SDK is a pb type.
//
// Every ...FromProto function accepts nil and returns the zero value; every
// ...ToProto function returns a non-nil message. Zero durations and times
// travel as absent fields.

import (
	"encoding/json"
	"maps"
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/heraldhq/herald/sdk/internal/proto/herald/channel/v2"
)

// descriptionToProto converts a Description.
func descriptionToProto(d Description) *pb.DescribeResponse {
	out := &pb.DescribeResponse{
		ChannelType:   d.ChannelType,
		Provider:      d.Provider,
		PluginVersion: d.PluginVersion,
		UserTypes:     cloneStrings(d.UserTypes),
		Class:         classToProto(d.Class),
		MaxBatch:      clampInt32(d.MaxBatch),
		Capabilities:  cloneStrings(d.Capabilities),
		SdkVersion:    d.SDKVersion,
	}
	for _, v := range d.APIVersions {
		out.ApiVersions = append(out.ApiVersions, clampInt32(v))
	}
	for _, f := range d.Config {
		out.Config = append(out.Config, fieldSpecToProto(f))
	}
	return out
}

// classToProto converts a Class.
func classToProto(c Class) pb.Class {
	if c == BestEffort {
		return pb.Class_CLASS_BEST_EFFORT
	}
	return pb.Class_CLASS_PERSISTENT
}

// fieldSpecToProto converts a FieldSpec.
func fieldSpecToProto(f FieldSpec) *pb.FieldSpec {
	return &pb.FieldSpec{
		Name:        f.Name,
		Type:        string(f.Type),
		Required:    f.Required,
		Secret:      f.Secret,
		Default:     f.Default,
		Enum:        cloneStrings(f.Enum),
		Description: f.Description,
	}
}

// configureRequestFromProto converts a ConfigureRequest.
func configureRequestFromProto(in *pb.ConfigureRequest) ConfigureRequest {
	if in == nil {
		return ConfigureRequest{}
	}
	out := ConfigureRequest{
		ProviderName:     in.GetProviderName(),
		HostCapabilities: cloneStrings(in.GetHostCapabilities()),
	}
	if len(in.GetConfig()) > 0 {
		out.Config = make(map[string]any, len(in.GetConfig()))
		for k, v := range in.GetConfig() {
			out.Config[k] = configValueFromProto(v)
		}
	}
	return out
}

// configValueFromProto converts one config value to string, int, bool,
// time.Duration, float64, []string or map[string]string; nil and an empty value become nil.
func configValueFromProto(in *pb.ConfigValue) any {
	switch k := in.GetKind().(type) {
	case *pb.ConfigValue_StringValue:
		return k.StringValue
	case *pb.ConfigValue_IntValue:
		return int(k.IntValue)
	case *pb.ConfigValue_BoolValue:
		return k.BoolValue
	case *pb.ConfigValue_DurationValue:
		return k.DurationValue.AsDuration()
	case *pb.ConfigValue_FloatValue:
		return k.FloatValue
	case *pb.ConfigValue_ListValue:
		return cloneStringsNonNil(k.ListValue.GetValues())
	case *pb.ConfigValue_MapValue:
		m := make(map[string]string, len(k.MapValue.GetValues()))
		maps.Copy(m, k.MapValue.GetValues())
		return m
	}
	return nil
}

// deliveriesFromProto converts a batch; nil entries become zero deliveries.
func deliveriesFromProto(in []*pb.Delivery) []Delivery {
	if len(in) == 0 {
		return nil
	}
	out := make([]Delivery, len(in))
	for i, d := range in {
		out[i] = deliveryFromProto(d)
	}
	return out
}

// deliveryFromProto converts a Delivery.
func deliveryFromProto(in *pb.Delivery) Delivery {
	if in == nil {
		return Delivery{}
	}
	return Delivery{
		DeliveryID:     in.GetDeliveryId(),
		IdempotencyKey: in.GetIdempotencyKey(),
		TenantID:       in.GetTenantId(),
		EventID:        in.GetEventId(),
		EventType:      in.GetEventType(),
		NotificationID: in.GetNotificationId(),
		Channel:        in.GetChannel(),
		Severity:       in.GetSeverity(),
		Attempt:        int(in.GetAttempt()),
		Recipient:      recipientFromProto(in.GetRecipient()),
		Content:        contentFromProto(in.GetContent()),
		CreatedAt:      timeFromProto(in.GetCreatedAt()),
		TraceParent:    in.GetTraceparent(),
		TraceState:     in.GetTracestate(),
	}
}

// recipientFromProto converts a Recipient.
func recipientFromProto(in *pb.Recipient) Recipient {
	if in == nil {
		return Recipient{}
	}
	out := Recipient{
		UserID:       in.GetUserId(),
		UserType:     in.GetUserType(),
		Email:        in.GetEmail(),
		Phone:        in.GetPhone(),
		Locale:       in.GetLocale(),
		TimeZone:     in.GetTimeZone(),
		DeviceTokens: cloneStrings(in.GetDeviceTokens()),
	}
	if len(in.GetAttributes()) > 0 {
		out.Attributes = make(map[string]string, len(in.GetAttributes()))
		for k, v := range in.GetAttributes() {
			out.Attributes[k] = v
		}
	}
	for _, d := range in.GetDevices() {
		out.Devices = append(out.Devices, Device{Kind: d.GetKind(), Token: d.GetToken(), Endpoint: d.GetEndpoint(), P256dh: d.GetP256Dh(), Auth: d.GetAuth()})
	}
	return out
}

// contentFromProto converts a Content.
func contentFromProto(in *pb.Content) Content {
	if in == nil {
		return Content{}
	}
	out := Content{Subject: in.GetSubject(), Title: in.GetTitle(), Body: in.GetBody(), HTML: in.GetHtml()}
	if len(in.GetData()) > 0 {
		out.Data = json.RawMessage(append([]byte(nil), in.GetData()...))
	}
	return out
}

// resultsToProto converts results.
func resultsToProto(rs []Result) []*pb.Result {
	if len(rs) == 0 {
		return nil
	}
	out := make([]*pb.Result, len(rs))
	for i := range rs {
		out[i] = resultToProto(rs[i])
	}
	return out
}

// resultToProto converts a Result.
func resultToProto(r Result) *pb.Result {
	return &pb.Result{
		DeliveryId:        r.DeliveryID,
		Outcome:           outcomeToProto(r.Outcome),
		ProviderMessageId: r.ProviderMessageID,
		RetryAfter:        durationToProto(r.RetryAfter),
		Reason:            r.Reason,
		Code:              r.Code,
		Unclassified:      r.Unclassified,
		GoneDevices:       cloneStrings(r.GoneDevices),
	}
}

// outcomeToProto converts an Outcome; values it does not know travel as
// unspecified, which the receiver treats as retryable.
func outcomeToProto(o Outcome) pb.Outcome {
	switch o {
	case OutcomeSent:
		return pb.Outcome_OUTCOME_SENT
	case OutcomeRetryable:
		return pb.Outcome_OUTCOME_RETRYABLE
	case OutcomeRateLimited:
		return pb.Outcome_OUTCOME_RATE_LIMITED
	case OutcomePermanent:
		return pb.Outcome_OUTCOME_PERMANENT
	case OutcomeSkipped:
		return pb.Outcome_OUTCOME_SKIPPED
	}
	return pb.Outcome_OUTCOME_UNSPECIFIED
}

// healthToProto converts a HealthResponse.
func healthToProto(h HealthResponse) *pb.HealthResponse {
	return &pb.HealthResponse{Healthy: h.Healthy, Message: h.Message}
}

// durationToProto converts a duration; zero becomes nil.
func durationToProto(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

func timeFromProto(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func clampInt32(v int) int32 {
	switch {
	case v > math.MaxInt32:
		return math.MaxInt32
	case v < math.MinInt32:
		return math.MinInt32
	}
	return int32(v)
}

func cloneStrings(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	return append([]string(nil), in...)
}

func cloneStringsNonNil(in []string) []string {
	return append([]string{}, in...)
}
