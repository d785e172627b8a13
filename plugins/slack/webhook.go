package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/heraldhq/herald/sdk"
)

// Permanent codes of webhook mode. Slack's own answers (invalid_payload,
// channel_not_found, channel_is_archived, action_prohibited, …) are passed
// through as codes.
const (
	// CodeWebhookRevoked: Slack no longer knows the webhook (removed,
	// revoked, its app uninstalled or its workspace gone: 404, 410 or
	// no_service and its kin). Nothing is posted until the operator
	// replaces the URL.
	CodeWebhookRevoked = "webhook_revoked"
	// CodeUnknownWebhook: the delivery names a webhook the config lacks.
	CodeUnknownWebhook = "unknown_webhook"
)

// MaxWebhookResponse bounds the part of a webhook's answer the plugin reads.
const MaxWebhookResponse = 4 << 10

// revokedAnswers are Slack's webhook answers for a hook that no longer
// exists or may no longer post.
var revokedAnswers = map[string]bool{
	"no_service":      true,
	"no_service_id":   true,
	"no_team":         true,
	"team_disabled":   true,
	"invalid_token":   true,
	"invalid_team":    true,
	"no_active_hooks": true,
	"token_revoked":   true,
}

// webhookMessage is what an incoming webhook takes: slack-go's
// WebhookMessage plus the message metadata chat.postMessage also carries.
type webhookMessage struct {
	slack.WebhookMessage
	Metadata *slack.SlackMetadata `json:"metadata,omitempty"`
}

// pickWebhook returns the name of the webhook a delivery goes to: the
// template's data.webhook, else, for a post to a place, the destination
// the place's group holds for the channel, else the recipient's
// slack_webhook attribute, else the configured default.
func pickWebhook(cfg Config, d sdk.Delivery, m message) string {
	if m.webhook != "" {
		return m.webhook
	}
	if _, dest, place := d.Recipient.Place(); place {
		return strings.TrimSpace(dest)
	}
	if name := strings.TrimSpace(d.Recipient.Attributes[AttrSlackWebhook]); name != "" {
		return name
	}
	return cfg.DefaultWebhook
}

// sendWebhooks posts one message per delivery to its webhook, one at a
// time. Once Slack rate limits a post, the rest of the batch is reported
// rate limited without being posted.
func (s *Slack) sendWebhooks(ctx context.Context, cfg Config, hc *http.Client, batch []sdk.Delivery) []sdk.Result {
	results := make([]sdk.Result, len(batch))
	var limited *sdk.Result
	for i, d := range batch {
		m, err := renderMessage(d)
		var me *messageError
		if errors.As(err, &me) {
			results[i] = sdk.Permanent(d.DeliveryID, me.Error(), me.code)
			continue
		}
		name := pickWebhook(cfg, d, m)
		hook, ok := cfg.hooks[name]
		switch {
		case name == "":
			results[i] = sdk.Permanent(d.DeliveryID, "slack: no webhook picked (no template data.webhook, no place destination, no slack_webhook attribute, and no default_webhook with several webhooks)", CodeNoAddress)
			continue
		case !ok:
			results[i] = sdk.Permanent(d.DeliveryID, fmt.Sprintf("slack: webhook %.64q is not a name in the webhooks config", name), CodeUnknownWebhook)
			continue
		case limited != nil:
			results[i] = sdk.RateLimited(d.DeliveryID, limited.Reason, limited.RetryAfter)
			continue
		case ctx.Err() != nil:
			results[i] = sdk.Retry(d.DeliveryID, "slack: "+ctx.Err().Error(), 0)
			continue
		}
		msg := webhookMessage{WebhookMessage: slack.WebhookMessage{Text: m.text}, Metadata: &m.metadata}
		if len(m.blocks) > 0 {
			msg.Blocks = &slack.Blocks{BlockSet: m.blocks}
		}
		results[i] = postWebhook(ctx, hc, name, hook, d.DeliveryID, msg)
		if results[i].Outcome == sdk.OutcomeRateLimited {
			limited = &results[i]
		}
	}
	return results
}

// postWebhook posts one message and classifies Slack's answer. It does
// not use slack-go's PostWebhookCustomHTTPContext, which drops the answer's
// body: Slack's webhooks say what went wrong only there, as plain text
// (invalid_payload, no_service, channel_not_found, …).
func postWebhook(ctx context.Context, hc *http.Client, name string, hook *url.URL, id string, msg webhookMessage) sdk.Result {
	body, err := json.Marshal(msg)
	if err != nil {
		return sdk.Permanent(id, "slack: webhook "+name+": encode message: "+err.Error(), CodeInvalidBlocks)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook.String(), bytes.NewReader(body))
	if err != nil {
		return sdk.Retry(id, "slack: webhook "+name+": "+redactURLError(err), 0)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := hc.Do(req)
	if err != nil {
		return sdk.Retry(id, "slack: webhook "+name+": "+redactURLError(err), 0)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, MaxWebhookResponse))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return classifyWebhook(id, name, resp.StatusCode, resp.Header.Get("Retry-After"), string(answer), time.Now())
}

