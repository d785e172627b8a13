package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/heraldhq/herald/plugins/internal/channeltest"
	"github.com/heraldhq/herald/sdk"
)

const peerFrom = "+15005550006"

func peerConfig(p *twilioPeer) map[string]any {
	return map[string]any{
		FieldBaseURL:    p.srv.URL,
		FieldAccountSID: peerSID,
		FieldAuthToken:  peerToken,
		FieldFrom:       peerFrom,
		FieldTimeout:    "5s",
	}
}

func configure(t *testing.T, cfg map[string]any) *SMS {
	t.Helper()
	s := New().(*SMS)
	if _, err := s.Configure(context.Background(), sdk.ConfigureRequest{ProviderName: "test", Config: cfg}); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return s
}

func delivery(id, phone string) sdk.Delivery {
	return sdk.Delivery{
		DeliveryID:     id,
		IdempotencyKey: "idem-" + id,
		TenantID:       "t1",
		Recipient:      sdk.Recipient{UserID: "u-" + id, Phone: phone},
		Content:        sdk.Content{Title: "New reservation", Body: "Reservation " + id + ": 4 people at 20:00"},
	}
}

func send(t *testing.T, s *SMS, batch ...sdk.Delivery) []sdk.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resResp, err := s.Send(ctx, sdk.SendRequest{Deliveries: batch})
	res := resResp.Results
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	return res
}

var ignoreText = cmpopts.IgnoreFields(sdk.Result{}, "Reason", "ProviderMessageID")

func TestSendClassifiesTwilioAnswers(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		phone string
		edit  func(*sdk.Delivery)
		want  sdk.Result
	}{
		"created":         {phone: "+15005550010", want: sdk.Sent("d1", "")},
		"invalid number":  {phone: numInvalid, want: sdk.Permanent("d1", "", "21211")},
		"not mobile":      {phone: numNotMobile, want: sdk.Permanent("d1", "", "21614")},
		"rate limited":    {phone: numRateLimited, want: sdk.RateLimited("d1", "", 4*time.Second)},
		"server error":    {phone: numServerError, want: sdk.Retry("d1", "", 0)},
		"unavailable 503": {phone: numUnavailable, want: sdk.Retry("d1", "", 2*time.Second)},
		"no phone":        {phone: "", want: sdk.Permanent("d1", "", CodeNoAddress)},
		"empty message": {phone: "+15005550010", edit: func(d *sdk.Delivery) { d.Content = sdk.Content{} },
			want: sdk.Permanent("d1", "", CodeEmptyBody)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			peer := startTwilioPeer(t)
			s := configure(t, peerConfig(peer))
			d := delivery("d1", tc.phone)
			if tc.edit != nil {
				tc.edit(&d)
			}
			got := send(t, s, d)
			if diff := cmp.Diff([]sdk.Result{tc.want}, got, ignoreText); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if got[0].Outcome != sdk.OutcomeSent && got[0].Reason == "" {
				t.Errorf("non-sent result without a reason: %+v", got[0])
			}
		})
	}
}

func TestSendBatchFormAndIdempotency(t *testing.T) {
	t.Parallel()
	peer := startTwilioPeer(t)
	s := configure(t, peerConfig(peer))
	batch := []sdk.Delivery{
		delivery("d1", "+15005550010"),
		delivery("d2", numInvalid),
		delivery("d3", "+15005550011"),
	}
	got := send(t, s, batch...)
	want := []sdk.Result{sdk.Sent("d1", ""), sdk.Permanent("d2", "", "21211"), sdk.Sent("d3", "")}
	if diff := cmp.Diff(want, got, ignoreText); diff != "" {
		t.Fatalf("results (-want +got):\n%s", diff)
	}
	created := peer.created()
	bySID := map[string]sentSMS{}
	for _, m := range created {
		bySID[m.SID] = m
	}
	wantD1 := sentSMS{SID: got[0].ProviderMessageID, To: "+15005550010", From: peerFrom,
		Body: "Reservation d1: 4 people at 20:00", IdempotencyToken: "idem-d1"}
	if diff := cmp.Diff(wantD1, bySID[got[0].ProviderMessageID]); diff != "" {
		t.Errorf("message created for d1 (-want +got):\n%s", diff)
	}

	// A retry of d1 (same idempotency key, new attempt) gets the same sid
	// and creates no second message.
	again := delivery("d1", "+15005550010")
	again.Attempt = 2
	got2 := send(t, s, again)
	if diff := cmp.Diff([]sdk.Result{sdk.Sent("d1", got[0].ProviderMessageID)}, got2); diff != "" {
		t.Errorf("retried d1 (-want +got):\n%s", diff)
	}
	if n := len(peer.created()); n != 2 {
		t.Errorf("peer created %d messages, want 2", n)
	}
}

