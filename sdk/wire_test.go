package sdk

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/heraldhq/herald/sdk/proto/herald/channel/v2"
)

var created = time.Date(2025, 3, 4, 5, 6, 7, 8, time.UTC)

func fullDelivery() Delivery {
	return Delivery{
		DeliveryID:     "d1",
		IdempotencyKey: "idem-1",
		TenantID:       "t1",
		EventID:        "e1",
		EventType:      "RESERVATION_REQUESTED",
		NotificationID: "n1",
		Channel:        "EMAIL",
		Severity:       "info",
		Attempt:        3,
		Recipient: Recipient{
			UserID: "u1", UserType: "customer", Email: "a@example.org", Phone: "+39",
			Locale: "it-IT", TimeZone: "Europe/Rome", DeviceTokens: []string{"tok"},
			Attributes: map[string]string{"slack_user_id": "U1"},
			Devices: []Device{{Kind: DeviceFCM, Token: "tok"}, {Kind: DeviceAPNs, Token: "abcd"},
				{Kind: DeviceWebPush, Token: "https://push.example/s/1", Endpoint: "https://push.example/s/1", P256dh: "BKey", Auth: "auth"}},
		},
		Content: Content{
			Subject: "s", Title: "t", Body: "b", HTML: "<p>b</p>", Data: json.RawMessage(`{"k":1}`),
		},
		CreatedAt:   created,
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		TraceState:  "vendor=x",
	}
}

