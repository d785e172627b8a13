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
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/plugins/internal/retryafter"
	"github.com/heraldhq/herald/sdk"
)

// Version is the plugin's own version; make stamps it from git with -ldflags "-X main.Version=...".
var Version = "0.1.0"

// MaxBatch is the largest batch one Send accepts.
const MaxBatch = 100

// Data keys the plugin adds to every FCM message's data map.
const (
	DataIdempotencyKey = "herald_idempotency_key"
	DataDeliveryID     = "herald_delivery_id"
	DataNotificationID = "herald_notification_id"
	DataEventType      = "herald_event_type"
	DataSeverity       = "herald_severity"
	// DataPayload holds Content.Data when it is not a JSON object.
	DataPayload = "herald_data"
)

// Permanent codes the plugin sets itself (FCM's own error codes, such as
// UNREGISTERED and INVALID_ARGUMENT, are passed through).
const (
	CodeNoAddress = "no_address"
)

// DefaultRateLimitWait is the wait after a 429 without Retry-After; FCM asks
// for at least a minute before retrying a quota error.
const DefaultRateLimitWait = time.Minute

// ErrNotConfigured prompts the host to call Configure before Send or Health.
var ErrNotConfigured = errors.New("push: not configured")

// Push is the PUSH channel over the FCM HTTP v1 API.
type Push struct {
	mu     sync.RWMutex
	cfg    Config
	hc     *http.Client
	tokens *tokenSource
}

var _ sdk.Channel = (*Push)(nil)

// New returns an unconfigured push channel; Serve calls it once.
func New() sdk.Channel { return &Push{} }

// Describe returns the plugin's static description.
func (p *Push) Describe(ctx context.Context, _ sdk.DescribeRequest) (sdk.DescribeResponse, error) {
	return sdk.DescribeResponse{Description: sdk.Description{
		ChannelType:   "PUSH",
		Provider:      "fcm",
		PluginVersion: Version,
		Class:         sdk.Persistent,
		MaxBatch:      MaxBatch,
		Config:        configSpecs,
	}}, nil
}

// Configure checks the config and prepares the HTTP client.
func (p *Push) Configure(ctx context.Context, req sdk.ConfigureRequest) (sdk.ConfigureResponse, error) {
	cfg, err := configFromParsed(req.Config)
	if err != nil {
		return sdk.ConfigureResponse{}, err
	}
	hc := &http.Client{Timeout: cfg.Timeout}
	p.mu.Lock()
	p.cfg, p.hc = cfg, hc
	p.tokens = &tokenSource{static: cfg.AccessToken, sa: cfg.creds, hc: hc}
	p.mu.Unlock()
	return sdk.ConfigureResponse{}, nil
}

func (p *Push) configured() (Config, *http.Client, *tokenSource, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.hc == nil {
		return Config{}, nil, nil, ErrNotConfigured
	}
	return p.cfg, p.hc, p.tokens, nil
}

// Health validates (validate_only) a message to the "herald-health" topic:
// it proves the endpoint answers and accepts the credentials for the
// project, and delivers nothing.
func (p *Push) Health(ctx context.Context, _ sdk.HealthRequest) (sdk.HealthResponse, error) {
	cfg, hc, tokens, err := p.configured()
	if err != nil {
		return sdk.HealthResponse{Healthy: false, Message: err.Error()}, nil
	}
	msg := fcmMessage{Topic: "herald-health", Data: map[string]string{"herald_health": "1"}}
	out := post(ctx, cfg, hc, tokens, fcmRequest{ValidateOnly: true, Message: msg})
	if out.kind != sdk.OutcomeSent {
		return sdk.HealthResponse{Healthy: false, Message: out.reason}, nil
	}
	return sdk.HealthResponse{Healthy: true, Message: "fcm accepted a validate-only message for project " + cfg.ProjectID}, nil
}

