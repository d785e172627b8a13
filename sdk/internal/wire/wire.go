// Package wire converts between the SDK's hand-written types and the
// generated messages of herald.channel.v2 in the host's direction: the
// requests the host sends (Configure, Send) go to proto, the responses it
// receives (Describe, Send, Health) come from proto. Package sdk/host uses
// it; generated code stays at this layer, and no exported name of package
// sdk or sdk/host is a pb type.
//
// The plugin's direction (requests from proto, responses to proto) is in
// package sdk (wire.go), which cannot import this package because this
// package imports sdk for its types. sdk's wire_test.go checks the two
// halves against each other in round trips.
//
// Every ...FromProto function accepts nil and returns the zero value; every
// ...ToProto function returns a non-nil message. Zero durations and times
// travel as absent fields.
package wire

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/heraldhq/herald/sdk"
	pb "github.com/heraldhq/herald/sdk/internal/proto/herald/channel/v2"
)

// DescriptionFromProto converts a DescribeResponse.
func DescriptionFromProto(in *pb.DescribeResponse) sdk.Description {
	if in == nil {
		return sdk.Description{}
	}
	out := sdk.Description{
		ChannelType:   in.GetChannelType(),
		Provider:      in.GetProvider(),
		PluginVersion: in.GetPluginVersion(),
		UserTypes:     cloneStrings(in.GetUserTypes()),
		Class:         ClassFromProto(in.GetClass()),
		MaxBatch:      int(in.GetMaxBatch()),
		Capabilities:  cloneStrings(in.GetCapabilities()),
		SDKVersion:    in.GetSdkVersion(),
	}
	for _, v := range in.GetApiVersions() {
		out.APIVersions = append(out.APIVersions, int(v))
	}
	for _, f := range in.GetConfig() {
		out.Config = append(out.Config, FieldSpecFromProto(f))
	}
	return out
}

// ClassFromProto converts a Class; unknown values are Persistent.
func ClassFromProto(c pb.Class) sdk.Class {
	if c == pb.Class_CLASS_BEST_EFFORT {
		return sdk.BestEffort
	}
	return sdk.Persistent
}

// FieldSpecFromProto converts a FieldSpec.
func FieldSpecFromProto(in *pb.FieldSpec) sdk.FieldSpec {
	if in == nil {
		return sdk.FieldSpec{}
	}
	return sdk.FieldSpec{
		Name:        in.GetName(),
		Type:        sdk.FieldType(in.GetType()),
		Required:    in.GetRequired(),
		Secret:      in.GetSecret(),
		Default:     in.GetDefault(),
		Enum:        cloneStrings(in.GetEnum()),
		Description: in.GetDescription(),
	}
}

// ConfigureRequestToProto converts a ConfigureRequest. It fails when a
// config value has a type the protocol cannot carry, naming the key.
func ConfigureRequestToProto(r sdk.ConfigureRequest) (*pb.ConfigureRequest, error) {
	out := &pb.ConfigureRequest{
		ProviderName:     r.ProviderName,
		HostCapabilities: cloneStrings(r.HostCapabilities),
	}
	if len(r.Config) > 0 {
		out.Config = make(map[string]*pb.ConfigValue, len(r.Config))
		for k, v := range r.Config {
			pv, err := ConfigValueToProto(v)
			if err != nil {
				return nil, fmt.Errorf("config %q: %w", k, err)
			}
			out.Config[k] = pv
		}
	}
	return out, nil
}

// ConfigValueToProto converts one config value: strings, integers, bools,
// time.Duration, floats, lists of strings and maps of strings travel;
// anything else is an error.
func ConfigValueToProto(v any) (*pb.ConfigValue, error) {
	switch x := v.(type) {
	case string:
		return &pb.ConfigValue{Kind: &pb.ConfigValue_StringValue{StringValue: x}}, nil
	case bool:
		return &pb.ConfigValue{Kind: &pb.ConfigValue_BoolValue{BoolValue: x}}, nil
	case time.Duration:
		return &pb.ConfigValue{Kind: &pb.ConfigValue_DurationValue{DurationValue: durationpb.New(x)}}, nil
	case float32:
		return &pb.ConfigValue{Kind: &pb.ConfigValue_FloatValue{FloatValue: float64(x)}}, nil
	case float64:
		return &pb.ConfigValue{Kind: &pb.ConfigValue_FloatValue{FloatValue: x}}, nil
	case []string:
		return &pb.ConfigValue{Kind: &pb.ConfigValue_ListValue{ListValue: &pb.StringList{Values: cloneStrings(x)}}}, nil
	case []any:
		list := make([]string, 0, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("list item %d is %T, not a string", i, e)
			}
			list = append(list, s)
		}
		return &pb.ConfigValue{Kind: &pb.ConfigValue_ListValue{ListValue: &pb.StringList{Values: list}}}, nil
	case map[string]string:
		return &pb.ConfigValue{Kind: &pb.ConfigValue_MapValue{MapValue: &pb.StringMap{Values: maps.Clone(x)}}}, nil
	case map[string]any:
		m := make(map[string]string, len(x))
		for k, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("map entry %q is %T, not a string", k, e)
			}
			m[k] = s
		}
		return &pb.ConfigValue{Kind: &pb.ConfigValue_MapValue{MapValue: &pb.StringMap{Values: m}}}, nil
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return &pb.ConfigValue{Kind: &pb.ConfigValue_IntValue{IntValue: i}}, nil
		}
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("bad number %q", x.String())
		}
		return &pb.ConfigValue{Kind: &pb.ConfigValue_FloatValue{FloatValue: f}}, nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &pb.ConfigValue{Kind: &pb.ConfigValue_IntValue{IntValue: rv.Int()}}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u := rv.Uint()
		if u > math.MaxInt64 {
			return nil, fmt.Errorf("integer %d out of range", u)
		}
		return &pb.ConfigValue{Kind: &pb.ConfigValue_IntValue{IntValue: int64(u)}}, nil
	}
	return nil, fmt.Errorf("unsupported config value type %T", v)
}

