package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/internal/pushpeer"
	"github.com/heraldhq/herald/plugins/internal/channeltest"
	"github.com/heraldhq/herald/sdk"
)

const (
	apnsKeyID  = "ABC123DEFG"
	apnsTeamID = "TEAM123456"
	apnsTopic  = "com.example.herald"
)

type apnsSetup struct {
	peer    *pushpeer.APNs
	url, ca string
	p8      []byte
}

func startAPNs(t *testing.T) apnsSetup {
	t.Helper()
	p8, pub, err := pushpeer.NewAPNsKey()
	if err != nil {
		t.Fatal(err)
	}
	peer := &pushpeer.APNs{Key: pub, KeyID: apnsKeyID, TeamID: apnsTeamID, Topic: apnsTopic}
	url, ca := startTLSPeer(t, peer)
	return apnsSetup{peer: peer, url: url, ca: ca, p8: p8}
}

func (a apnsSetup) config() map[string]any {
	return map[string]any{
		FieldProviders:    []any{ProviderAPNs},
		FieldAPNsEndpoint: a.url,
		FieldAPNsKey:      string(a.p8),
		FieldAPNsKeyID:    apnsKeyID,
		FieldAPNsTeamID:   apnsTeamID,
		FieldAPNsTopic:    apnsTopic,
		FieldCAFile:       a.ca,
		FieldTimeout:      "5s",
	}
}

func apnsToken(n int) string { return strings.Repeat(strconv.Itoa(n%10), 64) }

func apnsDevice(n int) sdk.Device { return sdk.Device{Kind: sdk.DeviceAPNs, Token: apnsToken(n)} }

// TestAPNsPeerChecksTokenAndHeaders: over HTTP/2, with a provider token
// the peer verifies against the .p8's public key (kid, iss, iat), the
// apns-* headers from the config or the template's data, and the alert
// payload with the data beside aps.
func TestAPNsPeerChecksTokenAndHeaders(t *testing.T) {
	t.Parallel()
	a := startAPNs(t)
	cfg := a.config()
	cfg[FieldAPNsExpiration] = "1h"
	p := configure(t, cfg)
	d1 := deviceDelivery("d1", apnsDevice(1))
	d2 := deviceDelivery("d2", apnsDevice(2))
	d2.Content.Data = json.RawMessage(`{"reservation_id":"r-7","apns_push_type":"background","apns_priority":"5","apns_collapse_id":"res-7","apns_expiration":"0"}`)
	before := time.Now()
	got := send(t, p, d1, d2)
	if diff := cmp.Diff([]sdk.Result{sdk.Sent("d1", ""), sdk.Sent("d2", "")}, got, ignoreText); diff != "" {
		t.Fatalf("results (-want +got):\n%s", diff)
	}
	msgs := a.peer.Messages()
	if len(msgs) != 2 {
		t.Fatalf("peer accepted %d notifications, want 2", len(msgs))
	}
	byToken := map[string]pushpeer.APNsMessage{}
	for _, m := range msgs {
		byToken[m.Token] = m
	}
	m1 := byToken[apnsToken(1)]
	if m1.ID != got[0].ProviderMessageID || m1.ID != apnsID("idem-d1", apnsToken(1)) {
		t.Errorf("apns-id %q, provider message id %q; want the id derived from the idempotency key", m1.ID, got[0].ProviderMessageID)
	}
	h := m1.Header
	exp, _ := strconv.ParseInt(h.Get("apns-expiration"), 10, 64)
	if h.Get("apns-topic") != apnsTopic || h.Get("apns-push-type") != "alert" || h.Get("apns-priority") != "10" ||
		h.Get("apns-collapse-id") != "idem-d1" || exp < before.Add(time.Hour).Unix() || exp > time.Now().Add(time.Hour).Unix() {
		t.Errorf("d1 headers %v: want the config's topic, alert, 10, the key as collapse id, expiration in 1h", h)
	}
	wantPayload := map[string]any{
		"aps":              map[string]any{"alert": map[string]any{"title": "New reservation", "body": "4 people at 20:00"}},
		"reservation_id":   "r-42",
		"pax":              float64(4),
		DataIdempotencyKey: "idem-d1",
		DataDeliveryID:     "d1",
		DataNotificationID: "n-d1",
		DataEventType:      "RESERVATION_REQUESTED",
		DataSeverity:       "info",
	}
	if diff := cmp.Diff(wantPayload, m1.Payload); diff != "" {
		t.Errorf("d1 payload (-want +got):\n%s", diff)
	}
	m2 := byToken[apnsToken(2)]
	h = m2.Header
	if h.Get("apns-push-type") != "background" || h.Get("apns-priority") != "5" || h.Get("apns-collapse-id") != "res-7" ||
		h.Get("apns-expiration") != "0" {
		t.Errorf("d2 headers %v: want the template's background, 5, res-7, 0", h)
	}
	if aps := m2.Payload["aps"].(map[string]any); aps["content-available"] != float64(1) || aps["alert"] != nil {
		t.Errorf("d2 aps %v: want content-available and no alert", aps)
	}
	if _, ok := m2.Payload["apns_priority"]; ok {
		t.Errorf("d2 payload %v carries the template options", m2.Payload)
	}
	if n := a.peer.ProviderTokens(); n != 1 {
		t.Errorf("peer saw %d provider tokens, want 1 (reused)", n)
	}
}

