package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/slack-go/slack"

	"github.com/heraldhq/herald/sdk"
)

// Webhook paths the test peer answers specially, the way Slack answers.
const (
	hookOK         = "/services/T0HERALD/B0OPS/secretops"
	hookAlerts     = "/services/T0HERALD/B0ALERTS/secretalerts"
	hookRevoked    = "/services/T0HERALD/B0REVOKED/x" // 404 no_service
	hookGone       = "/services/T0HERALD/B0GONE/x"    // 410 with an HTML body
	hookArchived   = "/services/T0HERALD/B0ARCH/x"    // 410 channel_is_archived
	hookProhibited = "/services/T0HERALD/B0PROHIB/x"  // 403 action_prohibited
	hookLimited    = "/services/T0HERALD/B0LIMIT/x"   // 429, Retry-After: 7
	hookLimitedNA  = "/services/T0HERALD/B0LIMNA/x"   // 429 without Retry-After
	hookDown       = "/services/T0HERALD/B0DOWN/x"    // 503
	hookNotFound   = "/services/T0HERALD/B0CHAN/x"    // 404 channel_not_found
)

// hookPost is one message the webhook peer accepted.
type hookPost struct {
	Path     string
	Text     string
	Blocks   []map[string]any
	Metadata slack.SlackMetadata
}

// webhookPeer is an HTTP server of ours speaking Slack's incoming-webhook
// shape: POST of a JSON body to /services/T…/B…/…, answered with plain
// text ("ok", or an error code) and Slack's status codes. It checks what
// Slack checks: a JSON object, text or blocks present, blocks an array of
// objects with a type.
type webhookPeer struct {
	srv *httptest.Server

	mu     sync.Mutex
	posts  []hookPost
	probes int
	calls  map[string]int
}

func startWebhookPeer(t *testing.T) *webhookPeer {
	t.Helper()
	p := &webhookPeer{calls: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *webhookPeer) url(path string) string { return p.srv.URL + path }

func (p *webhookPeer) posted() []hookPost {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]hookPost(nil), p.posts...)
}

func (p *webhookPeer) callsTo(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[path]
}

func answer(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, text)
}