// DeliveriesToProto converts a batch.
func DeliveriesToProto(batch []sdk.Delivery) []*pb.Delivery {
	if len(batch) == 0 {
		return nil
	}
	out := make([]*pb.Delivery, len(batch))
	for i := range batch {
		out[i] = DeliveryToProto(batch[i])
	}
	return out
}

// DeliveryToProto converts a Delivery.
func DeliveryToProto(d sdk.Delivery) *pb.Delivery {
	return &pb.Delivery{
		DeliveryId:     d.DeliveryID,
		IdempotencyKey: d.IdempotencyKey,
		TenantId:       d.TenantID,
		EventId:        d.EventID,
		EventType:      d.EventType,
		NotificationId: d.NotificationID,
		Channel:        d.Channel,
		Severity:       d.Severity,
		Attempt:        clampInt32(d.Attempt),
		Recipient:      recipientToProto(d.Recipient),
		Content:        contentToProto(d.Content),
		CreatedAt:      timeToProto(d.CreatedAt),
		Traceparent:    d.TraceParent,
		Tracestate:     d.TraceState,
	}
}

// recipientToProto converts a Recipient.
func recipientToProto(r sdk.Recipient) *pb.Recipient {
	out := &pb.Recipient{
		UserId:       r.UserID,
		UserType:     r.UserType,
		Email:        r.Email,
		Phone:        r.Phone,
		Locale:       r.Locale,
		TimeZone:     r.TimeZone,
		DeviceTokens: cloneStrings(r.DeviceTokens),
	}
	if len(r.Attributes) > 0 {
		out.Attributes = make(map[string]string, len(r.Attributes))
		for k, v := range r.Attributes {
			out.Attributes[k] = v
		}
	}
	for _, d := range r.Devices {
		out.Devices = append(out.Devices, &pb.Device{Kind: d.Kind, Token: d.Token, Endpoint: d.Endpoint, P256Dh: d.P256dh, Auth: d.Auth})
	}
	return out
}

// contentToProto converts a Content.
func contentToProto(c sdk.Content) *pb.Content {
	out := &pb.Content{Subject: c.Subject, Title: c.Title, Body: c.Body, Html: c.HTML}
	if len(c.Data) > 0 {
		out.Data = append([]byte(nil), c.Data...)
	}
	return out
}

// ResultsFromProto converts results; nil entries become zero results.
func ResultsFromProto(in []*pb.Result) []sdk.Result {
	if len(in) == 0 {
		return nil
	}
	out := make([]sdk.Result, len(in))
	for i, r := range in {
		out[i] = ResultFromProto(r)
	}
	return out
}

// ResultFromProto converts a Result.
func ResultFromProto(in *pb.Result) sdk.Result {
	if in == nil {
		return sdk.Result{}
	}
	return sdk.Result{
		DeliveryID:        in.GetDeliveryId(),
		Outcome:           OutcomeFromProto(in.GetOutcome()),
		ProviderMessageID: in.GetProviderMessageId(),
		RetryAfter:        DurationFromProto(in.GetRetryAfter()),
		Reason:            in.GetReason(),
		Code:              in.GetCode(),
		Unclassified:      in.GetUnclassified(),
		GoneDevices:       cloneStrings(in.GetGoneDevices()),
	}
}

// OutcomeFromProto converts an Outcome; unknown values are unspecified.
func OutcomeFromProto(o pb.Outcome) sdk.Outcome {
	switch o {
	case pb.Outcome_OUTCOME_SENT:
		return sdk.OutcomeSent
	case pb.Outcome_OUTCOME_RETRYABLE:
		return sdk.OutcomeRetryable
	case pb.Outcome_OUTCOME_RATE_LIMITED:
		return sdk.OutcomeRateLimited
	case pb.Outcome_OUTCOME_PERMANENT:
		return sdk.OutcomePermanent
	case pb.Outcome_OUTCOME_SKIPPED:
		return sdk.OutcomeSkipped
	}
	return sdk.OutcomeUnspecified
}

// HealthFromProto converts a HealthResponse.
func HealthFromProto(in *pb.HealthResponse) sdk.HealthResponse {
	if in == nil {
		return sdk.HealthResponse{}
	}
	return sdk.HealthResponse{Healthy: in.GetHealthy(), Message: in.GetMessage()}
}

// DurationFromProto converts a duration; nil becomes zero.
func DurationFromProto(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}

func timeToProto(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
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
