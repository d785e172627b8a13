package host

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/heraldhq/herald/sdk"
	pbv1 "github.com/heraldhq/herald/sdk/internal/proto/herald/channel/v1"
	pb "github.com/heraldhq/herald/sdk/internal/proto/herald/channel/v2"
	"github.com/heraldhq/herald/sdk/internal/wire"
)

// fullDelivery is a delivery with every field set.
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
		CreatedAt:   time.Date(2025, 3, 4, 5, 6, 7, 8, time.UTC),
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		TraceState:  "vendor=x",
	}
}

func TestOutcomeV1ToV2(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in   pbv1.Outcome
		want pb.Outcome
	}{
		"sent (0 in v1)":   {in: pbv1.Outcome_OUTCOME_SENT, want: pb.Outcome_OUTCOME_SENT},
		"retryable":        {in: pbv1.Outcome_OUTCOME_RETRYABLE, want: pb.Outcome_OUTCOME_RETRYABLE},
		"rate limited":     {in: pbv1.Outcome_OUTCOME_RATE_LIMITED, want: pb.Outcome_OUTCOME_RATE_LIMITED},
		"permanent":        {in: pbv1.Outcome_OUTCOME_PERMANENT, want: pb.Outcome_OUTCOME_PERMANENT},
		"unknown v1 value": {in: pbv1.Outcome(9), want: pb.Outcome_OUTCOME_UNSPECIFIED},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := outcomeV1ToV2(tc.in); got != tc.want {
				t.Errorf("outcomeV1ToV2(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

// TestRecodeKeepsEveryField re-encodes a full v2 request as v1 and back:
// the two protocols share every field number.
func TestRecodeKeepsEveryField(t *testing.T) {
	t.Parallel()
	in := &pb.SendRequest{Deliveries: wire.DeliveriesToProto([]sdk.Delivery{fullDelivery(), {DeliveryID: "only-id"}})}
	v1, err := recode(in, &pbv1.SendRequest{})
	if err != nil {
		t.Fatal(err)
	}
	back, err := recode(v1, &pb.SendRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, back, protocmp.Transform()); diff != "" {
		t.Errorf("v2 → v1 → v2 (-want +got):\n%s", diff)
	}
	res := &pbv1.Result{DeliveryId: "d", Outcome: pbv1.Outcome_OUTCOME_PERMANENT, Code: "550",
		Reason: "no", ProviderMessageId: "m", RetryAfter: durationpb.New(time.Second), Unclassified: true}
	got, err := recode(res, &pb.Result{})
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.Result{DeliveryId: "d", Outcome: pb.Outcome_OUTCOME_RATE_LIMITED /* raw number 3, not yet mapped */, Code: "550",
		Reason: "no", ProviderMessageId: "m", RetryAfter: durationpb.New(time.Second), Unclassified: true}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("v1 result recoded (-want +got):\n%s", diff)
	}
}