func (p *webhookPeer) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.calls[r.URL.Path]++
	p.mu.Unlock()
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/services/") {
		answer(w, http.StatusNotFound, "no_service")
		return
	}
	switch r.URL.Path {
	case hookRevoked:
		answer(w, http.StatusNotFound, "no_service")
		return
	case hookGone:
		answer(w, http.StatusGone, "<html><body>Gone</body></html>")
		return
	case hookArchived:
		answer(w, http.StatusGone, "channel_is_archived")
		return
	case hookProhibited:
		answer(w, http.StatusForbidden, "action_prohibited")
		return
	case hookLimited:
		w.Header().Set("Retry-After", "7")
		answer(w, http.StatusTooManyRequests, "rate_limited")
		return
	case hookLimitedNA:
		answer(w, http.StatusTooManyRequests, "rate_limited")
		return
	case hookDown:
		answer(w, http.StatusServiceUnavailable, "<html>Service Unavailable</html>")
		return
	case hookNotFound:
		answer(w, http.StatusNotFound, "channel_not_found")
		return
	}
	if mt := r.Header.Get("Content-Type"); !strings.HasPrefix(mt, "application/json") {
		answer(w, http.StatusBadRequest, "invalid_payload")
		return
	}
	var body struct {
		Text     *string             `json:"text"`
		Blocks   json.RawMessage     `json:"blocks"`
		Metadata slack.SlackMetadata `json:"metadata"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		answer(w, http.StatusBadRequest, "invalid_payload")
		return
	}
	var blocks []map[string]any
	if len(body.Blocks) > 0 {
		if json.Unmarshal(body.Blocks, &blocks) != nil {
			answer(w, http.StatusBadRequest, "invalid_blocks")
			return
		}
		for _, b := range blocks {
			if typ, _ := b["type"].(string); typ == "" {
				answer(w, http.StatusBadRequest, "invalid_blocks")
				return
			}
		}
	}
	if (body.Text == nil || *body.Text == "") && len(blocks) == 0 {
		// What Slack answers the health probe's empty message.
		p.mu.Lock()
		p.probes++
		p.mu.Unlock()
		answer(w, http.StatusBadRequest, "no_text")
		return
	}
	text := ""
	if body.Text != nil {
		text = *body.Text
	}
	p.mu.Lock()
	p.posts = append(p.posts, hookPost{Path: r.URL.Path, Text: text, Blocks: blocks, Metadata: body.Metadata})
	p.mu.Unlock()
	answer(w, http.StatusOK, "ok")
}

func webhookConfig(p *webhookPeer, hooks map[string]string) map[string]any {
	m := map[string]any{}
	for name, path := range hooks {
		m[name] = p.url(path)
	}
	return map[string]any{FieldMode: ModeWebhook, FieldWebhooks: m, FieldTimeout: "5s"}
}

func webhookDelivery(id string, data string, attrs map[string]string) sdk.Delivery {
	d := delivery(id, "")
	d.Recipient.Attributes = attrs
	if data != "" {
		d.Content.Data = json.RawMessage(data)
	}
	return d
}

func TestWebhookSendClassifiesAnswers(t *testing.T) {
	t.Parallel()
	peer := startWebhookPeer(t)
	tests := map[string]struct {
		hook string
		want sdk.Result
	}{
		"ok":                   {hook: hookOK, want: sdk.Sent("d1", "webhook:h")},
		"revoked no_service":   {hook: hookRevoked, want: sdk.Permanent("d1", "", CodeWebhookRevoked)},
		"gone 410":             {hook: hookGone, want: sdk.Permanent("d1", "", CodeWebhookRevoked)},
		"channel archived":     {hook: hookArchived, want: sdk.Permanent("d1", "", "channel_is_archived")},
		"channel not found":    {hook: hookNotFound, want: sdk.Permanent("d1", "", "channel_not_found")},
		"action prohibited":    {hook: hookProhibited, want: sdk.Permanent("d1", "", "action_prohibited")},
		"rate limited":         {hook: hookLimited, want: sdk.RateLimited("d1", "", 7*time.Second)},
		"rate limited no wait": {hook: hookLimitedNA, want: sdk.RateLimited("d1", "", DefaultRateLimitWait)},
		"server error":         {hook: hookDown, want: sdk.Retry("d1", "", 0)},
		"not a hook path 404":  {hook: "/hooks/nothing", want: sdk.Permanent("d1", "", CodeWebhookRevoked)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := configure(t, webhookConfig(peer, map[string]string{"h": tc.hook}))
			got := send(t, s, webhookDelivery("d1", "", nil))
			if diff := cmp.Diff([]sdk.Result{tc.want}, got, ignoreText); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if got[0].Outcome != sdk.OutcomeSent && got[0].Reason == "" {
				t.Errorf("non-sent result without a reason: %+v", got[0])
			}
			if strings.Contains(got[0].Reason, "secret") {
				t.Errorf("reason %q repeats the webhook URL's secret", got[0].Reason)
			}
		})
	}
}

func TestWebhookInvalidPayload(t *testing.T) {
	t.Parallel()
	// A peer that refuses every message as Slack refuses a malformed one.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusBadRequest, "invalid_payload")
	}))
	t.Cleanup(srv.Close)
	s := configure(t, map[string]any{FieldWebhooks: map[string]any{"h": srv.URL + "/services/T/B/x"}})
	got := send(t, s, webhookDelivery("d1", "", nil))
	if diff := cmp.Diff([]sdk.Result{sdk.Permanent("d1", "", "invalid_payload")}, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

func TestWebhookServerDownRetries(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + l.Addr().String() + "/services/T/B/secretdown"
	_ = l.Close()
	s := configure(t, map[string]any{FieldWebhooks: map[string]any{"h": u}, FieldTimeout: "2s"})
	got := send(t, s, webhookDelivery("d1", "", nil))
	if diff := cmp.Diff([]sdk.Result{sdk.Retry("d1", "", 0)}, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if strings.Contains(got[0].Reason, "secretdown") {
		t.Errorf("reason %q repeats the webhook URL", got[0].Reason)
	}
	h, err := s.Health(context.Background(), sdk.HealthRequest{})
	if err != nil || h.Healthy || strings.Contains(h.Message, "secretdown") {
		t.Errorf("Health = %+v, %v; want unhealthy without the URL", h, err)
	}
}

// TestWebhookRouting checks how a delivery picks its webhook: the
// template's data.webhook, else the recipient's slack_webhook attribute,
// else default_webhook; and what it posts (text, blocks, metadata).
func TestWebhookRouting(t *testing.T) {
	t.Parallel()
	peer := startWebhookPeer(t)
	cfg := webhookConfig(peer, map[string]string{"ops": hookOK, "alerts": hookAlerts})
	cfg[FieldDefaultWebhook] = "ops"
	s := configure(t, cfg)
	blocks := `[{"type":"header","text":{"type":"plain_text","text":"Disk full"}},{"type":"section","text":{"type":"mrkdwn","text":"*db1* at 97%"}},{"type":"divider"}]`
	data, _ := json.Marshal(map[string]string{"webhook": "alerts", "blocks": blocks})
	got := send(t, s,
		webhookDelivery("d1", string(data), map[string]string{AttrSlackWebhook: "ops"}),
		webhookDelivery("d2", "", map[string]string{AttrSlackWebhook: "alerts"}),
		webhookDelivery("d3", `{"other":"x"}`, nil),
		webhookDelivery("d4", `{"webhook":"nope"}`, nil),
		webhookDelivery("d5", `{"blocks":"[{\"text\":\"no type\"}]"}`, nil),
		webhookDelivery("d6", `{"blocks":"not json"}`, nil),
	)
	want := []sdk.Result{
		sdk.Sent("d1", "webhook:alerts"),
		sdk.Sent("d2", "webhook:alerts"),
		sdk.Sent("d3", "webhook:ops"),
		sdk.Permanent("d4", "", CodeUnknownWebhook),
		sdk.Permanent("d5", "", CodeInvalidBlocks),
		sdk.Permanent("d6", "", CodeInvalidBlocks),
	}
	if diff := cmp.Diff(want, got, ignoreText); diff != "" {
		t.Fatalf("results (-want +got):\n%s", diff)
	}
	meta := func(id string) slack.SlackMetadata {
		return slack.SlackMetadata{EventType: MetadataEventType, EventPayload: map[string]any{
			"idempotency_key": "idem-" + id, "delivery_id": id, "notification_id": "n-" + id, "event_type": "RESERVATION_REQUESTED"}}
	}
	var wantBlocks []map[string]any
	if err := json.Unmarshal([]byte(blocks), &wantBlocks); err != nil {
		t.Fatal(err)
	}
	text := "*New reservation*\n4 people at 20:00"
	wantPosts := []hookPost{
		{Path: hookAlerts, Text: text, Blocks: wantBlocks, Metadata: meta("d1")},
		{Path: hookAlerts, Text: text, Metadata: meta("d2")},
		{Path: hookOK, Text: text, Metadata: meta("d3")},
	}
	if diff := cmp.Diff(wantPosts, peer.posted()); diff != "" {
		t.Errorf("posted (-want +got):\n%s", diff)
	}
}

func TestWebhookNoDefault(t *testing.T) {
	t.Parallel()
	peer := startWebhookPeer(t)
	s := configure(t, webhookConfig(peer, map[string]string{"ops": hookOK, "alerts": hookAlerts}))
	got := send(t, s, webhookDelivery("d1", "", nil))
	if diff := cmp.Diff([]sdk.Result{sdk.Permanent("d1", "", CodeNoAddress)}, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

func TestWebhookEmptyMessage(t *testing.T) {
	t.Parallel()
	peer := startWebhookPeer(t)
	s := configure(t, webhookConfig(peer, map[string]string{"ops": hookOK}))
	d := webhookDelivery("d1", "", nil)
	d.Content = sdk.Content{}
	got := send(t, s, d)
	if diff := cmp.Diff([]sdk.Result{sdk.Permanent("d1", "", CodeNoText)}, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if n := peer.callsTo(hookOK); n != 0 {
		t.Errorf("peer called %d times for an empty message, want 0", n)
	}
}

func TestWebhookRateLimitStopsTheBatch(t *testing.T) {
	t.Parallel()
	peer := startWebhookPeer(t)
	s := configure(t, webhookConfig(peer, map[string]string{"ops": hookOK, "limited": hookLimited}))
	got := send(t, s,
		webhookDelivery("d1", `{"webhook":"ops"}`, nil),
		webhookDelivery("d2", `{"webhook":"limited"}`, nil),
		webhookDelivery("d3", `{"webhook":"ops"}`, nil),
		webhookDelivery("d4", `{"webhook":"missing"}`, nil),
	)
	want := []sdk.Result{
		sdk.Sent("d1", "webhook:ops"),
		sdk.RateLimited("d2", "", 7*time.Second),
		sdk.RateLimited("d3", "", 7*time.Second),
		sdk.Permanent("d4", "", CodeUnknownWebhook),
	}
	if diff := cmp.Diff(want, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if n := peer.callsTo(hookOK); n != 1 {
		t.Errorf("ops webhook called %d times, want 1 (none after the rate limit)", n)
	}
}

func TestWebhookHealth(t *testing.T) {
	t.Parallel()
	peer := startWebhookPeer(t)
	tests := map[string]struct {
		hooks   map[string]string
		healthy bool
	}{
		"live hooks":  {hooks: map[string]string{"ops": hookOK, "alerts": hookAlerts}, healthy: true},
		"one revoked": {hooks: map[string]string{"ops": hookOK, "old": hookRevoked}, healthy: true},
		"all revoked": {hooks: map[string]string{"old": hookRevoked, "older": hookNotFound}, healthy: false},
		"gone hook":   {hooks: map[string]string{"old": hookGone}, healthy: false},
		"hook down":   {hooks: map[string]string{"ops": hookDown}, healthy: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h, err := configure(t, webhookConfig(peer, tc.hooks)).Health(context.Background(), sdk.HealthRequest{})
			if err != nil {
				t.Fatalf("Health: %v", err)
			}
			if h.Healthy != tc.healthy || h.Message == "" {
				t.Errorf("Health = %+v, want healthy=%v with a message", h, tc.healthy)
			}
			for name, path := range tc.hooks {
				if path != hookOK && path != hookAlerts && !strings.Contains(h.Message, name+" (HTTP ") {
					t.Errorf("Health message %q does not name failing webhook %s", h.Message, name)
				}
			}
		})
	}
	if n := len(peer.posted()); n != 0 {
		t.Errorf("health probes posted %d messages, want 0", n)
	}
}

func TestWebhookConfigRefusesBadInput(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("n", MaxWebhookName+1)
	many := map[string]any{}
	for i := range MaxWebhooks + 1 {
		many[fmt.Sprintf("h%d", i)] = "https://hooks.slack.com/services/T/B/x"
	}
	tests := map[string]struct {
		cfg       map[string]any
		wantField string
		wantMsg   string
	}{
		"neither token nor webhooks": {cfg: map[string]any{}, wantField: FieldToken, wantMsg: "webhooks"},
		"both without mode":          {cfg: map[string]any{FieldToken: "xoxb-1", FieldWebhooks: map[string]any{"a": "https://hooks.slack.com/services/T/B/x"}}, wantField: FieldMode},
		"webhook mode no webhooks":   {cfg: map[string]any{FieldMode: ModeWebhook}, wantField: FieldWebhooks},
		"webhook mode with token":    {cfg: map[string]any{FieldMode: ModeWebhook, FieldToken: "xoxb-1", FieldWebhooks: map[string]any{"a": "https://h.example/x"}}, wantField: FieldToken},
		"bot mode with webhooks":     {cfg: map[string]any{FieldMode: ModeBot, FieldToken: "xoxb-1", FieldWebhooks: map[string]any{"a": "https://h.example/x"}}, wantField: FieldWebhooks},
		"default channel in webhook": {cfg: map[string]any{FieldWebhooks: map[string]any{"a": "https://h.example/x"}, FieldDefaultChannel: "#ops"}, wantField: FieldDefaultChannel},
		"plain http":                 {cfg: map[string]any{FieldWebhooks: map[string]any{"a": "http://hooks.slack.com/services/T/B/secretx"}}, wantField: FieldWebhooks, wantMsg: "https"},
		"ftp":                        {cfg: map[string]any{FieldWebhooks: map[string]any{"a": "ftp://hooks.slack.com/services/T/B/secretx"}}, wantField: FieldWebhooks, wantMsg: "https"},
		"not a url":                  {cfg: map[string]any{FieldWebhooks: map[string]any{"a": "https://hooks slack com/%zz/secretx"}}, wantField: FieldWebhooks, wantMsg: `"a"`},
		"relative":                   {cfg: map[string]any{FieldWebhooks: map[string]any{"a": "/services/T/B/secretx"}}, wantField: FieldWebhooks},
		"empty url":                  {cfg: map[string]any{FieldWebhooks: map[string]any{"a": ""}}, wantField: FieldWebhooks},
		"user info":                  {cfg: map[string]any{FieldWebhooks: map[string]any{"a": "https://u:secretx@hooks.slack.com/x"}}, wantField: FieldWebhooks},
		"opaque":                     {cfg: map[string]any{FieldWebhooks: map[string]any{"a": "https:secretx"}}, wantField: FieldWebhooks},
		"empty name":                 {cfg: map[string]any{FieldWebhooks: map[string]any{"": "https://h.example/x"}}, wantField: FieldWebhooks},
		"name with space":            {cfg: map[string]any{FieldWebhooks: map[string]any{"a b": "https://h.example/x"}}, wantField: FieldWebhooks},
		"name not utf-8":             {cfg: map[string]any{FieldWebhooks: map[string]any{"a\xff": "https://h.example/x"}}, wantField: FieldWebhooks},
		"name too long":              {cfg: map[string]any{FieldWebhooks: map[string]any{long: "https://h.example/x"}}, wantField: FieldWebhooks},
		"too many":                   {cfg: map[string]any{FieldWebhooks: many}, wantField: FieldWebhooks},
		"webhook not string":         {cfg: map[string]any{FieldWebhooks: map[string]any{"a": 5}}, wantField: FieldWebhooks},
		"webhooks a list":            {cfg: map[string]any{FieldWebhooks: []any{"https://h.example/x"}}, wantField: FieldWebhooks},
		"webhooks a string":          {cfg: map[string]any{FieldWebhooks: "https://h.example/x"}, wantField: FieldWebhooks},
		"unknown default":            {cfg: map[string]any{FieldWebhooks: map[string]any{"a": "https://h.example/x"}, FieldDefaultWebhook: "b"}, wantField: FieldDefaultWebhook},
		"default in bot mode":        {cfg: map[string]any{FieldToken: "xoxb-1", FieldDefaultWebhook: "b"}, wantField: FieldDefaultWebhook},
		"bad mode":                   {cfg: map[string]any{FieldMode: "incoming", FieldWebhooks: map[string]any{"a": "https://h.example/x"}}, wantField: FieldMode},
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
				t.Errorf("ConfigError.Field (-want +got):\n%s\n(error: %v)", diff, err)
			}
			if !strings.Contains(ce.Msg, tc.wantMsg) {
				t.Errorf("ConfigError.Msg = %q, want it to contain %q", ce.Msg, tc.wantMsg)
			}
			if strings.Contains(err.Error(), "secretx") {
				t.Errorf("error %q repeats the secret webhook URL", err)
			}
		})
	}
}

func TestWebhookConfigAccepts(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"slack https":   "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
		"loopback ipv4": "http://127.0.0.1:4010/services/T/B/x",
		"loopback ipv6": "http://[::1]:4010/services/T/B/x",
		"localhost":     "http://localhost:4010/services/T/B/x",
	}
	for name, u := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := configure(t, map[string]any{FieldWebhooks: map[string]any{"only": u}})
			cfg, _, _, err := s.configured()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Mode != ModeWebhook || cfg.DefaultWebhook != "only" {
				t.Errorf("mode %q default %q, want webhook and the only webhook", cfg.Mode, cfg.DefaultWebhook)
			}
		})
	}
}

// TestBotModeSendsBlocks checks that chat.postMessage carries the same
// template blocks as a webhook.
func TestBotModeSendsBlocks(t *testing.T) {
	t.Parallel()
	peer := startSlackPeer(t)
	s := configure(t, peerConfig(peer))
	d := delivery("d1", "U0ALICE")
	d.Content.Data = json.RawMessage(`{"blocks":"[{\"type\":\"divider\"}]"}`)
	bad := delivery("d2", "U0ALICE")
	bad.Content.Data = json.RawMessage(`{"blocks":"{\"type\":\"divider\"}"}`)
	got := send(t, s, d, bad)
	want := []sdk.Result{sdk.Sent("d1", "D0ALICE:1700000000.000001"), sdk.Permanent("d2", "", CodeInvalidBlocks)}
	if diff := cmp.Diff(want, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if posts := peer.posted(); len(posts) != 1 || posts[0].Blocks != `[{"type":"divider"}]` {
		t.Errorf("posted %+v, want one message with the divider block", posts)
	}
}

// TestWebhookPlaceDestination: a post to a place goes to the webhook its
// destination names, over the recipient's slack_webhook attribute and the
// default; a destination that names no webhook is a permanent failure of
// that post alone.
func TestWebhookPlaceDestination(t *testing.T) {
	t.Parallel()
	peer := startWebhookPeer(t)
	cfg := webhookConfig(peer, map[string]string{"ops": hookOK, "alerts": hookAlerts})
	cfg[FieldDefaultWebhook] = "ops"
	s := configure(t, cfg)
	place := func(dest string) map[string]string {
		return map[string]string{sdk.AttrPlace: "restaurant:42", sdk.AttrDestination: dest, AttrSlackWebhook: "ops"}
	}
	got := send(t, s,
		webhookDelivery("d1", "", place("alerts")),
		webhookDelivery("d2", "", place("restaurant-9")),
	)
	want := []sdk.Result{sdk.Sent("d1", "webhook:alerts"), sdk.Permanent("d2", "", CodeUnknownWebhook)}
	if diff := cmp.Diff(want, got, ignoreText); diff != "" {
		t.Fatalf("results (-want +got):\n%s", diff)
	}
	if posts := peer.posted(); len(posts) != 1 || posts[0].Path != hookAlerts {
		t.Errorf("posted %+v, want one post to %s", posts, hookAlerts)
	}
}