func TestDeliveryRoundTrip(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in Delivery
	}{
		"zero":                {in: Delivery{}},
		"full":                {in: fullDelivery()},
		"only ids":            {in: Delivery{DeliveryID: "d", IdempotencyKey: "k"}},
		"recipient only addr": {in: Delivery{Recipient: Recipient{Email: "x@y"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := deliveryFromProto(deliveryToProto(tc.in))
			if diff := cmp.Diff(tc.in, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeliveryToProto(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in   Delivery
		want *pb.Delivery
	}{
		"zero value has empty sub-messages and no timestamp": {
			in:   Delivery{},
			want: &pb.Delivery{Recipient: &pb.Recipient{}, Content: &pb.Content{}},
		},
		"empty collections travel as absent": {
			in: Delivery{Recipient: Recipient{DeviceTokens: []string{}, Attributes: map[string]string{}, Devices: []Device{}},
				Content: Content{Data: json.RawMessage{}}},
			want: &pb.Delivery{Recipient: &pb.Recipient{}, Content: &pb.Content{}},
		},
		"timestamp and attempt": {
			in:   Delivery{Attempt: 2, CreatedAt: created},
			want: &pb.Delivery{Attempt: 2, CreatedAt: timestamppb.New(created), Recipient: &pb.Recipient{}, Content: &pb.Content{}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, deliveryToProto(tc.in), protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestFromProtoNil(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		got, want any
	}{
		"delivery":    {got: deliveryFromProto(nil), want: Delivery{}},
		"deliveries":  {got: deliveriesFromProto(nil), want: []Delivery(nil)},
		"nil entry":   {got: deliveriesFromProto([]*pb.Delivery{nil}), want: []Delivery{{}}},
		"recipient":   {got: recipientFromProto(nil), want: Recipient{}},
		"content":     {got: contentFromProto(nil), want: Content{}},
		"result":      {got: resultFromProto(nil), want: Result{}},
		"results":     {got: resultsFromProto(nil), want: []Result(nil)},
		"description": {got: descriptionFromProto(nil), want: Description{}},
		"field spec":  {got: fieldSpecFromProto(nil), want: FieldSpec{}},
		"configure":   {got: configureRequestFromProto(nil), want: ConfigureRequest{}},
		"health":      {got: healthFromProto(nil), want: HealthResponse{}},
		"config val":  {got: configValueFromProto(nil), want: nil},
		"empty val":   {got: configValueFromProto(&pb.ConfigValue{}), want: nil},
		"duration":    {got: durationFromProto(nil), want: time.Duration(0)},
		"time":        {got: timeFromProto(nil), want: time.Time{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, tc.got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestResultRoundTrip(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in Result
	}{
		"zero is sent":   {in: Result{}},
		"sent":           {in: Result{DeliveryID: "d", Outcome: OutcomeSent, ProviderMessageID: "m"}},
		"retry no hint":  {in: Result{DeliveryID: "d", Outcome: OutcomeRetryable, Reason: "timeout"}},
		"retry hint":     {in: Result{DeliveryID: "d", Outcome: OutcomeRetryable, RetryAfter: 1500 * time.Millisecond}},
		"rate limited":   {in: Result{DeliveryID: "d", Outcome: OutcomeRateLimited, RetryAfter: time.Minute, Reason: "429"}},
		"permanent":      {in: Result{DeliveryID: "d", Outcome: OutcomePermanent, Reason: "bad address", Code: "550"}},
		"unclassified":   {in: Result{DeliveryID: "d", Outcome: OutcomeRetryable, Unclassified: true}},
		"gone devices":   {in: Gone("d", "push: subscription gone", "https://push.example/s/1", "tok")},
		"large duration": {in: Result{Outcome: OutcomeRetryable, RetryAfter: 72 * time.Hour}},
		"unspecified":    {in: Result{DeliveryID: "d"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := resultFromProto(resultToProto(tc.in))
			if diff := cmp.Diff(tc.in, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOutcomeUnknownIsUnspecified(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		got, want any
	}{
		"to proto":               {got: outcomeToProto(Outcome(42)), want: pb.Outcome_OUTCOME_UNSPECIFIED},
		"from proto":             {got: outcomeFromProto(pb.Outcome(42)), want: OutcomeUnspecified},
		"zero to proto":          {got: outcomeToProto(Outcome(0)), want: pb.Outcome_OUTCOME_UNSPECIFIED},
		"zero from proto":        {got: outcomeFromProto(pb.Outcome(0)), want: OutcomeUnspecified},
		"sent is not zero":       {got: outcomeToProto(OutcomeSent), want: pb.Outcome_OUTCOME_SENT},
		"permanent from proto":   {got: outcomeFromProto(pb.Outcome_OUTCOME_PERMANENT), want: OutcomePermanent},
		"rate limited from wire": {got: outcomeFromProto(pb.Outcome_OUTCOME_RATE_LIMITED), want: OutcomeRateLimited},
		"class":                  {got: classFromProto(pb.Class(9)), want: Persistent},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, tc.got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDescriptionRoundTrip(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in Description
	}{
		"zero": {in: Description{}},
		"full": {in: Description{
			ChannelType: "EMAIL", Provider: "smtp", PluginVersion: "1.2.3", APIVersions: []int{1},
			UserTypes: []string{"customer"}, Class: BestEffort, MaxBatch: 100,
			Config: []FieldSpec{
				{Name: "host", Type: FieldString, Required: true, Description: "SMTP host"},
				{Name: "mode", Type: FieldString, Default: "tls", Enum: []string{"tls", "plain"}},
				{Name: "password", Type: FieldString, Secret: true},
			},
			Capabilities: []string{"idempotency"}, SDKVersion: "1.0.0",
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := descriptionFromProto(descriptionToProto(tc.in))
			if diff := cmp.Diff(tc.in, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigValues(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in      any
		want    any
		wantErr bool
	}{
		"string":        {in: "x", want: "x"},
		"empty string":  {in: "", want: ""},
		"int":           {in: 587, want: 587},
		"int64":         {in: int64(7), want: 7},
		"uint8":         {in: uint8(7), want: 7},
		"zero int":      {in: 0, want: 0},
		"bool false":    {in: false, want: false},
		"duration":      {in: 3 * time.Second, want: 3 * time.Second},
		"zero duration": {in: time.Duration(0), want: time.Duration(0)},
		"float":         {in: 1.5, want: 1.5},
		"list":          {in: []string{"a", "b"}, want: []string{"a", "b"}},
		"empty list":    {in: []string{}, want: []string{}},
		"nil list":      {in: []string(nil), want: []string{}},
		"any list":      {in: []any{"a"}, want: []string{"a"}},
		"json int":      {in: json.Number("12"), want: 12},
		"json float":    {in: json.Number("1.25"), want: 1.25},
		"bad any list":  {in: []any{1}, wantErr: true},
		"nil":           {in: nil, wantErr: true},
		"map":           {in: map[string]string{"a": "x"}, want: map[string]string{"a": "x"}},
		"empty map":     {in: map[string]any{}, want: map[string]string{}},
		"any map":       {in: map[string]any{"a": "x"}, want: map[string]string{"a": "x"}},
		"bad any map":   {in: map[string]any{"a": 1}, wantErr: true},
		"map of maps":   {in: map[string]map[string]string{}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pv, err := configValueToProto(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("configValueToProto(%#v) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, configValueFromProto(pv)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigureRequest(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in      ConfigureRequest
		want    ConfigureRequest
		wantErr string
	}{
		"zero":          {in: ConfigureRequest{}, want: ConfigureRequest{}},
		"empty map":     {in: ConfigureRequest{Config: map[string]any{}}, want: ConfigureRequest{}},
		"typed values":  {in: ConfigureRequest{ProviderName: "p", Config: map[string]any{"port": 25, "tls": true, "timeout": time.Second}, HostCapabilities: []string{"x"}}, want: ConfigureRequest{ProviderName: "p", Config: map[string]any{"port": 25, "tls": true, "timeout": time.Second}, HostCapabilities: []string{"x"}}},
		"map value":     {in: ConfigureRequest{Config: map[string]any{"hooks": map[string]any{"ops": "https://x"}}}, want: ConfigureRequest{Config: map[string]any{"hooks": map[string]string{"ops": "https://x"}}}},
		"bad value key": {in: ConfigureRequest{Config: map[string]any{"nested": map[string]any{"a": map[string]any{}}}}, wantErr: `config "nested": map entry "a" is map[string]interface {}, not a string`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, err := configureRequestToProto(tc.in)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, configureRequestFromProto(p)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDurationToProto(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in   time.Duration
		want *durationpb.Duration
	}{
		"zero is absent": {in: 0, want: nil},
		"second":         {in: time.Second, want: durationpb.New(time.Second)},
		"negative":       {in: -time.Second, want: durationpb.New(-time.Second)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, durationToProto(tc.in), protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestHealthRoundTrip(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in HealthResponse
	}{
		"zero":      {in: HealthResponse{}},
		"healthy":   {in: HealthResponse{Healthy: true, Message: "ok"}},
		"unhealthy": {in: HealthResponse{Message: "smtp down"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.in, healthFromProto(healthToProto(tc.in))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