// Send posts one FCM message per device token, at most cfg.Concurrency at a
// time, and folds each delivery's token outcomes into one Result: Sent when
// any token accepted the message (the failed tokens are not retried, so the
// devices that got it are not notified twice), otherwise the most hopeful
// failure: rate limited, then retryable, then permanent.
func (p *Push) Send(ctx context.Context, req sdk.SendRequest) (sdk.SendResponse, error) {
	batch := req.Deliveries
	cfg, hc, tokens, err := p.configured()
	if err != nil {
		return sdk.SendResponse{}, err
	}
	type job struct {
		delivery, token int
	}
	outcomes := make([][]tokenOutcome, len(batch))
	var jobs []job
	for i, d := range batch {
		outcomes[i] = make([]tokenOutcome, len(d.Recipient.DeviceTokens))
		for j := range d.Recipient.DeviceTokens {
			jobs = append(jobs, job{i, j})
		}
	}
	work := make(chan job)
	var wg sync.WaitGroup
	for range min(cfg.Concurrency, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for jb := range work {
				d := batch[jb.delivery]
				req := fcmRequest{ValidateOnly: cfg.ValidateOnly, Message: buildMessage(d, d.Recipient.DeviceTokens[jb.token])}
				outcomes[jb.delivery][jb.token] = post(ctx, cfg, hc, tokens, req)
			}
		}()
	}
	for _, jb := range jobs {
		work <- jb
	}
	close(work)
	wg.Wait()

	results := make([]sdk.Result, len(batch))
	for i, d := range batch {
		results[i] = fold(d.DeliveryID, outcomes[i])
	}
	return sdk.SendResponse{Results: results}, nil
}

// tokenOutcome is what FCM said about one device token.
type tokenOutcome struct {
	kind       sdk.Outcome
	name       string // FCM message name, when sent
	reason     string
	code       string
	retryAfter time.Duration
}

// fold turns the outcomes of a delivery's tokens into its Result.
func fold(id string, outs []tokenOutcome) sdk.Result {
	if len(outs) == 0 {
		return sdk.Permanent(id, "push: recipient has no device tokens", CodeNoAddress)
	}
	var names []string
	best := -1
	rank := map[sdk.Outcome]int{sdk.OutcomePermanent: 0, sdk.OutcomeRetryable: 1, sdk.OutcomeRateLimited: 2}
	var reasons []string
	for i, o := range outs {
		if o.kind == sdk.OutcomeSent {
			names = append(names, o.name)
			continue
		}
		reasons = append(reasons, o.reason)
		if best < 0 || rank[o.kind] > rank[outs[best].kind] ||
			(o.kind == outs[best].kind && o.retryAfter > outs[best].retryAfter) {
			best = i
		}
	}
	if len(names) > 0 {
		return sdk.Sent(id, strings.Join(names, ","))
	}
	o := outs[best]
	reason := strings.Join(reasons, "; ")
	switch o.kind {
	case sdk.OutcomeRateLimited:
		return sdk.RateLimited(id, reason, o.retryAfter)
	case sdk.OutcomeRetryable:
		return sdk.Retry(id, reason, o.retryAfter)
	}
	return sdk.Permanent(id, reason, o.code)
}

// fcmRequest is the body of messages:send.
type fcmRequest struct {
	ValidateOnly bool       `json:"validate_only,omitempty"`
	Message      fcmMessage `json:"message"`
}

// fcmMessage is FCM v1's Message resource (the fields Herald sets).
type fcmMessage struct {
	Token        string            `json:"token,omitempty"`
	Topic        string            `json:"topic,omitempty"`
	Notification *fcmNotification  `json:"notification,omitempty"`
	Data         map[string]string `json:"data,omitempty"`
	Android      *fcmAndroid       `json:"android,omitempty"`
	APNS         *fcmAPNS          `json:"apns,omitempty"`
}

type fcmNotification struct {
	Title string `json:"title,omitempty"`
	Body  string `json:"body,omitempty"`
}

type fcmAndroid struct {
	CollapseKey string `json:"collapse_key,omitempty"`
}

type fcmAPNS struct {
	Headers map[string]string `json:"headers,omitempty"`
}

