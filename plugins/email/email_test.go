package main

import (
	"context"
	"errors"
	"mime"
	"mime/multipart"
	"net/mail"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/heraldhq/herald/plugins/internal/channeltest"
	"github.com/heraldhq/herald/sdk"
)

func configure(t *testing.T, cfg map[string]any) *Email {
	t.Helper()
	e := New().(*Email)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.Configure(ctx, sdk.ConfigureRequest{ProviderName: "test", Config: cfg}); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return e
}

func peerConfig(p *smtpPeer) map[string]any {
	return map[string]any{
		FieldHost:    "127.0.0.1",
		FieldPort:    float64(p.addr.Port),
		FieldFrom:    "Herald <noreply@herald.test>",
		FieldTLS:     TLSNone,
		FieldTimeout: "5s",
	}
}

func delivery(id, email string) sdk.Delivery {
	return sdk.Delivery{
		DeliveryID:     id,
		IdempotencyKey: "idem-" + id,
		TenantID:       "t1",
		Recipient:      sdk.Recipient{UserID: "u-" + id, Email: email},
		Content:        sdk.Content{Subject: "Reservation " + id, Body: "Table for 4 at 20:00"},
	}
}

func send(t *testing.T, e *Email, batch ...sdk.Delivery) []sdk.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resResp, err := e.Send(ctx, sdk.SendRequest{Deliveries: batch})
	res := resResp.Results
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	return res
}

// ignoreText ignores the free-text reason and the generated message id,
// which the tests check separately.
var ignoreText = cmpopts.IgnoreFields(sdk.Result{}, "Reason", "ProviderMessageID")

func TestSendClassifiesEachRecipient(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		email string
		want  sdk.Result
	}{
		"accepted":         {email: "alice@herald.test", want: sdk.Sent("d1", "")},
		"rejected 550":     {email: rejectLocal + "@herald.test", want: sdk.Permanent("d1", "", "5.1.1")},
		"temporary 451":    {email: busyLocal + "@herald.test", want: sdk.Retry("d1", "", 0)},
		"no address":       {email: "", want: sdk.Permanent("d1", "", CodeNoAddress)},
		"invalid address":  {email: "not an address", want: sdk.Permanent("d1", "", CodeInvalidAddress)},
		"address is blank": {email: "   ", want: sdk.Permanent("d1", "", CodeNoAddress)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := startPeer(t, peerOptions{})
			e := configure(t, peerConfig(p))
			got := send(t, e, delivery("d1", tc.email))
			if diff := cmp.Diff([]sdk.Result{tc.want}, got, ignoreText); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if got[0].Outcome != sdk.OutcomeSent && got[0].Reason == "" {
				t.Errorf("non-sent result without a reason: %+v", got[0])
			}
			wantStored := 0
			if tc.want.Outcome == sdk.OutcomeSent {
				wantStored = 1
			}
			if n := len(p.received()); n != wantStored {
				t.Errorf("peer stored %d messages, want %d", n, wantStored)
			}
		})
	}
}

func TestSendBatchOverOneConnection(t *testing.T) {
	t.Parallel()
	p := startPeer(t, peerOptions{})
	e := configure(t, peerConfig(p))
	batch := []sdk.Delivery{
		delivery("d1", "alice@herald.test"),
		delivery("d2", rejectLocal+"@herald.test"),
		delivery("d3", "bob@herald.test"),
		delivery("d4", ""),
		delivery("d5", busyLocal+"@herald.test"),
		delivery("d6", "carol@herald.test"),
	}
	batch[2].Content.HTML = "<p>Table for <b>4</b></p>"
	got := send(t, e, batch...)
	want := []sdk.Result{
		sdk.Sent("d1", ""),
		sdk.Permanent("d2", "", "5.1.1"),
		sdk.Sent("d3", ""),
		sdk.Permanent("d4", "", CodeNoAddress),
		sdk.Retry("d5", "", 0),
		sdk.Sent("d6", ""),
	}
	if diff := cmp.Diff(want, got, ignoreText); diff != "" {
		t.Fatalf("results (-want +got):\n%s", diff)
	}
	if n := p.sessionCount(); n != 1 {
		t.Errorf("batch used %d SMTP connections, want 1", n)
	}
	msgs := p.received()
	var to []string
	for _, m := range msgs {
		to = append(to, m.To...)
	}
	if diff := cmp.Diff([]string{"alice@herald.test", "bob@herald.test", "carol@herald.test"}, to); diff != "" {
		t.Errorf("recipients stored (-want +got):\n%s", diff)
	}
	for i, m := range msgs {
		wantID := []string{"d1", "d3", "d6"}[i]
		res := got[map[string]int{"d1": 0, "d3": 2, "d6": 5}[wantID]]
		hdr := parse(t, m.Data).Header
		if got, want := hdr.Get(HeaderIdempotencyKey), "idem-"+wantID; got != want {
			t.Errorf("%s: %s = %q, want %q", wantID, HeaderIdempotencyKey, got, want)
		}
		if got, want := hdr.Get("Message-Id"), "<"+res.ProviderMessageID+">"; got != want {
			t.Errorf("%s: Message-ID = %q, want %q (the provider message id)", wantID, got, want)
		}
		if got, want := hdr.Get("Subject"), "Reservation "+wantID; got != want {
			t.Errorf("%s: Subject = %q, want %q", wantID, got, want)
		}
		if m.From != "noreply@herald.test" {
			t.Errorf("%s: MAIL FROM = %q", wantID, m.From)
		}
	}
}

