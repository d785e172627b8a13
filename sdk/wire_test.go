package sdk_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/heraldhq/herald/sdk"
	pb "github.com/heraldhq/herald/sdk/internal/proto/herald/channel/v2"
	"github.com/heraldhq/herald/sdk/internal/wire"
)

// These tests check the plugin side's converters (package sdk, exported
// to this test by export_test.go) against the host side's (internal/wire):
// a round trip goes out through one and back through the other, as a
// message does.

var created = time.Date(2025, 3, 4, 5, 6, 7, 8, time.UTC)

func fullDelivery() sdk.Delivery {
	return sdk.Delivery{
		DeliveryID:     "d1",
		IdempotencyKey: "idem-1",
		TenantID:       "t1",
		EventID:        "e1",
		EventType:      "RESERVATION_REQUESTED",
		NotificationID: "n1",
		Channel:        "EMAIL",
		Severity:       "info",
		Attempt:        3,
		Recipient: sdk.Recipient{
			UserID: "u1", UserType: "customer", Email: "a@example.org", Phone: "+39",
			Locale: "it-IT", TimeZone: "Europe/Rome", DeviceTokens: []string{"tok"},
			Attributes: map[string]string{"slack_user_id": "U1"},
			Devices: []sdk.Device{{Kind: sdk.DeviceFCM, Token: "tok"}, {Kind: sdk.DeviceAPNs, Token: "abcd"},
				{Kind: sdk.DeviceWebPush, Token: "https://push.example/s/1", Endpoint: "https://push.example/s/1", P256dh: "BKey", Auth: "auth"}},
		},
		Content: sdk.Content{
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
		in sdk.Delivery
	}{
		"zero":                {in: sdk.Delivery{}},
		"full":                {in: fullDelivery()},
		"only ids":            {in: sdk.Delivery{DeliveryID: "d", IdempotencyKey: "k"}},
		"recipient only addr": {in: sdk.Delivery{Recipient: sdk.Recipient{Email: "x@y"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := sdk.DeliveryFromProto(wire.DeliveryToProto(tc.in))
			if diff := cmp.Diff(tc.in, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeliveryToProto(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in   sdk.Delivery
		want *pb.Delivery
	}{
		"zero value has empty sub-messages and no timestamp": {
			in:   sdk.Delivery{},
			want: &pb.Delivery{Recipient: &pb.Recipient{}, Content: &pb.Content{}},
		},
		"empty collections travel as absent": {
			in: sdk.Delivery{Recipient: sdk.Recipient{DeviceTokens: []string{}, Attributes: map[string]string{}, Devices: []sdk.Device{}},
				Content: sdk.Content{Data: json.RawMessage{}}},
			want: &pb.Delivery{Recipient: &pb.Recipient{}, Content: &pb.Content{}},
		},
		"timestamp and attempt": {
			in:   sdk.Delivery{Attempt: 2, CreatedAt: created},
			want: &pb.Delivery{Attempt: 2, CreatedAt: timestamppb.New(created), Recipient: &pb.Recipient{}, Content: &pb.Content{}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, wire.DeliveryToProto(tc.in), protocmp.Transform()); diff != "" {
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
		"delivery":    {got: sdk.DeliveryFromProto(nil), want: sdk.Delivery{}},
		"deliveries":  {got: sdk.DeliveriesFromProto(nil), want: []sdk.Delivery(nil)},
		"nil entry":   {got: sdk.DeliveriesFromProto([]*pb.Delivery{nil}), want: []sdk.Delivery{{}}},
		"recipient":   {got: sdk.RecipientFromProto(nil), want: sdk.Recipient{}},
		"content":     {got: sdk.ContentFromProto(nil), want: sdk.Content{}},
		"result":      {got: wire.ResultFromProto(nil), want: sdk.Result{}},
		"results":     {got: wire.ResultsFromProto(nil), want: []sdk.Result(nil)},
		"description": {got: wire.DescriptionFromProto(nil), want: sdk.Description{}},
		"field spec":  {got: wire.FieldSpecFromProto(nil), want: sdk.FieldSpec{}},
		"configure":   {got: sdk.ConfigureRequestFromProto(nil), want: sdk.ConfigureRequest{}},
		"health":      {got: wire.HealthFromProto(nil), want: sdk.HealthResponse{}},
		"config val":  {got: sdk.ConfigValueFromProto(nil), want: nil},
		"empty val":   {got: sdk.ConfigValueFromProto(&pb.ConfigValue{}), want: nil},
		"duration":    {got: wire.DurationFromProto(nil), want: time.Duration(0)},
		"time":        {got: sdk.TimeFromProto(nil), want: time.Time{}},
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
		in sdk.Result
	}{
		"zero is sent":   {in: sdk.Result{}},
		"sent":           {in: sdk.Result{DeliveryID: "d", Outcome: sdk.OutcomeSent, ProviderMessageID: "m"}},
		"retry no hint":  {in: sdk.Result{DeliveryID: "d", Outcome: sdk.OutcomeRetryable, Reason: "timeout"}},
		"retry hint":     {in: sdk.Result{DeliveryID: "d", Outcome: sdk.OutcomeRetryable, RetryAfter: 1500 * time.Millisecond}},
		"rate limited":   {in: sdk.Result{DeliveryID: "d", Outcome: sdk.OutcomeRateLimited, RetryAfter: time.Minute, Reason: "429"}},
		"permanent":      {in: sdk.Result{DeliveryID: "d", Outcome: sdk.OutcomePermanent, Reason: "bad address", Code: "550"}},
		"skipped":        {in: sdk.Skipped("d", "offline")},
		"unclassified":   {in: sdk.Result{DeliveryID: "d", Outcome: sdk.OutcomeRetryable, Unclassified: true}},
		"gone devices":   {in: sdk.Gone("d", "push: subscription gone", "https://push.example/s/1", "tok")},
		"large duration": {in: sdk.Result{Outcome: sdk.OutcomeRetryable, RetryAfter: 72 * time.Hour}},
		"unspecified":    {in: sdk.Result{DeliveryID: "d"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := wire.ResultFromProto(sdk.ResultToProto(tc.in))
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
		"to proto":               {got: sdk.OutcomeToProto(sdk.Outcome(42)), want: pb.Outcome_OUTCOME_UNSPECIFIED},
		"from proto":             {got: wire.OutcomeFromProto(pb.Outcome(42)), want: sdk.OutcomeUnspecified},
		"zero to proto":          {got: sdk.OutcomeToProto(sdk.Outcome(0)), want: pb.Outcome_OUTCOME_UNSPECIFIED},
		"zero from proto":        {got: wire.OutcomeFromProto(pb.Outcome(0)), want: sdk.OutcomeUnspecified},
		"sent is not zero":       {got: sdk.OutcomeToProto(sdk.OutcomeSent), want: pb.Outcome_OUTCOME_SENT},
		"permanent from proto":   {got: wire.OutcomeFromProto(pb.Outcome_OUTCOME_PERMANENT), want: sdk.OutcomePermanent},
		"rate limited from wire": {got: wire.OutcomeFromProto(pb.Outcome_OUTCOME_RATE_LIMITED), want: sdk.OutcomeRateLimited},
		"class":                  {got: wire.ClassFromProto(pb.Class(9)), want: sdk.Persistent},
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
		in sdk.Description
	}{
		"zero": {in: sdk.Description{}},
		"full": {in: sdk.Description{
			ChannelType: "EMAIL", Provider: "smtp", PluginVersion: "1.2.3", APIVersions: []int{1},
			UserTypes: []string{"customer"}, Class: sdk.BestEffort, MaxBatch: 100,
			Config: []sdk.FieldSpec{
				{Name: "host", Type: sdk.FieldString, Required: true, Description: "SMTP host"},
				{Name: "mode", Type: sdk.FieldString, Default: "tls", Enum: []string{"tls", "plain"}},
				{Name: "password", Type: sdk.FieldString, Secret: true},
			},
			Capabilities: []string{"idempotency"}, SDKVersion: "1.0.0",
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := wire.DescriptionFromProto(sdk.DescriptionToProto(tc.in))
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
			pv, err := wire.ConfigValueToProto(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("wire.ConfigValueToProto(%#v) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, sdk.ConfigValueFromProto(pv)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigureRequest(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in      sdk.ConfigureRequest
		want    sdk.ConfigureRequest
		wantErr string
	}{
		"zero":          {in: sdk.ConfigureRequest{}, want: sdk.ConfigureRequest{}},
		"empty map":     {in: sdk.ConfigureRequest{Config: map[string]any{}}, want: sdk.ConfigureRequest{}},
		"typed values":  {in: sdk.ConfigureRequest{ProviderName: "p", Config: map[string]any{"port": 25, "tls": true, "timeout": time.Second}, HostCapabilities: []string{"x"}}, want: sdk.ConfigureRequest{ProviderName: "p", Config: map[string]any{"port": 25, "tls": true, "timeout": time.Second}, HostCapabilities: []string{"x"}}},
		"map value":     {in: sdk.ConfigureRequest{Config: map[string]any{"hooks": map[string]any{"ops": "https://x"}}}, want: sdk.ConfigureRequest{Config: map[string]any{"hooks": map[string]string{"ops": "https://x"}}}},
		"bad value key": {in: sdk.ConfigureRequest{Config: map[string]any{"nested": map[string]any{"a": map[string]any{}}}}, wantErr: `config "nested": map entry "a" is map[string]interface {}, not a string`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, err := wire.ConfigureRequestToProto(tc.in)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, sdk.ConfigureRequestFromProto(p)); diff != "" {
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
			if diff := cmp.Diff(tc.want, sdk.DurationToProto(tc.in), protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestHealthRoundTrip(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in sdk.HealthResponse
	}{
		"zero":      {in: sdk.HealthResponse{}},
		"healthy":   {in: sdk.HealthResponse{Healthy: true, Message: "ok"}},
		"unhealthy": {in: sdk.HealthResponse{Message: "smtp down"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.in, wire.HealthFromProto(sdk.HealthToProto(tc.in))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
