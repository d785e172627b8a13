package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/sdk"
)

// FuzzRenderMessage feeds arbitrary template data (Content.Data) and text
// to the renderer both modes share: it never panics, and a message it
// accepts has text or at most MaxBlocks blocks that marshal back to JSON.
func FuzzRenderMessage(f *testing.F) {
	f.Add(`{"blocks":"[{\"type\":\"divider\"}]","webhook":"ops"}`, "title", "body")
	f.Add(`{"blocks":[{"type":"section","text":{"type":"mrkdwn","text":"x"}}]}`, "", "")
	f.Add(`{"blocks":"[{\"type\":\"unknown_kind\",\"x\":1}]"}`, "", "b")
	f.Add(`{"webhook":5}`, "t", "")
	f.Add(`[1,2]`, "\xff", "\x00")
	f.Add(`{"blocks":"[`+strings.Repeat(`{\"type\":\"divider\"},`, 60)+`{\"type\":\"divider\"}]"}`, "", "")
	f.Fuzz(func(t *testing.T, data, title, body string) {
		d := sdk.Delivery{DeliveryID: "d1", Content: sdk.Content{Title: title, Body: body, Data: json.RawMessage(data)}}
		m, err := renderMessage(d)
		if err != nil {
			if _, ok := err.(*messageError); !ok {
				t.Fatalf("error %T %v, want *messageError", err, err)
			}
			return
		}
		if m.text == "" && len(m.blocks) == 0 {
			t.Fatal("accepted a message with no text and no blocks")
		}
		if len(m.blocks) > MaxBlocks {
			t.Fatalf("accepted %d blocks", len(m.blocks))
		}
		if _, err := json.Marshal(webhookMessage{Metadata: &m.metadata}); err != nil {
			t.Fatalf("metadata does not marshal: %v", err)
		}
	})
}

// FuzzClassifyWebhook feeds arbitrary answers to the webhook classifier:
// it never panics, returns one result for the delivery with an outcome,
// and a rate limit always carries a positive delay of at most a day.
func FuzzClassifyWebhook(f *testing.F) {
	f.Add(200, "", "ok")
	f.Add(429, "7", "rate_limited")
	f.Add(429, "Wed, 21 Oct 2099 07:28:00 GMT", "")
	f.Add(404, "", "no_service")
	f.Add(410, "", "<html>")
	f.Add(400, "", "invalid_payload")
	f.Add(503, "-1", "\xff\x00")
	f.Fuzz(func(t *testing.T, status int, retryAfter, answer string) {
		r := classifyWebhook("d1", "ops", status, retryAfter, answer, time.Unix(1700000000, 0))
		if r.DeliveryID != "d1" || r.Outcome == sdk.OutcomeUnspecified {
			t.Fatalf("result %+v", r)
		}
		if r.Outcome == sdk.OutcomeRateLimited && (r.RetryAfter <= 0 || r.RetryAfter > 24*time.Hour) {
			t.Fatalf("rate limited with delay %v", r.RetryAfter)
		}
		if r.Outcome == sdk.OutcomePermanent && r.Code == "" {
			t.Fatalf("permanent without a code: %+v", r)
		}
	})
}

// FuzzWebhookConfig feeds arbitrary webhook names and URLs to Configure's
// checks: never a panic, every refusal a ConfigError naming a field, and
// an accepted URL is https or http to a loopback host.
func FuzzWebhookConfig(f *testing.F) {
	f.Add("ops", "https://hooks.slack.com/services/T/B/x", "")
	f.Add("ops", "http://127.0.0.1:4010/services/T/B/x", "ops")
	f.Add("a b", "http://[::1]/x", "zz")
	f.Add("\xff", "https:opaque", "")
	f.Add("", "%zz", "")
	f.Fuzz(func(t *testing.T, name, rawURL, def string) {
		cfg := map[string]any{FieldWebhooks: map[string]any{name: rawURL}}
		if def != "" {
			cfg[FieldDefaultWebhook] = def
		}
		c, err := configFromParsed(cfg)
		if err != nil {
			ce, ok := err.(*sdk.ConfigError)
			if !ok || ce.Field == "" {
				t.Fatalf("error %T %v, want a ConfigError naming a field", err, err)
			}
			return
		}
		u := c.hooks[name]
		if u == nil || (u.Scheme != "https" && !(u.Scheme == "http" && loopbackHost(u.Hostname()))) {
			t.Fatalf("accepted %q as %v", rawURL, u)
		}
	})
}