// classifyWebhook turns an incoming webhook's answer into a Result.
func classifyWebhook(id, name string, status int, retryAfter, answer string, now time.Time) sdk.Result {
	text := strings.TrimSpace(answer)
	if len(text) > 200 {
		text = text[:200]
	}
	reason := fmt.Sprintf("slack: webhook %s: HTTP %d %q", name, status, text)
	code := slackCode(text)
	switch {
	case status >= 200 && status < 300:
		return sdk.Sent(id, "webhook:"+name)
	case status == http.StatusTooManyRequests:
		wait := parseRetryAfter(retryAfter, now)
		if wait <= 0 {
			wait = DefaultRateLimitWait
		}
		return sdk.RateLimited(id, reason, wait)
	case status >= 500:
		return sdk.Retry(id, reason, parseRetryAfter(retryAfter, now))
	case revokedAnswers[code]:
		return sdk.Permanent(id, reason, CodeWebhookRevoked)
	case code == "channel_not_found", code == "channel_is_archived", code == "invalid_payload",
		code == "action_prohibited", code == "user_not_found", code == "posting_to_general_channel_denied",
		code == "no_text", code == "too_many_attachments", code == "invalid_blocks", code == "invalid_blocks_format":
		return sdk.Permanent(id, reason, code)
	case status == http.StatusNotFound, status == http.StatusGone:
		return sdk.Permanent(id, reason, CodeWebhookRevoked)
	case status == http.StatusRequestTimeout:
		return sdk.Retry(id, reason, 0)
	}
	return sdk.Permanent(id, reason, "http_"+strconv.Itoa(status))
}

// slackCode returns answer when it looks like one of Slack's error codes
// (lower case letters, digits and underscores), else "".
func slackCode(answer string) string {
	if answer == "" || len(answer) > 64 {
		return ""
	}
	for _, r := range answer {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' {
			return ""
		}
	}
	return answer
}

// parseRetryAfter reads a Retry-After header: seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(min(n, 24*3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), 24*time.Hour)
	}
	return 0
}

// redactURLError drops the request URL (which holds the webhook's secret)
// from net/http's errors.
func redactURLError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + ": " + ue.Err.Error()
	}
	return err.Error()
}

// healthWebhooks probes every webhook by posting an empty message, which
// Slack refuses (400 no_text or invalid_payload) without posting anything:
// any such answer proves the hook is there. A revoked hook answers 404,
// 410 or no_service and its kin, an outage 5xx. The provider is healthy
// while at least one webhook is live (one revoked hook must not stop the
// others' deliveries, which fail on their own with webhook_revoked); the
// message names the webhooks that failed.
func healthWebhooks(ctx context.Context, cfg Config, hc *http.Client) sdk.HealthResponse {
	names := make([]string, 0, len(cfg.hooks))
	for name := range cfg.hooks {
		names = append(names, name)
	}
	slices.Sort(names)
	var live, failed []string
	for _, name := range names {
		if err := probeWebhook(ctx, hc, cfg.hooks[name]); err != nil {
			failed = append(failed, name+" ("+err.Error()+")")
			continue
		}
		live = append(live, name)
	}
	msg := fmt.Sprintf("slack: %d of %d incoming webhooks answer", len(live), len(names))
	if len(live) > 0 {
		msg += ": " + strings.Join(live, ", ")
	}
	if len(failed) > 0 {
		msg += "; failing: " + strings.Join(failed, ", ")
	}
	return sdk.HealthResponse{Healthy: len(live) > 0, Message: msg}
}

// probeWebhook posts an empty message to one webhook.
func probeWebhook(ctx context.Context, hc *http.Client, hook *url.URL) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook.String(), strings.NewReader("{}"))
	if err != nil {
		return errors.New(redactURLError(err))
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := hc.Do(req)
	if err != nil {
		return errors.New(redactURLError(err))
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, MaxWebhookResponse))
	code := slackCode(strings.TrimSpace(string(answer)))
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone || revokedAnswers[code] {
		return fmt.Errorf("HTTP %d %q", resp.StatusCode, clip(string(answer), 100))
	}
	return nil
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n]
	}
	return s
}
