package wire

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/heraldhq/herald/sdk/internal/contract"
	pb "github.com/heraldhq/herald/sdk/proto/herald/channel/v1"
)

var created = time.Date(2025, 3, 4, 5, 6, 7, 8, time.UTC)

func fullDelivery() contract.Delivery {
	return contract.Delivery{
		DeliveryID:     "d1",
		IdempotencyKey: "idem-1",
		TenantID:       "t1",
		EventID:        "e1",
		EventType:      "RESERVATION_REQUESTED",
		NotificationID: "n1",
		Channel:        "EMAIL",
		Severity:       "info",
		Attempt:        3,
		Recipient: contract.Recipient{
			UserID: "u1", UserType: "customer", Email: "a@example.org", Phone: "+39",
			Locale: "it-IT", TimeZone: "Europe/Rome", DeviceTokens: []string{"tok"},
			Attributes: map[string]string{"slack_user_id": "U1"},
		},
		Content: contract.Content{
			Subject: "s", Title: "t", Body: "b", HTML: "<p>b</p>", Data: json.RawMessage(`{"k":1}`),
		},
		CreatedAt: created,
	}
}

func TestDeliveryRoundTrip(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in contract.Delivery
	}{
		"zero":                {in: contract.Delivery{}},
		"full":                {in: fullDelivery()},
		"only ids":            {in: contract.Delivery{DeliveryID: "d", IdempotencyKey: "k"}},
		"recipient only addr": {in: contract.Delivery{Recipient: contract.Recipient{Email: "x@y"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := DeliveryFromProto(DeliveryToProto(tc.in))
			if diff := cmp.Diff(tc.in, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeliveryToProto(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in   contract.Delivery
		want *pb.Delivery
	}{
		"zero value has empty sub-messages and no timestamp": {
			in:   contract.Delivery{},
			want: &pb.Delivery{Recipient: &pb.Recipient{}, Content: &pb.Content{}},
		},
		"empty collections travel as absent": {
			in: contract.Delivery{Recipient: contract.Recipient{DeviceTokens: []string{}, Attributes: map[string]string{}},
				Content: contract.Content{Data: json.RawMessage{}}},
			want: &pb.Delivery{Recipient: &pb.Recipient{}, Content: &pb.Content{}},
		},
		"timestamp and attempt": {
			in:   contract.Delivery{Attempt: 2, CreatedAt: created},
			want: &pb.Delivery{Attempt: 2, CreatedAt: timestamppb.New(created), Recipient: &pb.Recipient{}, Content: &pb.Content{}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, DeliveryToProto(tc.in), protocmp.Transform()); diff != "" {
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
		"delivery":    {got: DeliveryFromProto(nil), want: contract.Delivery{}},
		"deliveries":  {got: DeliveriesFromProto(nil), want: []contract.Delivery(nil)},
		"nil entry":   {got: DeliveriesFromProto([]*pb.Delivery{nil}), want: []contract.Delivery{{}}},
		"recipient":   {got: RecipientFromProto(nil), want: contract.Recipient{}},
		"content":     {got: ContentFromProto(nil), want: contract.Content{}},
		"result":      {got: ResultFromProto(nil), want: contract.Result{}},
		"results":     {got: ResultsFromProto(nil), want: []contract.Result(nil)},
		"description": {got: DescriptionFromProto(nil), want: contract.Description{}},
		"field spec":  {got: FieldSpecFromProto(nil), want: contract.FieldSpec{}},
		"configure":   {got: ConfigureRequestFromProto(nil), want: contract.ConfigureRequest{}},
		"health":      {got: HealthFromProto(nil), want: contract.HealthReport{}},
		"config val":  {got: ConfigValueFromProto(nil), want: nil},
		"empty val":   {got: ConfigValueFromProto(&pb.ConfigValue{}), want: nil},
		"duration":    {got: DurationFromProto(nil), want: time.Duration(0)},
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
		in contract.Result
	}{
		"zero is sent":   {in: contract.Result{}},
		"sent":           {in: contract.Result{DeliveryID: "d", Outcome: contract.OutcomeSent, ProviderMessageID: "m"}},
		"retry no hint":  {in: contract.Result{DeliveryID: "d", Outcome: contract.OutcomeRetryable, Reason: "timeout"}},
		"retry hint":     {in: contract.Result{DeliveryID: "d", Outcome: contract.OutcomeRetryable, RetryAfter: 1500 * time.Millisecond}},
		"rate limited":   {in: contract.Result{DeliveryID: "d", Outcome: contract.OutcomeRateLimited, RetryAfter: time.Minute, Reason: "429"}},
		"permanent":      {in: contract.Result{DeliveryID: "d", Outcome: contract.OutcomePermanent, Reason: "bad address", Code: "550"}},
		"unclassified":   {in: contract.Result{DeliveryID: "d", Outcome: contract.OutcomeRetryable, Unclassified: true}},
		"large duration": {in: contract.Result{Outcome: contract.OutcomeRetryable, RetryAfter: 72 * time.Hour}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := ResultFromProto(ResultToProto(tc.in))
			if diff := cmp.Diff(tc.in, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOutcomeUnknownIsRetryable(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		got, want any
	}{
		"to proto":   {got: OutcomeToProto(contract.Outcome(42)), want: pb.Outcome_OUTCOME_RETRYABLE},
		"from proto": {got: OutcomeFromProto(pb.Outcome(42)), want: contract.OutcomeRetryable},
		"class":      {got: ClassFromProto(pb.Class(9)), want: contract.Persistent},
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
		in contract.Description
	}{
		"zero": {in: contract.Description{}},
		"full": {in: contract.Description{
			ChannelType: "EMAIL", Provider: "smtp", PluginVersion: "1.2.3", APIVersions: []int{1},
			UserTypes: []string{"customer"}, Class: contract.BestEffort, MaxBatch: 100,
			Config: []contract.FieldSpec{
				{Name: "host", Type: contract.FieldString, Required: true, Description: "SMTP host"},
				{Name: "mode", Type: contract.FieldString, Default: "tls", Enum: []string{"tls", "plain"}},
				{Name: "password", Type: contract.FieldString, Secret: true},
			},
			Capabilities: []string{"idempotency"}, SDKVersion: "1.0.0",
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := DescriptionFromProto(DescriptionToProto(tc.in))
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
		"map":           {in: map[string]any{}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pv, err := ConfigValueToProto(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ConfigValueToProto(%#v) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, ConfigValueFromProto(pv)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigureRequest(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in      contract.ConfigureRequest
		want    contract.ConfigureRequest
		wantErr string
	}{
		"zero":          {in: contract.ConfigureRequest{}, want: contract.ConfigureRequest{}},
		"empty map":     {in: contract.ConfigureRequest{Config: map[string]any{}}, want: contract.ConfigureRequest{}},
		"typed values":  {in: contract.ConfigureRequest{ProviderName: "p", Config: map[string]any{"port": 25, "tls": true, "timeout": time.Second}, HostCapabilities: []string{"x"}}, want: contract.ConfigureRequest{ProviderName: "p", Config: map[string]any{"port": 25, "tls": true, "timeout": time.Second}, HostCapabilities: []string{"x"}}},
		"bad value key": {in: contract.ConfigureRequest{Config: map[string]any{"nested": map[string]any{}}}, wantErr: `config "nested": unsupported config value type map[string]interface {}`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, err := ConfigureRequestToProto(tc.in)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, ConfigureRequestFromProto(p)); diff != "" {
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
			if diff := cmp.Diff(tc.want, DurationToProto(tc.in), protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestHealthRoundTrip(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in contract.HealthReport
	}{
		"zero":      {in: contract.HealthReport{}},
		"healthy":   {in: contract.HealthReport{Healthy: true, Message: "ok"}},
		"unhealthy": {in: contract.HealthReport{Message: "smtp down"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.in, HealthFromProto(HealthToProto(tc.in))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