func TestMessagingServiceSender(t *testing.T) {
	t.Parallel()
	peer := startTwilioPeer(t)
	cfg := peerConfig(peer)
	delete(cfg, FieldFrom)
	cfg[FieldMessagingServiceSID] = "MG0123456789abcdef0123456789abcdef"
	s := configure(t, cfg)
	got := send(t, s, delivery("d1", "+15005550010"))
	if got[0].Outcome != sdk.OutcomeSent {
		t.Fatalf("result = %+v, want sent", got[0])
	}
	m := peer.created()
	if len(m) != 1 || m[0].MessagingServiceSid != "MG0123456789abcdef0123456789abcdef" || m[0].From != "" {
		t.Errorf("created = %+v, want one message through the messaging service", m)
	}
}

func TestWrongCredentials(t *testing.T) {
	t.Parallel()
	peer := startTwilioPeer(t)
	cfg := peerConfig(peer)
	cfg[FieldAuthToken] = "wrong"
	s := configure(t, cfg)
	got := send(t, s, delivery("d1", "+15005550010"))
	if diff := cmp.Diff([]sdk.Result{sdk.Retry("d1", "", 0)}, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	h, err := s.Health(context.Background(), sdk.HealthRequest{})
	if err != nil || h.Healthy {
		t.Errorf("Health = %+v, %v; want unhealthy", h, err)
	}
	good := configure(t, peerConfig(peer))
	h, err = good.Health(context.Background(), sdk.HealthRequest{})
	if err != nil || !h.Healthy {
		t.Errorf("Health with the right token = %+v, %v; want healthy", h, err)
	}
}

func TestSendServerDownRetries(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	cfg := map[string]any{FieldBaseURL: "http://" + addr, FieldAccountSID: peerSID, FieldAuthToken: "x", FieldFrom: peerFrom, FieldTimeout: "2s"}
	s := configure(t, cfg)
	got := send(t, s, delivery("d1", "+15005550010"), delivery("d2", ""))
	want := []sdk.Result{sdk.Retry("d1", "", 0), sdk.Permanent("d2", "", CodeNoAddress)}
	if diff := cmp.Diff(want, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

func TestSendBeforeConfigure(t *testing.T) {
	t.Parallel()
	channeltest.SendBeforeConfigure(t, New(), delivery("d1", "+15005550010"), ErrNotConfigured)
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	channeltest.Describe(t, New(), channeltest.Description{ChannelType: "SMS", Provider: "twilio", PluginVersion: "0.1.0", Class: sdk.Persistent, MaxBatch: 20})
}

func TestConfigureRefusesBadConfig(t *testing.T) {
	t.Parallel()
	good := func() map[string]any {
		return map[string]any{FieldAccountSID: peerSID, FieldAuthToken: "tok", FieldFrom: peerFrom}
	}
	channeltest.RefusesBadConfig(t, New, good, map[string]channeltest.BadConfig{
		"unknown key":          {Edit: func(m map[string]any) { m["api_key"] = "x" }, WantField: "api_key"},
		"missing account":      {Edit: func(m map[string]any) { delete(m, FieldAccountSID) }, WantField: FieldAccountSID},
		"malformed account":    {Edit: func(m map[string]any) { m[FieldAccountSID] = "AC123" }, WantField: FieldAccountSID},
		"missing token":        {Edit: func(m map[string]any) { delete(m, FieldAuthToken) }, WantField: FieldAuthToken},
		"no sender":            {Edit: func(m map[string]any) { delete(m, FieldFrom) }, WantField: FieldFrom},
		"two senders":          {Edit: func(m map[string]any) { m[FieldMessagingServiceSID] = "MG0123456789abcdef0123456789abcdef" }, WantField: FieldMessagingServiceSID},
		"bad base url":         {Edit: func(m map[string]any) { m[FieldBaseURL] = "twilio" }, WantField: FieldBaseURL},
		"concurrency too high": {Edit: func(m map[string]any) { m[FieldConcurrency] = 50 }, WantField: FieldConcurrency},
	})
}
