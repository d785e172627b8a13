package main

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/heraldhq/herald/sdk"
)

// Version is the plugin's own version; make stamps it from git with -ldflags "-X main.Version=...".
var Version = "0.1.0"

// MaxBatch is the largest batch one Send accepts.
const MaxBatch = 20

// MetadataEventType is the Slack message metadata event type Herald posts
// with; its payload carries the idempotency key and delivery ids.
const MetadataEventType = "herald_notification"

// Permanent codes the plugin sets itself (Slack's error strings, such as
// "channel_not_found", are passed through).
const CodeNoAddress = "no_address"

// DefaultRateLimitWait is the wait after a "ratelimited" answer that came
// without a Retry-After header.
const DefaultRateLimitWait = 30 * time.Second

// ErrNotConfigured prompts the host to call Configure before Send or Health.
var ErrNotConfigured = errors.New("slack: not configured")

// transientErrors are Slack error strings that a later retry may get past.
var transientErrors = map[string]bool{
	"internal_error":      true,
	"fatal_error":         true,
	"service_unavailable": true,
	"request_timeout":     true,
	"team_added_to_org":   true,
}

// configErrors are Slack error strings that fail every message until the
// operator fixes the token or the app's scopes; deliveries wait for that
// instead of failing.
var configErrors = map[string]bool{
	"not_authed":             true,
	"invalid_auth":           true,
	"account_inactive":       true,
	"token_revoked":          true,
	"token_expired":          true,
	"no_permission":          true,
	"missing_scope":          true,
	"not_allowed_token_type": true,
	"ekm_access_denied":      true,
}

// Slack is the SLACK channel over the Slack Web API (chat.postMessage).
type Slack struct {
	mu     sync.RWMutex
	cfg    Config
	client *slack.Client
}

var _ sdk.Channel = (*Slack)(nil)

// New returns an unconfigured slack channel; Serve calls it once.
func New() sdk.Channel { return &Slack{} }

// Describe returns the plugin's static description.
func (s *Slack) Describe(ctx context.Context, _ sdk.DescribeRequest) (sdk.DescribeResponse, error) {
	return sdk.DescribeResponse{Description: sdk.Description{
		ChannelType:   "SLACK",
		Provider:      "slack",
		PluginVersion: Version,
		Class:         sdk.BestEffort,
		MaxBatch:      MaxBatch,
		Config:        configSpecs,
	}}, nil
}

// Configure checks the config and prepares the Slack client.
func (s *Slack) Configure(ctx context.Context, req sdk.ConfigureRequest) (sdk.ConfigureResponse, error) {
	cfg, err := configFromParsed(req.Config)
	if err != nil {
		return sdk.ConfigureResponse{}, err
	}
	client := slack.New(cfg.Token,
		slack.OptionAPIURL(cfg.APIURL),
		slack.OptionHTTPClient(&http.Client{Timeout: cfg.Timeout}))
	s.mu.Lock()
	s.cfg, s.client = cfg, client
	s.mu.Unlock()
	return sdk.ConfigureResponse{}, nil
}

func (s *Slack) configured() (Config, *slack.Client, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.client == nil {
		return Config{}, nil, ErrNotConfigured
	}
	return s.cfg, s.client, nil
}

// Health calls auth.test: it proves the API answers and the token is valid.
func (s *Slack) Health(ctx context.Context, _ sdk.HealthRequest) (sdk.HealthResponse, error) {
	_, client, err := s.configured()
	if err != nil {
		return sdk.HealthResponse{Healthy: false, Message: err.Error()}, nil
	}
	resp, err := client.AuthTestContext(ctx)
	if err != nil {
		return sdk.HealthResponse{Healthy: false, Message: "slack: auth.test: " + err.Error()}, nil
	}
	return sdk.HealthResponse{Healthy: true, Message: "slack: authenticated as " + resp.User + " in team " + resp.Team}, nil
}

// Send posts one message per delivery, one at a time (Slack limits
// chat.postMessage per channel to about one a second). Once Slack rate
// limits the app, the rest of the batch is reported rate limited without
// being posted.
func (s *Slack) Send(ctx context.Context, req sdk.SendRequest) (sdk.SendResponse, error) {
	batch := req.Deliveries
	cfg, client, err := s.configured()
	if err != nil {
		return sdk.SendResponse{}, err
	}
	results := make([]sdk.Result, len(batch))
	var limited *sdk.Result
	for i, d := range batch {
		target := strings.TrimSpace(d.Recipient.Attributes[AttrSlackUserID])
		if target == "" {
			target = cfg.DefaultChannel
		}
		switch {
		case target == "":
			results[i] = sdk.Permanent(d.DeliveryID, "slack: recipient has no slack_user_id attribute and no default_channel is configured", CodeNoAddress)
			continue
		case limited != nil:
			results[i] = sdk.RateLimited(d.DeliveryID, limited.Reason, limited.RetryAfter)
			continue
		case ctx.Err() != nil:
			results[i] = sdk.Retry(d.DeliveryID, "slack: "+ctx.Err().Error(), 0)
			continue
		}
		channel, ts, err := client.PostMessageContext(ctx, target, messageOptions(d)...)
		if err != nil {
			results[i] = classify(d.DeliveryID, err)
			if results[i].Outcome == sdk.OutcomeRateLimited {
				limited = &results[i]
			}
			continue
		}
		results[i] = sdk.Sent(d.DeliveryID, channel+":"+ts)
	}
	return sdk.SendResponse{Results: results}, nil
}

// messageOptions renders a delivery as chat.postMessage arguments: the
// title in bold over the body, and Herald's ids in the message metadata.
func messageOptions(d sdk.Delivery) []slack.MsgOption {
	title := d.Content.Title
	if title == "" {
		title = d.Content.Subject
	}
	text := d.Content.Body
	if title != "" {
		text = "*" + title + "*\n" + text
	}
	key := d.IdempotencyKey
	if key == "" {
		key = d.DeliveryID
	}
	payload := map[string]any{
		"idempotency_key": key,
		"delivery_id":     d.DeliveryID,
	}
	if d.NotificationID != "" {
		payload["notification_id"] = d.NotificationID
	}
	if d.EventType != "" {
		payload["event_type"] = d.EventType
	}
	return []slack.MsgOption{
		slack.MsgOptionText(strings.TrimSpace(text), false),
		slack.MsgOptionMetadata(slack.SlackMetadata{EventType: MetadataEventType, EventPayload: payload}),
	}
}

// classify turns a slack-go error into a Result.
func classify(id string, err error) sdk.Result {
	reason := "slack: chat.postMessage: " + err.Error()
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		wait := rl.RetryAfter
		if wait <= 0 {
			wait = DefaultRateLimitWait
		}
		return sdk.RateLimited(id, reason, wait)
	}
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		switch {
		case se.Err == "ratelimited":
			return sdk.RateLimited(id, reason, DefaultRateLimitWait)
		case transientErrors[se.Err], configErrors[se.Err]:
			return sdk.Retry(id, reason, 0)
		}
		return sdk.Permanent(id, reason, se.Err)
	}
	var sc slack.StatusCodeError
	if errors.As(err, &sc) && sc.Code >= 400 && sc.Code < 500 &&
		sc.Code != http.StatusTooManyRequests && sc.Code != http.StatusUnauthorized && sc.Code != http.StatusForbidden {
		return sdk.Permanent(id, reason, "http_"+strconv.Itoa(sc.Code))
	}
	// 5xx, a 429 without Retry-After, transport errors and timeouts.
	return sdk.Retry(id, reason, 0)
}
