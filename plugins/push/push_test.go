package main

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/heraldhq/herald/plugins/internal/channeltest"
	"github.com/heraldhq/herald/sdk"
)

func peerConfig(p *fcmPeer) map[string]any {
	return map[string]any{
		FieldEndpoint:    p.srv.URL,
		FieldProjectID:   peerProject,
		FieldAccessToken: p.bearer,
		FieldTimeout:     "5s",
	}
}

func configure(t *testing.T, cfg map[string]any) *Push {
	t.Helper()
	p := New().(*Push)
	if _, err := p.Configure(context.Background(), sdk.ConfigureRequest{ProviderName: "test", Config: cfg}); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return p
}

func delivery(id string, tokens ...string) sdk.Delivery {
	return sdk.Delivery{
		DeliveryID:     id,
		IdempotencyKey: "idem-" + id,
		TenantID:       "t1",
		NotificationID: "n-" + id,
		EventType:      "RESERVATION_REQUESTED",
		Severity:       "info",
		Recipient:      sdk.Recipient{UserID: "u-" + id, DeviceTokens: tokens},
		Content: sdk.Content{
			Title: "New reservation",
			Body:  "4 people at 20:00",
			Data:  json.RawMessage(`{"reservation_id":"r-42","pax":4}`),
		},
	}
}

func send(t *testing.T, p *Push, batch ...sdk.Delivery) []sdk.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resResp, err := p.Send(ctx, sdk.SendRequest{Deliveries: batch})
	res := resResp.Results
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	return res
}

var ignoreText = cmpopts.IgnoreFields(sdk.Result{}, "Reason", "ProviderMessageID")

// withGone is r listing the given devices as gone.
func withGone(r sdk.Result, tokens ...string) sdk.Result {
	r.GoneDevices = tokens
	return r
}

func TestSendClassifiesFCMAnswers(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		tokens []string
		want   sdk.Result
	}{
		"accepted":              {tokens: []string{"tok-a"}, want: sdk.Sent("d1", "")},
		"unregistered":          {tokens: []string{tokUnregistered}, want: sdk.Gone("d1", "", tokUnregistered)},
		"invalid argument":      {tokens: []string{tokInvalid}, want: sdk.Permanent("d1", "", "INVALID_ARGUMENT")},
		"quota 429":             {tokens: []string{tokQuota}, want: sdk.RateLimited("d1", "", 7*time.Second)},
		"unavailable 503":       {tokens: []string{tokUnavailable}, want: sdk.Retry("d1", "", 3*time.Second)},
		"internal 500":          {tokens: []string{tokInternal}, want: sdk.Retry("d1", "", 0)},
		"no device tokens":      {tokens: nil, want: sdk.Permanent("d1", "", CodeNoAddress)},
		"one of two accepted":   {tokens: []string{tokUnregistered, "tok-b"}, want: withGone(sdk.Sent("d1", ""), tokUnregistered)},
		"rate limit wins":       {tokens: []string{tokInvalid, tokUnavailable, tokQuota}, want: sdk.RateLimited("d1", "", 7*time.Second)},
		"retry beats permanent": {tokens: []string{tokUnregistered, tokUnavailable}, want: withGone(sdk.Retry("d1", "", 3*time.Second), tokUnregistered)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			peer := startFCMPeer(t)
			p := configure(t, peerConfig(peer))
			got := send(t, p, delivery("d1", tc.tokens...))
			if diff := cmp.Diff([]sdk.Result{tc.want}, got, ignoreText); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if got[0].Outcome != sdk.OutcomeSent && got[0].Reason == "" {
				t.Errorf("non-sent result without a reason: %+v", got[0])
			}
		})
	}
}

