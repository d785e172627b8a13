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

// Slack is the SLACK channel over the Slack Web API (chat.postMessage, bot
// mode) or Slack's incoming webhooks (webhook mode).
type Slack struct {
	mu  sync.RWMutex
	cfg Config
	// client is the Web API client (bot mode).
	client *slack.Client
	// hc posts to webhooks (webhook mode).
	hc *http.Client
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

// Configure checks the config and prepares the Slack client (bot mode) or
// the webhooks' HTTP client (webhook mode).
func (s *Slack) Configure(ctx context.Context, req sdk.ConfigureRequest) (sdk.ConfigureResponse, error) {
	cfg, err := configFromParsed(req.Config)
	if err != nil {
		return sdk.ConfigureResponse{}, err
	}
	hc := &http.Client{Timeout: cfg.Timeout}
	var client *slack.Client
	if cfg.Mode == ModeBot {
		client = slack.New(cfg.Token, slack.OptionAPIURL(cfg.APIURL), slack.OptionHTTPClient(hc))
	} else {
		// A webhook's answer is final: a redirect is not followed (Slack
		// sends none), so the URL's secret never goes to another host.
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	s.mu.Lock()
	s.cfg, s.client, s.hc = cfg, client, hc
	s.mu.Unlock()
	return sdk.ConfigureResponse{}, nil
}

func (s *Slack) configured() (Config, *slack.Client, *http.Client, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.hc == nil {
		return Config{}, nil, nil, ErrNotConfigured
	}
	return s.cfg, s.client, s.hc, nil
}

// Health calls auth.test in bot mode: it proves the API answers and the
// token is valid. In webhook mode it probes every webhook
// (healthWebhooks).
func (s *Slack) Health(ctx context.Context, _ sdk.HealthRequest) (sdk.HealthResponse, error) {
	cfg, client, hc, err := s.configured()
	if err != nil {
		return sdk.HealthResponse{Healthy: false, Message: err.Error()}, nil
	}
	if cfg.Mode == ModeWebhook {
		return healthWebhooks(ctx, cfg, hc), nil
	}
	resp, err := client.AuthTestContext(ctx)
	if err != nil {
		return sdk.HealthResponse{Healthy: false, Message: "slack: auth.test: " + err.Error()}, nil
	}
	return sdk.HealthResponse{Healthy: true, Message: "slack: authenticated as " + resp.User + " in team " + resp.Team}, nil
}

// Send posts one message per delivery, one at a time (Slack limits
// chat.postMessage per channel, and each webhook, to about one a second).
// Once Slack rate limits the app, the rest of the batch is reported rate
// limited without being posted.
func (s *Slack) Send(ctx context.Context, req sdk.SendRequest) (sdk.SendResponse, error) {
	batch := req.Deliveries
	cfg, client, hc, err := s.configured()
	if err != nil {
		return sdk.SendResponse{}, err
	}
	if cfg.Mode == ModeWebhook {
		return sdk.SendResponse{Results: s.sendWebhooks(ctx, cfg, hc, batch)}, nil
	}
	results := make([]sdk.Result, len(batch))
	var limited *sdk.Result
	for i, d := range batch {
		target := strings.TrimSpace(d.Recipient.Attributes[AttrSlackUserID])
		if _, dest, place := d.Recipient.Place(); place {
			// A post to a place: the destination is the channel's id.
			target = strings.TrimSpace(dest)
		}
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
		opts, err := messageOptions(d)
		var me *messageError
		if errors.As(err, &me) {
			results[i] = sdk.Permanent(d.DeliveryID, me.Error(), me.code)
			continue
		}
		channel, ts, err := client.PostMessageContext(ctx, target, opts...)
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

// messageOptions renders a delivery as chat.postMessage arguments
// (renderMessage): text, the template's blocks, and Herald's ids in the
// message metadata.
func messageOptions(d sdk.Delivery) ([]slack.MsgOption, error) {
	m, err := renderMessage(d)
	if err != nil {
		return nil, err
	}
	opts := []slack.MsgOption{
		slack.MsgOptionText(m.text, false),
		slack.MsgOptionMetadata(m.metadata),
	}
	if len(m.blocks) > 0 {
		opts = append(opts, slack.MsgOptionBlocks(m.blocks...))
	}
	return opts, nil
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
