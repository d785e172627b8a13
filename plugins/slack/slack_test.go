package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slacktest"

	"github.com/heraldhq/herald/plugins/internal/channeltest"
	"github.com/heraldhq/herald/sdk"
)

// The token the test peer accepts, and Slack ids it answers specially.
const (
	peerToken     = "xoxb-herald-test"
	userNotFound  = "U0NOTFOUND" // {"ok":false,"error":"channel_not_found"}
	userLimited   = "U0LIMITED"  // HTTP 429, Retry-After: 9
	userServerErr = "U0SERVER"   // HTTP 500
	userInternal  = "U0INTERNAL" // {"ok":false,"error":"internal_error"}
)

// posted is one chat.postMessage call the peer accepted.
type posted struct {
	Channel  string
	Text     string
	Blocks   string
	Metadata slack.SlackMetadata
}

// slackPeer is a slacktest server (slack-go's own Slack Web API test
// server) with chat.postMessage and auth.test customised to check the
// token, record what was posted and answer with Slack's error shapes.
type slackPeer struct {
	srv *slacktest.Server

	mu    sync.Mutex
	posts []posted
	calls int
}

func startSlackPeer(t *testing.T) *slackPeer {
	t.Helper()
	p := &slackPeer{}
	p.srv = slacktest.NewTestServer(func(c slacktest.Customize) {
		c.Handle("/chat.postMessage", p.postMessage)
		c.Handle("/auth.test", p.authTest)
	})
	p.srv.Start()
	t.Cleanup(p.srv.Stop)
	return p
}

func (p *slackPeer) posted() []posted {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]posted(nil), p.posts...)
}

func (p *slackPeer) postCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

func slackJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func authorized(r *http.Request) bool {
	return r.Header.Get("Authorization") == "Bearer "+peerToken || r.PostForm.Get("token") == peerToken
}