// TestAPNsTokenRefresh: a provider token is reused for less than
// APNsTokenRefresh, then signed anew, and dropped when APNs refuses it.
func TestAPNsTokenRefresh(t *testing.T) {
	t.Parallel()
	a := startAPNs(t)
	p := configure(t, a.config())
	s, err := p.configured()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	t1, err := s.apns.token(now)
	if err != nil {
		t.Fatal(err)
	}
	if t2, _ := s.apns.token(now.Add(APNsTokenRefresh - time.Second)); t2 != t1 {
		t.Error("token re-signed before APNsTokenRefresh")
	}
	t3, _ := s.apns.token(now.Add(APNsTokenRefresh))
	if t3 == t1 {
		t.Error("token not re-signed after APNsTokenRefresh")
	}
	s.apns.invalidate(t3)
	if t4, _ := s.apns.token(now.Add(APNsTokenRefresh)); t4 == t3 {
		t.Error("token kept after invalidate")
	}
	// A cached token APNs refuses as expired (its iat is two hours old,
	// as after the machine's clock jumped): sending is retryable and the
	// next send signs a new one.
	stale := &apnsTokens{key: s.apns.key, keyID: s.apns.keyID, teamID: s.apns.teamID}
	old, _ := stale.token(now.Add(-2 * time.Hour))
	s.apns.mu.Lock()
	s.apns.tok, s.apns.issued = old, time.Now()
	s.apns.mu.Unlock()
	got := send(t, p, deviceDelivery("d1", apnsDevice(1)))
	if got[0].Outcome != sdk.OutcomeRetryable || !strings.Contains(got[0].Reason, "ExpiredProviderToken") {
		t.Fatalf("with an expired token: %+v, want retryable ExpiredProviderToken", got[0])
	}
	if cur, _ := s.apns.token(time.Now()); cur == old {
		t.Fatal("expired token still cached after APNs refused it")
	}
	if got := send(t, p, deviceDelivery("d1", apnsDevice(1))); got[0].Outcome != sdk.OutcomeSent {
		t.Fatalf("after re-signing: %+v, want sent", got[0])
	}
}

// TestAPNsFailures: 410 Unregistered marks the token gone, 429 is rate
// limited with Retry-After, 5xx retried with it, a token signed by another
// key is a retryable credential problem, bad tokens and options are
// permanent.
func TestAPNsFailures(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		reply pushpeer.Reply
		data  string
		token string
		want  sdk.Result
	}{
		"410 unregistered":  {reply: pushpeer.Reply{Status: 410, Reason: "Unregistered"}, want: sdk.Gone("d1", "")},
		"429 retry after":   {reply: pushpeer.Reply{Status: 429, Reason: "TooManyRequests", RetryAfter: "7"}, want: sdk.RateLimited("d1", "", 7*time.Second)},
		"503 retry after":   {reply: pushpeer.Reply{Status: 503, Reason: "ServiceUnavailable", RetryAfter: "3"}, want: sdk.Retry("d1", "", 3*time.Second)},
		"500":               {reply: pushpeer.Reply{Status: 500, Reason: "InternalServerError"}, want: sdk.Retry("d1", "", 0)},
		"400 bad token":     {reply: pushpeer.Reply{Status: 400, Reason: "BadDeviceToken"}, want: sdk.Permanent("d1", "", "BadDeviceToken")},
		"token not hex":     {token: "not-hex", want: sdk.Permanent("d1", "", "BadDeviceToken")},
		"bad push type":     {data: `{"apns_push_type":"shout"}`, want: sdk.Permanent("d1", "", CodeInvalidOption)},
		"bad priority":      {data: `{"apns_priority":7}`, want: sdk.Permanent("d1", "", CodeInvalidOption)},
		"collapse too long": {data: `{"apns_collapse_id":"` + strings.Repeat("c", 65) + `"}`, want: sdk.Permanent("d1", "", CodeInvalidOption)},
		"payload too large": {data: `{"big":"` + strings.Repeat("x", 5000) + `"}`, want: sdk.Permanent("d1", "", CodePayloadTooLarge)},
		"other key":         {reply: pushpeer.Reply{Status: -1}, want: sdk.Retry("d1", "", 0)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := startAPNs(t)
			dev := apnsDevice(1)
			if tc.token != "" {
				dev.Token = tc.token
			}
			switch {
			case tc.reply.Status == -1:
				_, other, err := pushpeer.NewAPNsKey()
				if err != nil {
					t.Fatal(err)
				}
				a.peer.Key = other
			case tc.reply.Status != 0:
				a.peer.Script(dev.Token, tc.reply)
			}
			p := configure(t, a.config())
			d := deviceDelivery("d1", dev)
			if tc.data != "" {
				d.Content.Data = json.RawMessage(tc.data)
			}
			want := tc.want
			if want.Code == sdk.CodeDeviceGone {
				want.GoneDevices = []string{dev.Token}
			}
			got := send(t, p, d)
			if diff := cmp.Diff([]sdk.Result{want}, got, ignoreText); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if got[0].Reason == "" {
				t.Errorf("no reason: %+v", got[0])
			}
			if n := len(a.peer.Messages()); n != 0 {
				t.Errorf("peer accepted %d notifications", n)
			}
		})
	}
}