func TestSendBatchOneMessagePerToken(t *testing.T) {
	t.Parallel()
	peer := startFCMPeer(t)
	p := configure(t, peerConfig(peer))
	batch := []sdk.Delivery{
		delivery("d1", "tok-a1", "tok-a2"),
		delivery("d2", tokUnregistered),
		delivery("d3"),
		delivery("d4", "tok-c"),
	}
	got := send(t, p, batch...)
	want := []sdk.Result{
		sdk.Sent("d1", ""),
		sdk.Gone("d2", "", tokUnregistered),
		sdk.Permanent("d3", "", CodeNoAddress),
		sdk.Sent("d4", ""),
	}
	if diff := cmp.Diff(want, got, ignoreText); diff != "" {
		t.Fatalf("results (-want +got):\n%s", diff)
	}
	if ids := strings.Split(got[0].ProviderMessageID, ","); len(ids) != 2 || !strings.HasPrefix(ids[0], "projects/"+peerProject+"/messages/") {
		t.Errorf("d1 provider message id = %q, want two FCM message names", got[0].ProviderMessageID)
	}
	reqs := peer.received()
	toks := tokensOf(reqs)
	slices.Sort(toks)
	if diff := cmp.Diff([]string{"tok-a1", "tok-a2", "tok-c"}, toks); diff != "" {
		t.Errorf("tokens messaged (-want +got):\n%s", diff)
	}
	var d1 fcmMessage
	for _, r := range reqs {
		if r.Message.Token == "tok-a1" {
			d1 = r.Message
		}
	}
	wantMsg := fcmMessage{
		Token:        "tok-a1",
		Notification: &fcmNotification{Title: "New reservation", Body: "4 people at 20:00"},
		Data: map[string]string{
			"reservation_id":   "r-42",
			"pax":              "4",
			DataIdempotencyKey: "idem-d1",
			DataDeliveryID:     "d1",
			DataNotificationID: "n-d1",
			DataEventType:      "RESERVATION_REQUESTED",
			DataSeverity:       "info",
		},
		Android: &fcmAndroid{CollapseKey: "idem-d1"},
		APNS:    &fcmAPNS{Headers: map[string]string{"apns-collapse-id": "idem-d1"}},
	}
	if diff := cmp.Diff(wantMsg, d1); diff != "" {
		t.Errorf("FCM message for tok-a1 (-want +got):\n%s", diff)
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
	p := configure(t, map[string]any{
		FieldEndpoint: "http://" + addr, FieldProjectID: peerProject, FieldAccessToken: "x", FieldTimeout: "2s",
	})
	got := send(t, p, delivery("d1", "tok-a"), delivery("d2", "tok-b", "tok-c"))
	want := []sdk.Result{sdk.Retry("d1", "", 0), sdk.Retry("d2", "", 0)}
	if diff := cmp.Diff(want, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	h, err := p.Health(context.Background(), sdk.HealthRequest{})
	if err != nil || h.Healthy {
		t.Errorf("Health = %+v, %v; want unhealthy, nil", h, err)
	}
}

func TestBadAccessTokenRetriesAndIsUnhealthy(t *testing.T) {
	t.Parallel()
	peer := startFCMPeer(t)
	cfg := peerConfig(peer)
	cfg[FieldAccessToken] = "expired"
	p := configure(t, cfg)
	got := send(t, p, delivery("d1", "tok-a"))
	if diff := cmp.Diff([]sdk.Result{sdk.Retry("d1", "", 0)}, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	h, err := p.Health(context.Background(), sdk.HealthRequest{})
	if err != nil || h.Healthy {
		t.Errorf("Health = %+v, %v; want unhealthy, nil", h, err)
	}
}

func TestHealthValidatesWithoutDelivering(t *testing.T) {
	t.Parallel()
	peer := startFCMPeer(t)
	p := configure(t, peerConfig(peer))
	h, err := p.Health(context.Background(), sdk.HealthRequest{})
	if err != nil || !h.Healthy {
		t.Fatalf("Health = %+v, %v; want healthy", h, err)
	}
	reqs := peer.received()
	if len(reqs) != 1 || !reqs[0].ValidateOnly || reqs[0].Message.Token != "" {
		t.Errorf("health requests = %+v, want one validate-only topic message", reqs)
	}
}

func TestServiceAccountCredentials(t *testing.T) {
	t.Parallel()
	peer := startFCMPeer(t)
	path := writeServiceAccount(t, peer)
	p := configure(t, map[string]any{
		FieldEndpoint: peer.srv.URL, FieldProjectID: peerProject, FieldCredentialsFile: path,
	})
	got := send(t, p, delivery("d1", "tok-a"), delivery("d2", "tok-b"))
	if diff := cmp.Diff([]sdk.Result{sdk.Sent("d1", ""), sdk.Sent("d2", "")}, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if n := peer.grants(); n != 1 {
		t.Errorf("token endpoint granted %d tokens, want 1 (cached)", n)
	}
}

// TestServiceAccountRefused shows a token endpoint that refuses the
// assertion (signed with a key it does not know) as a retryable result
// that says the credentials were refused, and no message posted.
func TestServiceAccountRefused(t *testing.T) {
	t.Parallel()
	peer := startFCMPeer(t)
	stale := writeServiceAccount(t, peer)
	_ = writeServiceAccount(t, peer) // the peer now knows only this key
	p := configure(t, map[string]any{
		FieldEndpoint: peer.srv.URL, FieldProjectID: peerProject, FieldCredentialsFile: stale,
	})
	got := send(t, p, delivery("d1", "tok-a"))
	if diff := cmp.Diff([]sdk.Result{sdk.Retry("d1", "", 0)}, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if !strings.Contains(got[0].Reason, errTokenRejected.Error()) || !strings.Contains(got[0].Reason, "400") {
		t.Errorf("reason = %q, want the refused credentials and the status", got[0].Reason)
	}
	if n := len(peer.received()); n != 0 {
		t.Errorf("the peer received %d messages without a token", n)
	}
}

func TestSendBeforeConfigure(t *testing.T) {
	t.Parallel()
	channeltest.SendBeforeConfigure(t, New(), delivery("d1", "tok"), ErrNotConfigured)
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	channeltest.Describe(t, New(), channeltest.Description{ChannelType: "PUSH", Provider: "fcm", PluginVersion: "0.1.0", Class: sdk.Persistent, MaxBatch: 100})
}

func TestConfigureRefusesBadConfig(t *testing.T) {
	t.Parallel()
	good := func() map[string]any {
		return map[string]any{FieldProjectID: "p", FieldAccessToken: "tok"}
	}
	channeltest.RefusesBadConfig(t, New, good, map[string]channeltest.BadConfig{
		"unknown key":          {Edit: func(m map[string]any) { m["server_key"] = "legacy" }, WantField: "server_key"},
		"missing project":      {Edit: func(m map[string]any) { delete(m, FieldProjectID) }, WantField: FieldProjectID},
		"no credentials":       {Edit: func(m map[string]any) { delete(m, FieldAccessToken) }, WantField: FieldAccessToken},
		"both credentials":     {Edit: func(m map[string]any) { m[FieldCredentialsFile] = "/x.json" }, WantField: FieldCredentialsFile},
		"credentials missing":  {Edit: func(m map[string]any) { delete(m, FieldAccessToken); m[FieldCredentialsFile] = "/nonexistent.json" }, WantField: FieldCredentialsFile},
		"endpoint not a URL":   {Edit: func(m map[string]any) { m[FieldEndpoint] = "fcm" }, WantField: FieldEndpoint},
		"timeout wrong type":   {Edit: func(m map[string]any) { m[FieldTimeout] = true }, WantField: FieldTimeout},
		"concurrency too high": {Edit: func(m map[string]any) { m[FieldConcurrency] = 1000 }, WantField: FieldConcurrency},
	})
}