func (p *slackPeer) authTest(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	if !authorized(r) {
		slackJSON(w, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	slackJSON(w, map[string]any{"ok": true, "url": "https://herald.slack.test/", "team": "Herald", "user": "herald-bot", "team_id": "T0HERALD", "user_id": "U0BOT"})
}

func (p *slackPeer) postMessage(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.calls++
	p.mu.Unlock()
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !authorized(r) {
		slackJSON(w, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	channel := r.PostForm.Get("channel")
	switch channel {
	case userNotFound:
		slackJSON(w, map[string]any{"ok": false, "error": "channel_not_found"})
		return
	case userLimited:
		w.Header().Set("Retry-After", "9")
		w.WriteHeader(http.StatusTooManyRequests)
		slackJSON(w, map[string]any{"ok": false, "error": "ratelimited"})
		return
	case userServerErr:
		http.Error(w, "<html>oops</html>", http.StatusInternalServerError)
		return
	case userInternal:
		slackJSON(w, map[string]any{"ok": false, "error": "internal_error"})
		return
	}
	var md slack.SlackMetadata
	if m := r.PostForm.Get("metadata"); m != "" {
		if err := json.Unmarshal([]byte(m), &md); err != nil {
			slackJSON(w, map[string]any{"ok": false, "error": "invalid_metadata_format"})
			return
		}
	}
	p.mu.Lock()
	p.posts = append(p.posts, posted{Channel: channel, Text: r.PostForm.Get("text"), Blocks: r.PostForm.Get("blocks"), Metadata: md})
	ts := fmt.Sprintf("1700000000.%06d", len(p.posts))
	p.mu.Unlock()
	// chat.postMessage to a user id answers with the DM channel's id.
	respChannel := channel
	if channel[0] == 'U' {
		respChannel = "D" + channel[1:]
	}
	slackJSON(w, map[string]any{"ok": true, "channel": respChannel, "ts": ts})
}

func peerConfig(p *slackPeer) map[string]any {
	return map[string]any{FieldToken: peerToken, FieldAPIURL: p.srv.GetAPIURL(), FieldTimeout: "5s"}
}

func configure(t *testing.T, cfg map[string]any) *Slack {
	t.Helper()
	s := New().(*Slack)
	if _, err := s.Configure(context.Background(), sdk.ConfigureRequest{ProviderName: "test", Config: cfg}); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return s
}

func delivery(id, slackID string) sdk.Delivery {
	d := sdk.Delivery{
		DeliveryID:     id,
		IdempotencyKey: "idem-" + id,
		TenantID:       "t1",
		NotificationID: "n-" + id,
		EventType:      "RESERVATION_REQUESTED",
		Recipient:      sdk.Recipient{UserID: "u-" + id},
		Content:        sdk.Content{Title: "New reservation", Body: "4 people at 20:00"},
	}
	if slackID != "" {
		d.Recipient.Attributes = map[string]string{AttrSlackUserID: slackID}
	}
	return d
}

func send(t *testing.T, s *Slack, batch ...sdk.Delivery) []sdk.Result {
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

var ignoreText = cmpopts.IgnoreFields(sdk.Result{}, "Reason")

func TestSendClassifiesSlackAnswers(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		slackID        string
		defaultChannel string
		want           sdk.Result
	}{
		"direct message":        {slackID: "U0ALICE", want: sdk.Sent("d1", "D0ALICE:1700000000.000001")},
		"default channel":       {defaultChannel: "C0OPS", want: sdk.Sent("d1", "C0OPS:1700000000.000001")},
		"no address":            {want: sdk.Permanent("d1", "", CodeNoAddress)},
		"channel not found":     {slackID: userNotFound, want: sdk.Permanent("d1", "", "channel_not_found")},
		"rate limited":          {slackID: userLimited, want: sdk.RateLimited("d1", "", 9*time.Second)},
		"server error":          {slackID: userServerErr, want: sdk.Retry("d1", "", 0)},
		"slack internal error":  {slackID: userInternal, want: sdk.Retry("d1", "", 0)},
		"user id beats default": {slackID: "U0BOB", defaultChannel: "C0OPS", want: sdk.Sent("d1", "D0BOB:1700000000.000001")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			peer := startSlackPeer(t)
			cfg := peerConfig(peer)
			if tc.defaultChannel != "" {
				cfg[FieldDefaultChannel] = tc.defaultChannel
			}
			s := configure(t, cfg)
			got := send(t, s, delivery("d1", tc.slackID))
			if diff := cmp.Diff([]sdk.Result{tc.want}, got, ignoreText); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if got[0].Outcome != sdk.OutcomeSent && got[0].Reason == "" {
				t.Errorf("non-sent result without a reason: %+v", got[0])
			}
		})
	}
}

func TestSendPostsTextAndMetadata(t *testing.T) {
	t.Parallel()
	peer := startSlackPeer(t)
	s := configure(t, peerConfig(peer))
	got := send(t, s, delivery("d1", "U0ALICE"), delivery("d2", userNotFound), delivery("d3", "U0CAROL"))
	want := []sdk.Result{
		sdk.Sent("d1", "D0ALICE:1700000000.000001"),
		sdk.Permanent("d2", "", "channel_not_found"),
		sdk.Sent("d3", "D0CAROL:1700000000.000002"),
	}
	if diff := cmp.Diff(want, got, ignoreText); diff != "" {
		t.Fatalf("results (-want +got):\n%s", diff)
	}
	wantPosts := []posted{
		{Channel: "U0ALICE", Text: "*New reservation*\n4 people at 20:00", Metadata: slack.SlackMetadata{
			EventType: MetadataEventType,
			EventPayload: map[string]any{"idempotency_key": "idem-d1", "delivery_id": "d1",
				"notification_id": "n-d1", "event_type": "RESERVATION_REQUESTED"},
		}},
		{Channel: "U0CAROL", Text: "*New reservation*\n4 people at 20:00", Metadata: slack.SlackMetadata{
			EventType: MetadataEventType,
			EventPayload: map[string]any{"idempotency_key": "idem-d3", "delivery_id": "d3",
				"notification_id": "n-d3", "event_type": "RESERVATION_REQUESTED"},
		}},
	}
	if diff := cmp.Diff(wantPosts, peer.posted()); diff != "" {
		t.Errorf("posted messages (-want +got):\n%s", diff)
	}
}

func TestRateLimitStopsTheBatch(t *testing.T) {
	t.Parallel()
	peer := startSlackPeer(t)
	s := configure(t, peerConfig(peer))
	got := send(t, s, delivery("d1", "U0ALICE"), delivery("d2", userLimited), delivery("d3", "U0CAROL"), delivery("d4", ""))
	want := []sdk.Result{
		sdk.Sent("d1", "D0ALICE:1700000000.000001"),
		sdk.RateLimited("d2", "", 9*time.Second),
		sdk.RateLimited("d3", "", 9*time.Second),
		sdk.Permanent("d4", "", CodeNoAddress),
	}
	if diff := cmp.Diff(want, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if n := peer.postCalls(); n != 2 {
		t.Errorf("chat.postMessage called %d times, want 2 (none after the rate limit)", n)
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	peer := startSlackPeer(t)
	tests := map[string]struct {
		token   string
		healthy bool
	}{
		"valid token":   {token: peerToken, healthy: true},
		"invalid token": {token: "xoxb-revoked", healthy: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := peerConfig(peer)
			cfg[FieldToken] = tc.token
			h, err := configure(t, cfg).Health(context.Background(), sdk.HealthRequest{})
			if err != nil {
				t.Fatalf("Health: %v", err)
			}
			if h.Healthy != tc.healthy || h.Message == "" {
				t.Errorf("Health = %+v, want healthy=%v with a message", h, tc.healthy)
			}
		})
	}
}

func TestInvalidTokenRetries(t *testing.T) {
	t.Parallel()
	peer := startSlackPeer(t)
	cfg := peerConfig(peer)
	cfg[FieldToken] = "xoxb-revoked"
	got := send(t, configure(t, cfg), delivery("d1", "U0ALICE"))
	if diff := cmp.Diff([]sdk.Result{sdk.Retry("d1", "", 0)}, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

func TestSendServerDownRetries(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "http", Host: l.Addr().String(), Path: "/"}
	_ = l.Close()
	s := configure(t, map[string]any{FieldToken: peerToken, FieldAPIURL: u.String(), FieldTimeout: "2s"})
	got := send(t, s, delivery("d1", "U0ALICE"))
	if diff := cmp.Diff([]sdk.Result{sdk.Retry("d1", "", 0)}, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

func TestSendBeforeConfigure(t *testing.T) {
	t.Parallel()
	channeltest.SendBeforeConfigure(t, New(), delivery("d1", "U0ALICE"), ErrNotConfigured)
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	channeltest.Describe(t, New(), channeltest.Description{ChannelType: "SLACK", Provider: "slack", PluginVersion: "0.1.0", Class: sdk.BestEffort, MaxBatch: 20})
}

func TestConfigureRefusesBadConfig(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		cfg       map[string]any
		wantField string
	}{
		"unknown key":      {cfg: map[string]any{FieldToken: "x", "channel": "C1"}, wantField: "channel"},
		"missing token":    {cfg: map[string]any{}, wantField: FieldToken},
		"blank token":      {cfg: map[string]any{FieldToken: "  "}, wantField: FieldToken},
		"api url not url":  {cfg: map[string]any{FieldToken: "x", FieldAPIURL: "slack"}, wantField: FieldAPIURL},
		"timeout not time": {cfg: map[string]any{FieldToken: "x", FieldTimeout: "fast"}, wantField: FieldTimeout},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := New().Configure(context.Background(), sdk.ConfigureRequest{Config: tc.cfg})
			var ce *sdk.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Configure error = %v, want *sdk.ConfigError", err)
			}
			if diff := cmp.Diff(tc.wantField, ce.Field); diff != "" {
				t.Errorf("ConfigError.Field (-want +got):\n%s", diff)
			}
		})
	}
}
