package sdk

// This file converts between the SDK's hand-written types and the generated
// protobuf messages of herald.channel.v2. Generated code stays at the wire
// layer: no exported name of the SDK is a pb type.
//
// Every ...FromProto function accepts nil and returns the zero value; every
// ...ToProto function returns a non-nil message. Zero durations and times
// travel as absent fields.

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/heraldhq/herald/sdk/proto/herald/channel/v2"
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

// descriptionFromProto converts a DescribeResponse.
func descriptionFromProto(in *pb.DescribeResponse) Description {
	if in == nil {
		return Description{}
	}
	out := Description{
		ChannelType:   in.GetChannelType(),
		Provider:      in.GetProvider(),
		PluginVersion: in.GetPluginVersion(),
		UserTypes:     cloneStrings(in.GetUserTypes()),
		Class:         classFromProto(in.GetClass()),
		MaxBatch:      int(in.GetMaxBatch()),
		Capabilities:  cloneStrings(in.GetCapabilities()),
		SDKVersion:    in.GetSdkVersion(),
	}
	for _, v := range in.GetApiVersions() {
		out.APIVersions = append(out.APIVersions, int(v))
	}
	for _, f := range in.GetConfig() {
		out.Config = append(out.Config, fieldSpecFromProto(f))
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

// classFromProto converts a Class; unknown values are Persistent.
func classFromProto(c pb.Class) Class {
	if c == pb.Class_CLASS_BEST_EFFORT {
		return BestEffort
	}
	return Persistent
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

// fieldSpecFromProto converts a FieldSpec.
func fieldSpecFromProto(in *pb.FieldSpec) FieldSpec {
	if in == nil {
		return FieldSpec{}
	}
	return FieldSpec{
		Name:        in.GetName(),
		Type:        FieldType(in.GetType()),
		Required:    in.GetRequired(),
		Secret:      in.GetSecret(),
		Default:     in.GetDefault(),
		Enum:        cloneStrings(in.GetEnum()),
		Description: in.GetDescription(),
	}
}

// configureRequestToProto converts a ConfigureRequest. It fails when a config
// value has a type the protocol cannot carry, naming the key.
func configureRequestToProto(r ConfigureRequest) (*pb.ConfigureRequest, error) {
	out := &pb.ConfigureRequest{
		ProviderName:     r.ProviderName,
		HostCapabilities: cloneStrings(r.HostCapabilities),
	}
	if len(r.Config) > 0 {
		out.Config = make(map[string]*pb.ConfigValue, len(r.Config))
		for k, v := range r.Config {
			pv, err := configValueToProto(v)
			if err != nil {
				return nil, fmt.Errorf("config %q: %w", k, err)
			}
			out.Config[k] = pv
		}
	}
	return out, nil
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

// configValueToProto converts one config value: strings, integers, bools,
// time.Duration, floats, lists of strings and maps of strings travel; anything else is an
// error.
func configValueToProto(v any) (*pb.ConfigValue, error) {
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

// deliveriesToProto converts a batch.
func deliveriesToProto(batch []Delivery) []*pb.Delivery {
	if len(batch) == 0 {
		return nil
	}
	out := make([]*pb.Delivery, len(batch))
	for i := range batch {
		out[i] = deliveryToProto(batch[i])
	}
	return out
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

// deliveryToProto converts a Delivery.
func deliveryToProto(d Delivery) *pb.Delivery {
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

// recipientToProto converts a Recipient.
func recipientToProto(r Recipient) *pb.Recipient {
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

// contentToProto converts a Content.
func contentToProto(c Content) *pb.Content {
	out := &pb.Content{Subject: c.Subject, Title: c.Title, Body: c.Body, Html: c.HTML}
	if len(c.Data) > 0 {
		out.Data = append([]byte(nil), c.Data...)
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

// resultsFromProto converts results; nil entries become zero results.
func resultsFromProto(in []*pb.Result) []Result {
	if len(in) == 0 {
		return nil
	}
	out := make([]Result, len(in))
	for i, r := range in {
		out[i] = resultFromProto(r)
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

// resultFromProto converts a Result.
func resultFromProto(in *pb.Result) Result {
	if in == nil {
		return Result{}
	}
	return Result{
		DeliveryID:        in.GetDeliveryId(),
		Outcome:           outcomeFromProto(in.GetOutcome()),
		ProviderMessageID: in.GetProviderMessageId(),
		RetryAfter:        durationFromProto(in.GetRetryAfter()),
		Reason:            in.GetReason(),
		Code:              in.GetCode(),
		Unclassified:      in.GetUnclassified(),
		GoneDevices:       cloneStrings(in.GetGoneDevices()),
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
	}
	return pb.Outcome_OUTCOME_UNSPECIFIED
}

// outcomeFromProto converts an Outcome; unknown values are unspecified.
func outcomeFromProto(o pb.Outcome) Outcome {
	switch o {
	case pb.Outcome_OUTCOME_SENT:
		return OutcomeSent
	case pb.Outcome_OUTCOME_RETRYABLE:
		return OutcomeRetryable
	case pb.Outcome_OUTCOME_RATE_LIMITED:
		return OutcomeRateLimited
	case pb.Outcome_OUTCOME_PERMANENT:
		return OutcomePermanent
	}
	return OutcomeUnspecified
}

// healthToProto converts a HealthResponse.
func healthToProto(h HealthResponse) *pb.HealthResponse {
	return &pb.HealthResponse{Healthy: h.Healthy, Message: h.Message}
}

// healthFromProto converts a HealthResponse.
func healthFromProto(in *pb.HealthResponse) HealthResponse {
	if in == nil {
		return HealthResponse{}
	}
	return HealthResponse{Healthy: in.GetHealthy(), Message: in.GetMessage()}
}

// durationToProto converts a duration; zero becomes nil.
func durationToProto(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// durationFromProto converts a duration; nil becomes zero.
func durationFromProto(d *durationpb.Duration) time.Duration {
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
