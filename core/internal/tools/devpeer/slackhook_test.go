package devpeer

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/slack-go/slack"
)

// hookCall posts body to a webhook path of the peer and returns the status,
// the Retry-After header and the plain-text answer.
func hookCall(t *testing.T, base, path, contentType, body string) (int, string, string) {
	t.Helper()
	resp, err := httpClient.Do(newReq(t, http.MethodPost, base+path, contentType, body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("POST %s: Content-Type %q, want text/plain (webhooks answer plain text)", path, ct)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(raw)
}

func TestSlackWebhookPeerAnswers(t *testing.T) {
	t.Parallel()
	p, sink := startPeers(t)
	const hook = "/services/T0HERALDDEV/B0ALERTS/demo"
	const jsonCT = "application/json"
	tests := map[string]struct {
		path, contentType, body string
		status                  int
		retryAfter, answer      string
	}{
		"text":               {hook, jsonCT, `{"text":"disk full"}`, 200, "", "ok"},
		"blocks only":        {hook, jsonCT, `{"blocks":[{"type":"divider"}]}`, 200, "", "ok"},
		"form payload":       {hook, "application/x-www-form-urlencoded", `payload=%7B%22text%22%3A%22hi%22%7D`, 200, "", "ok"},
		"empty message":      {hook, jsonCT, `{}`, 400, "", "no_text"},
		"not json":           {hook, jsonCT, `{"text":`, 400, "", "invalid_payload"},
		"json array":         {hook, jsonCT, `["text"]`, 400, "", "invalid_payload"},
		"text not string":    {hook, jsonCT, `{"text":5}`, 400, "", "invalid_payload"},
		"wrong type":         {hook, "text/plain", `{"text":"x"}`, 400, "", "invalid_payload"},
		"blocks not array":   {hook, jsonCT, `{"blocks":{"type":"divider"}}`, 400, "", "invalid_blocks"},
		"block without type": {hook, jsonCT, `{"blocks":[{"text":"x"}]}`, 400, "", "invalid_blocks"},
		"too many blocks":    {hook, jsonCT, `{"blocks":[` + strings.Repeat(`{"type":"divider"},`, 50) + `{"type":"divider"}]}`, 400, "", "invalid_blocks"},
		"revoked":            {"/services/T0HERALDDEV/B0ALERTS/revoked", jsonCT, `{"text":"x"}`, 404, "", "no_service"},
		"archived":           {"/services/T0HERALDDEV/B0ALERTS/archived", jsonCT, `{"text":"x"}`, 410, "", "channel_is_archived"},
		"rate limited":       {"/services/T0HERALDDEV/B0ALERTS/ratelimited", jsonCT, `{"text":"x"}`, 429, "30", "rate_limited"},
		"bad team":           {"/services/x/B0ALERTS/demo", jsonCT, `{"text":"x"}`, 404, "", "no_service"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			status, retryAfter, answer := hookCall(t, p.HTTPURL(), tc.path, tc.contentType, tc.body)
			if status != tc.status || retryAfter != tc.retryAfter || answer != tc.answer {
				t.Errorf("answer %d (Retry-After %q) %q, want %d (%q) %q", status, retryAfter, answer, tc.status, tc.retryAfter, tc.answer)
			}
		})
	}
	sink.waitLine(t, "slack", "webhook posted", "hook=T0HERALDDEV/B0ALERTS", `text="disk full"`)
	sink.waitLine(t, "slack", "webhook posted", "blocks=1")
	sink.waitLine(t, "slack", "webhook rejected", "404 no_service")
	sink.waitLine(t, "slack", "webhook probe", "no_text")
}

// TestSlackWebhookPeerWithSlackGo posts through slack-go's own webhook
// client, the library the plugin builds its messages with.
func TestSlackWebhookPeerWithSlackGo(t *testing.T) {
	t.Parallel()
	p, sink := startPeers(t)
	msg := &slack.WebhookMessage{
		Text:   "fallback",
		Blocks: &slack.Blocks{BlockSet: []slack.Block{slack.NewDividerBlock(), slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, "Alert", false, false))}},
	}
	if err := slack.PostWebhookCustomHTTP(p.HTTPURL()+"/services/T0HERALDDEV/B0OPS/x", httpClient, msg); err != nil {
		t.Fatalf("PostWebhook: %v", err)
	}
	sink.waitLine(t, "slack", "webhook posted", "hook=T0HERALDDEV/B0OPS", `text="fallback"`, "blocks=2")
	err := slack.PostWebhookCustomHTTP(p.HTTPURL()+"/services/T0HERALDDEV/B0OPS/revoked", httpClient, msg)
	var sc slack.StatusCodeError
	if !errors.As(err, &sc) || sc.Code != http.StatusNotFound {
		t.Errorf("PostWebhook to the revoked hook = %v, want a 404 StatusCodeError", err)
	}
}