func TestSendHTMLAlternative(t *testing.T) {
	t.Parallel()
	p := startPeer(t, peerOptions{})
	e := configure(t, peerConfig(p))
	d := delivery("d1", "alice@herald.test")
	d.Content.HTML = "<p>Table for <b>4</b></p>"
	got := send(t, e, d)
	if got[0].Outcome != sdk.OutcomeSent {
		t.Fatalf("result = %+v, want sent", got[0])
	}
	msgs := p.received()
	if len(msgs) != 1 {
		t.Fatalf("peer stored %d messages, want 1", len(msgs))
	}
	m := parse(t, msgs[0].Data)
	mediaType, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
	if err != nil || mediaType != "multipart/alternative" {
		t.Fatalf("Content-Type = %q (%v), want multipart/alternative", m.Header.Get("Content-Type"), err)
	}
	mr := multipart.NewReader(m.Body, params["boundary"])
	var types []string
	for range 10 {
		part, err := mr.NextPart()
		if err != nil {
			break
		}
		ct, _, _ := mime.ParseMediaType(part.Header.Get("Content-Type"))
		types = append(types, ct)
	}
	if diff := cmp.Diff([]string{"text/plain", "text/html"}, types); diff != "" {
		t.Errorf("alternative parts (-want +got):\n%s", diff)
	}
}

