// Package wire converts between the SDK's hand-written types and the
// generated protobuf messages of herald.channel.v1. Generated code stays at
// the wire layer: nothing outside sdk sees a pb type.
//
// Every FromProto function accepts nil and returns the zero value; every
// ToProto function returns a non-nil message. Zero durations and times travel
// as absent fields.
package wire

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/heraldhq/herald/sdk/internal/contract"
	pb "github.com/heraldhq/herald/sdk/proto/herald/channel/v1"
)

// DescriptionToProto converts a Description.
func DescriptionToProto(d contract.Description) *pb.DescribeResponse {
	out := &pb.DescribeResponse{
		ChannelType:   d.ChannelType,
		Provider:      d.Provider,
		PluginVersion: d.PluginVersion,
		UserTypes:     cloneStrings(d.UserTypes),
		Class:         ClassToProto(d.Class),
		MaxBatch:      clampInt32(d.MaxBatch),
		Capabilities:  cloneStrings(d.Capabilities),
		SdkVersion:    d.SDKVersion,
	}
	for _, v := range d.APIVersions {
		out.ApiVersions = append(out.ApiVersions, clampInt32(v))
	}
	for _, f := range d.Config {
		out.Config = append(out.Config, FieldSpecToProto(f))
	}
	return out
}

// DescriptionFromProto converts a DescribeResponse.
func DescriptionFromProto(in *pb.DescribeResponse) contract.Description {
	if in == nil {
		return contract.Description{}
	}
	out := contract.Description{
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

// ClassToProto converts a Class.
func ClassToProto(c contract.Class) pb.Class {
	if c == contract.BestEffort {
		return pb.Class_CLASS_BEST_EFFORT
	}
	return pb.Class_CLASS_PERSISTENT
}

// ClassFromProto converts a Class; unknown values are Persistent.
func ClassFromProto(c pb.Class) contract.Class {
	if c == pb.Class_CLASS_BEST_EFFORT {
		return contract.BestEffort
	}
	return contract.Persistent
}

// FieldSpecToProto converts a FieldSpec.
func FieldSpecToProto(f contract.FieldSpec) *pb.FieldSpec {
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

// FieldSpecFromProto converts a FieldSpec.
func FieldSpecFromProto(in *pb.FieldSpec) contract.FieldSpec {
	if in == nil {
		return contract.FieldSpec{}
	}
	return contract.FieldSpec{
		Name:        in.GetName(),
		Type:        contract.FieldType(in.GetType()),
		Required:    in.GetRequired(),
		Secret:      in.GetSecret(),
		Default:     in.GetDefault(),
		Enum:        cloneStrings(in.GetEnum()),
		Description: in.GetDescription(),
	}
}

// ConfigureRequestToProto converts a ConfigureRequest. It fails when a config
// value has a type the protocol cannot carry, naming the key.
func ConfigureRequestToProto(r contract.ConfigureRequest) (*pb.ConfigureRequest, error) {
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

// ConfigureRequestFromProto converts a ConfigureRequest.
func ConfigureRequestFromProto(in *pb.ConfigureRequest) contract.ConfigureRequest {
	if in == nil {
		return contract.ConfigureRequest{}
	}
	out := contract.ConfigureRequest{
		ProviderName:     in.GetProviderName(),
		HostCapabilities: cloneStrings(in.GetHostCapabilities()),
	}
	if len(in.GetConfig()) > 0 {
		out.Config = make(map[string]any, len(in.GetConfig()))
		for k, v := range in.GetConfig() {
			out.Config[k] = ConfigValueFromProto(v)
		}
	}
	return out
}

// ConfigValueToProto converts one config value: strings, integers, bools,
// time.Duration, floats and lists of strings travel; anything else is an
// error.
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

// ConfigValueFromProto converts one config value to string, int, bool,
// time.Duration, float64 or []string; nil and an empty value become nil.
func ConfigValueFromProto(in *pb.ConfigValue) any {
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
	}
	return nil
}

// DeliveriesToProto converts a batch.
func DeliveriesToProto(batch []contract.Delivery) []*pb.Delivery {
	if len(batch) == 0 {
		return nil
	}
	out := make([]*pb.Delivery, len(batch))
	for i := range batch {
		out[i] = DeliveryToProto(batch[i])
	}
	return out
}

// DeliveriesFromProto converts a batch; nil entries become zero deliveries.
func DeliveriesFromProto(in []*pb.Delivery) []contract.Delivery {
	if len(in) == 0 {
		return nil
	}
	out := make([]contract.Delivery, len(in))
	for i, d := range in {
		out[i] = DeliveryFromProto(d)
	}
	return out
}

// DeliveryToProto converts a Delivery.
func DeliveryToProto(d contract.Delivery) *pb.Delivery {
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
		Recipient:      RecipientToProto(d.Recipient),
		Content:        ContentToProto(d.Content),
		CreatedAt:      timeToProto(d.CreatedAt),
	}
}

// DeliveryFromProto converts a Delivery.
func DeliveryFromProto(in *pb.Delivery) contract.Delivery {
	if in == nil {
		return contract.Delivery{}
	}
	return contract.Delivery{
		DeliveryID:     in.GetDeliveryId(),
		IdempotencyKey: in.GetIdempotencyKey(),
		TenantID:       in.GetTenantId(),
		EventID:        in.GetEventId(),
		EventType:      in.GetEventType(),
		NotificationID: in.GetNotificationId(),
		Channel:        in.GetChannel(),
		Severity:       in.GetSeverity(),
		Attempt:        int(in.GetAttempt()),
		Recipient:      RecipientFromProto(in.GetRecipient()),
		Content:        ContentFromProto(in.GetContent()),
		CreatedAt:      timeFromProto(in.GetCreatedAt()),
	}
}

// RecipientToProto converts a Recipient.
func RecipientToProto(r contract.Recipient) *pb.Recipient {
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
	return out
}

// RecipientFromProto converts a Recipient.
func RecipientFromProto(in *pb.Recipient) contract.Recipient {
	if in == nil {
		return contract.Recipient{}
	}
	out := contract.Recipient{
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
	return out
}

// ContentToProto converts a Content.
func ContentToProto(c contract.Content) *pb.Content {
	out := &pb.Content{Subject: c.Subject, Title: c.Title, Body: c.Body, Html: c.HTML}
	if len(c.Data) > 0 {
		out.Data = append([]byte(nil), c.Data...)
	}
	return out
}

// ContentFromProto converts a Content.
func ContentFromProto(in *pb.Content) contract.Content {
	if in == nil {
		return contract.Content{}
	}
	out := contract.Content{Subject: in.GetSubject(), Title: in.GetTitle(), Body: in.GetBody(), HTML: in.GetHtml()}
	if len(in.GetData()) > 0 {
		out.Data = json.RawMessage(append([]byte(nil), in.GetData()...))
	}
	return out
}

// ResultsToProto converts results.
func ResultsToProto(rs []contract.Result) []*pb.Result {
	if len(rs) == 0 {
		return nil
	}
	out := make([]*pb.Result, len(rs))
	for i := range rs {
		out[i] = ResultToProto(rs[i])
	}
	return out
}

// ResultsFromProto converts results; nil entries become zero results.
func ResultsFromProto(in []*pb.Result) []contract.Result {
	if len(in) == 0 {
		return nil
	}
	out := make([]contract.Result, len(in))
	for i, r := range in {
		out[i] = ResultFromProto(r)
	}
	return out
}

// ResultToProto converts a Result.
func ResultToProto(r contract.Result) *pb.Result {
	return &pb.Result{
		DeliveryId:        r.DeliveryID,
		Outcome:           OutcomeToProto(r.Outcome),
		ProviderMessageId: r.ProviderMessageID,
		RetryAfter:        DurationToProto(r.RetryAfter),
		Reason:            r.Reason,
		Code:              r.Code,
		Unclassified:      r.Unclassified,
	}
}

// ResultFromProto converts a Result.
func ResultFromProto(in *pb.Result) contract.Result {
	if in == nil {
		return contract.Result{}
	}
	return contract.Result{
		DeliveryID:        in.GetDeliveryId(),
		Outcome:           OutcomeFromProto(in.GetOutcome()),
		ProviderMessageID: in.GetProviderMessageId(),
		RetryAfter:        DurationFromProto(in.GetRetryAfter()),
		Reason:            in.GetReason(),
		Code:              in.GetCode(),
		Unclassified:      in.GetUnclassified(),
	}
}

// OutcomeToProto converts an Outcome; unknown values become retryable, the
// safe reading of an outcome nobody understands.
func OutcomeToProto(o contract.Outcome) pb.Outcome {
	switch o {
	case contract.OutcomeSent:
		return pb.Outcome_OUTCOME_SENT
	case contract.OutcomeRateLimited:
		return pb.Outcome_OUTCOME_RATE_LIMITED
	case contract.OutcomePermanent:
		return pb.Outcome_OUTCOME_PERMANENT
	}
	return pb.Outcome_OUTCOME_RETRYABLE
}

// OutcomeFromProto converts an Outcome; unknown values become retryable.
func OutcomeFromProto(o pb.Outcome) contract.Outcome {
	switch o {
	case pb.Outcome_OUTCOME_SENT:
		return contract.OutcomeSent
	case pb.Outcome_OUTCOME_RATE_LIMITED:
		return contract.OutcomeRateLimited
	case pb.Outcome_OUTCOME_PERMANENT:
		return contract.OutcomePermanent
	}
	return contract.OutcomeRetryable
}

// HealthToProto converts a HealthReport.
func HealthToProto(h contract.HealthReport) *pb.HealthResponse {
	return &pb.HealthResponse{Healthy: h.Healthy, Message: h.Message}
}

// HealthFromProto converts a HealthResponse.
func HealthFromProto(in *pb.HealthResponse) contract.HealthReport {
	if in == nil {
		return contract.HealthReport{}
	}
	return contract.HealthReport{Healthy: in.GetHealthy(), Message: in.GetMessage()}
}

// DurationToProto converts a duration; zero becomes nil.
func DurationToProto(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
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