func TestConfigureRefusesBadAPNsConfig(t *testing.T) {
	t.Parallel()
	p8, _, err := pushpeer.NewAPNsKey()
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	rsaDER, _ := x509.MarshalPKCS8PrivateKey(rsaKey)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p384DER, _ := x509.MarshalPKCS8PrivateKey(p384)
	pemOf := func(der []byte) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	}
	good := func() map[string]any {
		return map[string]any{FieldProviders: []any{ProviderAPNs}, FieldAPNsKey: string(p8), FieldAPNsKeyID: apnsKeyID,
			FieldAPNsTeamID: apnsTeamID, FieldAPNsTopic: apnsTopic}
	}
	channeltest.RefusesBadConfig(t, New, good, map[string]channeltest.BadConfig{
		"no key":          {Edit: func(m map[string]any) { delete(m, FieldAPNsKey) }, WantField: FieldAPNsKey},
		"key not pem":     {Edit: func(m map[string]any) { m[FieldAPNsKey] = "AuthKey_ABC123DEFG.p8" }, WantField: FieldAPNsKey},
		"key is rsa":      {Edit: func(m map[string]any) { m[FieldAPNsKey] = pemOf(rsaDER) }, WantField: FieldAPNsKey},
		"key is p-384":    {Edit: func(m map[string]any) { m[FieldAPNsKey] = pemOf(p384DER) }, WantField: FieldAPNsKey},
		"key garbage der": {Edit: func(m map[string]any) { m[FieldAPNsKey] = pemOf([]byte("junk")) }, WantField: FieldAPNsKey},
		"bad key id":      {Edit: func(m map[string]any) { m[FieldAPNsKeyID] = "abc" }, WantField: FieldAPNsKeyID},
		"no team id":      {Edit: func(m map[string]any) { delete(m, FieldAPNsTeamID) }, WantField: FieldAPNsTeamID},
		"no topic":        {Edit: func(m map[string]any) { delete(m, FieldAPNsTopic) }, WantField: FieldAPNsTopic},
		"http endpoint":   {Edit: func(m map[string]any) { m[FieldAPNsEndpoint] = "http://api.push.apple.com" }, WantField: FieldAPNsEndpoint},
		"bad priority":    {Edit: func(m map[string]any) { m[FieldAPNsPriority] = 7 }, WantField: FieldAPNsPriority},
		"bad push type":   {Edit: func(m map[string]any) { m[FieldAPNsPushType] = "shout" }, WantField: FieldAPNsPushType},
		"apns key no apns": {Edit: func(m map[string]any) {
			m[FieldProviders] = []any{ProviderFCM}
			m[FieldProjectID] = "p"
			m[FieldAccessToken] = "t"
		}, WantField: FieldAPNsKey},
	})
}

// TestHealthWithoutFCM: a provider of webpush and apns is healthy when
// its keys sign, without calling anybody.
func TestHealthWithoutFCM(t *testing.T) {
	t.Parallel()
	a := startAPNs(t)
	p := configure(t, a.config())
	h, err := p.Health(context.Background(), sdk.HealthRequest{})
	if err != nil || !h.Healthy || !strings.Contains(h.Message, "apns") {
		t.Fatalf("Health = %+v, %v; want healthy naming apns", h, err)
	}
}