// buildMessage renders a delivery for one device token. The idempotency key
// travels in the data map and as the collapse key, so a retried message
// replaces, rather than adds to, one the device has not shown yet.
func buildMessage(d sdk.Delivery, token string) fcmMessage {
	title := d.Content.Title
	if title == "" {
		title = d.Content.Subject
	}
	data := map[string]string{}
	if len(d.Content.Data) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(d.Content.Data, &obj); err == nil && obj != nil {
			for k, v := range obj {
				var s string
				if json.Unmarshal(v, &s) == nil {
					data[k] = s
				} else {
					data[k] = string(v)
				}
			}
		} else {
			data[DataPayload] = string(d.Content.Data)
		}
	}
	key := d.IdempotencyKey
	if key == "" {
		key = d.DeliveryID
	}
	data[DataIdempotencyKey] = key
	data[DataDeliveryID] = d.DeliveryID
	if d.NotificationID != "" {
		data[DataNotificationID] = d.NotificationID
	}
	if d.EventType != "" {
		data[DataEventType] = d.EventType
	}
	if d.Severity != "" {
		data[DataSeverity] = d.Severity
	}
	msg := fcmMessage{
		Token:   token,
		Data:    data,
		Android: &fcmAndroid{CollapseKey: key},
	}
	if title != "" || d.Content.Body != "" {
		msg.Notification = &fcmNotification{Title: title, Body: d.Content.Body}
	}
	if len(key) <= 64 { // apns-collapse-id is limited to 64 bytes
		msg.APNS = &fcmAPNS{Headers: map[string]string{"apns-collapse-id": key}}
	}
	return msg
}

// fcmError is the error body of the v1 API.
type fcmError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
		Details []struct {
			Type      string `json:"@type"`
			ErrorCode string `json:"errorCode"`
		} `json:"details"`
	} `json:"error"`
}

// post sends one messages:send request and classifies the answer.
func post(ctx context.Context, cfg Config, hc *http.Client, tokens *tokenSource, body fcmRequest) tokenOutcome {
	bearer, err := tokens.Token(ctx)
	if err != nil {
		return tokenOutcome{kind: sdk.OutcomeRetryable, reason: err.Error()}
	}
	buf, err := json.Marshal(body)
	if err != nil {
		return tokenOutcome{kind: sdk.OutcomePermanent, reason: "push: encode message: " + err.Error(), code: "encode"}
	}
	u := strings.TrimRight(cfg.Endpoint, "/") + "/v1/projects/" + url.PathEscape(cfg.ProjectID) + "/messages:send"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(buf))
	if err != nil {
		return tokenOutcome{kind: sdk.OutcomeRetryable, reason: "push: request: " + err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json; charset=UTF-8")
	resp, err := hc.Do(req)
	if err != nil {
		return tokenOutcome{kind: sdk.OutcomeRetryable, reason: "push: post fcm: " + err.Error()}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 == 2 {
		var ok struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(raw, &ok); err != nil || ok.Name == "" {
			return tokenOutcome{kind: sdk.OutcomeRetryable, reason: fmt.Sprintf("push: fcm answered %s without a message name", resp.Status)}
		}
		return tokenOutcome{kind: sdk.OutcomeSent, name: ok.Name}
	}
	var fe fcmError
	_ = json.Unmarshal(raw, &fe)
	code := fe.Error.Status
	for _, det := range fe.Error.Details {
		if strings.HasSuffix(det.Type, "google.firebase.fcm.v1.FcmError") && det.ErrorCode != "" {
			code = det.ErrorCode
		}
	}
	if code == "" {
		code = fmt.Sprintf("http_%d", resp.StatusCode)
	}
	reason := fmt.Sprintf("push: fcm %s: %s: %s", resp.Status, code, fe.Error.Message)
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || code == "QUOTA_EXCEEDED":
		return tokenOutcome{kind: sdk.OutcomeRateLimited, reason: reason, code: code, retryAfter: retryafter.From(resp.Header, DefaultRateLimitWait)}
	case resp.StatusCode >= 500:
		return tokenOutcome{kind: sdk.OutcomeRetryable, reason: reason, code: code, retryAfter: retryafter.From(resp.Header, 0)}
	case resp.StatusCode == http.StatusUnauthorized || code == "THIRD_PARTY_AUTH_ERROR" ||
		code == "UNAUTHENTICATED" || code == "PERMISSION_DENIED":
		// The credentials (ours, or the APNs/web push ones in Firebase)
		// are wrong: every message fails until the operator fixes them,
		// so the deliveries wait rather than fail.
		tokens.Invalidate()
		return tokenOutcome{kind: sdk.OutcomeRetryable, reason: reason, code: code}
	}
	return tokenOutcome{kind: sdk.OutcomePermanent, reason: reason, code: code}
}