func TestSendServerDownRetriesAll(t *testing.T) {
	t.Parallel()
	cfg := map[string]any{
		FieldHost: "127.0.0.1", FieldPort: closedPort(t), FieldFrom: "noreply@herald.test",
		FieldTLS: TLSNone, FieldTimeout: "2s",
	}
	e := configure(t, cfg)
	got := send(t, e, delivery("d1", "alice@herald.test"), delivery("d2", "bob@herald.test"), delivery("d3", ""))
	want := []sdk.Result{sdk.Retry("d1", "", 0), sdk.Retry("d2", "", 0), sdk.Permanent("d3", "", CodeNoAddress)}
	if diff := cmp.Diff(want, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if !strings.Contains(got[0].Reason, "dial smtp") {
		t.Errorf("reason = %q, want it to name the dial", got[0].Reason)
	}
	h, err := e.Health(context.Background(), sdk.HealthRequest{})
	if err != nil || h.Healthy {
		t.Errorf("Health = %+v, %v; want unhealthy, nil", h, err)
	}
}

func TestSendStartTLSWithAuth(t *testing.T) {
	t.Parallel()
	srvTLS, caFile := selfSigned(t)
	p := startPeer(t, peerOptions{username: "herald", password: "s3cret", tls: srvTLS})
	cfg := peerConfig(p)
	cfg[FieldTLS] = TLSStartTLS
	cfg[FieldCAFile] = caFile
	cfg[FieldUsername] = "herald"
	cfg[FieldPassword] = "s3cret"
	e := configure(t, cfg)
	h, err := e.Health(context.Background(), sdk.HealthRequest{})
	if err != nil || !h.Healthy {
		t.Fatalf("Health = %+v, %v; want healthy", h, err)
	}
	got := send(t, e, delivery("d1", "alice@herald.test"))
	if diff := cmp.Diff([]sdk.Result{sdk.Sent("d1", "")}, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}

	// A wrong password fails the whole batch as retryable: the operator
	// fixes the config, the deliveries wait.
	cfg[FieldPassword] = "wrong"
	bad := configure(t, cfg)
	got = send(t, bad, delivery("d2", "bob@herald.test"))
	if diff := cmp.Diff([]sdk.Result{sdk.Retry("d2", "", 0)}, got, ignoreText); diff != "" {
		t.Errorf("wrong password results (-want +got):\n%s", diff)
	}
	if n := len(p.received()); n != 1 {
		t.Errorf("peer stored %d messages, want 1", n)
	}
}

func TestIdempotencyKeyGivesStableMessageID(t *testing.T) {
	t.Parallel()
	p := startPeer(t, peerOptions{})
	e := configure(t, peerConfig(p))
	first := delivery("d1", "alice@herald.test")
	retry := first
	retry.DeliveryID = "d1-retry"
	other := delivery("d2", "alice@herald.test")
	got := send(t, e, first, retry, other)
	if got[0].ProviderMessageID == "" || got[0].ProviderMessageID != got[1].ProviderMessageID {
		t.Errorf("same idempotency key gave message ids %q and %q, want equal and set", got[0].ProviderMessageID, got[1].ProviderMessageID)
	}
	if got[0].ProviderMessageID == got[2].ProviderMessageID {
		t.Errorf("different idempotency keys gave the same message id %q", got[0].ProviderMessageID)
	}
	if !strings.HasSuffix(got[0].ProviderMessageID, "@herald.test") {
		t.Errorf("message id %q does not use the sender's domain", got[0].ProviderMessageID)
	}
}

func TestSendCancelledContextRetries(t *testing.T) {
	t.Parallel()
	p := startPeer(t, peerOptions{})
	e := configure(t, peerConfig(p))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	gotResp, err := e.Send(ctx, sdk.SendRequest{Deliveries: []sdk.Delivery{delivery("d1", "alice@herald.test")}})
	got := gotResp.Results
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if diff := cmp.Diff([]sdk.Result{sdk.Retry("d1", "", 0)}, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if n := len(p.received()); n != 0 {
		t.Errorf("peer stored %d messages after a cancelled send", n)
	}
}

func TestSendBeforeConfigure(t *testing.T) {
	t.Parallel()
	channeltest.SendBeforeConfigure(t, New(), delivery("d1", "a@b.test"), ErrNotConfigured)
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	d := channeltest.Describe(t, New(), channeltest.Description{ChannelType: "EMAIL", Provider: "smtp", PluginVersion: "0.1.0", Class: sdk.Persistent, MaxBatch: 50})
	secret := map[string]bool{}
	for _, f := range d.Config {
		secret[f.Name] = f.Secret
	}
	if !secret[FieldPassword] {
		t.Errorf("password is not declared secret")
	}
}

func TestConfigureRefusesBadConfig(t *testing.T) {
	t.Parallel()
	good := func() map[string]any {
		return map[string]any{FieldHost: "smtp.herald.test", FieldFrom: "noreply@herald.test"}
	}
	tests := map[string]struct {
		edit      func(map[string]any)
		wantField string
	}{
		"unknown key":           {edit: func(m map[string]any) { m["hostname"] = "x" }, wantField: "hostname"},
		"missing host":          {edit: func(m map[string]any) { delete(m, FieldHost) }, wantField: FieldHost},
		"missing from":          {edit: func(m map[string]any) { delete(m, FieldFrom) }, wantField: FieldFrom},
		"from not an address":   {edit: func(m map[string]any) { m[FieldFrom] = "herald" }, wantField: FieldFrom},
		"port out of range":     {edit: func(m map[string]any) { m[FieldPort] = 70000 }, wantField: FieldPort},
		"port not a number":     {edit: func(m map[string]any) { m[FieldPort] = "smtp" }, wantField: FieldPort},
		"port fraction":         {edit: func(m map[string]any) { m[FieldPort] = 25.5 }, wantField: FieldPort},
		"tls not in enum":       {edit: func(m map[string]any) { m[FieldTLS] = "ssl" }, wantField: FieldTLS},
		"timeout not duration":  {edit: func(m map[string]any) { m[FieldTimeout] = "soon" }, wantField: FieldTimeout},
		"timeout negative":      {edit: func(m map[string]any) { m[FieldTimeout] = "-1s" }, wantField: FieldTimeout},
		"password without user": {edit: func(m map[string]any) { m[FieldPassword] = "x" }, wantField: FieldUsername},
		"ca file missing":       {edit: func(m map[string]any) { m[FieldCAFile] = "/nonexistent/ca.pem" }, wantField: FieldCAFile},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := good()
			tc.edit(cfg)
			_, err := New().Configure(context.Background(), sdk.ConfigureRequest{Config: cfg})
			var ce *sdk.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Configure error = %v, want *sdk.ConfigError", err)
			}
			if diff := cmp.Diff(tc.wantField, ce.Field); diff != "" {
				t.Errorf("ConfigError.Field (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("good config with defaults", func(t *testing.T) {
		t.Parallel()
		cfg, err := configFromParsed(good())
		if err != nil {
			t.Fatalf("configFromParsed: %v", err)
		}
		got := []any{cfg.Port, cfg.TLS, cfg.Timeout}
		if diff := cmp.Diff([]any{DefaultPort, DefaultTLS, DefaultTimeout}, got); diff != "" {
			t.Errorf("defaults (-want +got):\n%s", diff)
		}
	})
}

func parse(t *testing.T, data string) *mail.Message {
	t.Helper()
	m, err := mail.ReadMessage(strings.NewReader(data))
	if err != nil {
		t.Fatalf("stored message does not parse: %v\n%s", err, data)
	}
	return m
}
