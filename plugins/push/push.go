package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

// Push is the PUSH channel over FCM HTTP v1, Web Push (VAPID) and APNs.
type Push struct {
	mu     sync.RWMutex
	cfg    Config
	hc     *http.Client
	whc    *http.Client // Web Push: public addresses only (see Configure)
	tokens *tokenSource
	apns   *apnsTokens
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

// Configure checks the config and prepares the HTTP client (HTTP/2 where
// the server speaks it, as APNs requires).
func (p *Push) Configure(ctx context.Context, req sdk.ConfigureRequest) (sdk.ConfigureResponse, error) {
	cfg, err := configFromParsed(req.Config)
	if err != nil {
		return sdk.ConfigureResponse{}, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ForceAttemptHTTP2 = true
	if cfg.caPEM != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(cfg.caPEM)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	hc := &http.Client{Timeout: cfg.Timeout, Transport: tr}
	// Subscription endpoints come from browsers, that is from users: the
	// Web Push client dials only public addresses unless the operator
	// allows private ones, so a subscription cannot make Herald post to
	// its own network (SSRF). The check runs on the address dialled, after
	// DNS, so a name that resolves to a private address is refused too.
	wtr := tr.Clone()
	if !cfg.WebPushPrivateEndpoints {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: publicOnly}
		wtr.DialContext = d.DialContext
	}
	whc := &http.Client{Timeout: cfg.Timeout, Transport: wtr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse // a push service answers, it does not redirect
	}}
	p.mu.Lock()
	if p.hc != nil {
		p.hc.CloseIdleConnections()
		p.whc.CloseIdleConnections()
	}
	p.cfg, p.hc, p.whc = cfg, hc, whc
	p.tokens = &tokenSource{static: cfg.AccessToken, sa: cfg.creds, hc: hc}
	p.apns = nil
	if cfg.apnsKey != nil {
		p.apns = &apnsTokens{key: cfg.apnsKey, keyID: cfg.APNsKeyID, teamID: cfg.APNsTeamID}
	}
	p.mu.Unlock()
	return sdk.ConfigureResponse{}, nil
}

// sender is the configured plugin, as one Send or Health sees it.
type sender struct {
	cfg    Config
	hc     *http.Client
	whc    *http.Client
	tokens *tokenSource
	apns   *apnsTokens
}

func (p *Push) configured() (sender, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.hc == nil {
		return sender{}, ErrNotConfigured
	}
	return sender{p.cfg, p.hc, p.whc, p.tokens, p.apns}, nil
}

// Health checks every configured provider: FCM validates (validate_only)
// a message to the "herald-health" topic, which proves the endpoint, the
// credentials and the project and delivers nothing; APNs and Web Push
// have no such call, so their keys (checked by Configure) and, for APNs,
// a fresh signed token are what Health reports.
func (p *Push) Health(ctx context.Context, _ sdk.HealthRequest) (sdk.HealthResponse, error) {
	s, err := p.configured()
	if err != nil {
		return sdk.HealthResponse{Healthy: false, Message: err.Error()}, nil
	}
	var msgs []string
	if s.cfg.has(ProviderFCM) {
		msg := fcmMessage{Topic: "herald-health", Data: map[string]string{"herald_health": "1"}}
		out := post(ctx, s.cfg, s.hc, s.tokens, fcmRequest{ValidateOnly: true, Message: msg})
		if out.kind != sdk.OutcomeSent {
			return sdk.HealthResponse{Healthy: false, Message: out.reason}, nil
		}
		msgs = append(msgs, "fcm accepted a validate-only message for project "+s.cfg.ProjectID)
	}
	if s.cfg.has(ProviderAPNs) {
		if _, err := s.apns.token(time.Now()); err != nil {
			return sdk.HealthResponse{Healthy: false, Message: err.Error()}, nil
		}
		msgs = append(msgs, "apns signing key "+s.cfg.APNsKeyID+" signs provider tokens")
	}
	if s.cfg.has(ProviderWebPush) {
		msgs = append(msgs, "webpush VAPID keys loaded")
	}
	return sdk.HealthResponse{Healthy: true, Message: strings.Join(msgs, "; ")}, nil
}

// Send sends one message per device of each delivery's recipient, through
// the configured provider of the device's kind (FCM for tokens of no
// kind), at most cfg.Concurrency at a time, and folds each delivery's
// device outcomes into one Result: Sent when any device accepted the
// message (the failed devices are not retried, so the devices that got it
// are not notified twice), otherwise the most hopeful failure: rate
// limited, then retryable, then permanent. Devices the provider reported
// gone are listed in the Result's GoneDevices.
func (p *Push) Send(ctx context.Context, req sdk.SendRequest) (sdk.SendResponse, error) {
	batch := req.Deliveries
	s, err := p.configured()
	if err != nil {
		return sdk.SendResponse{}, err
	}
	type job struct {
		delivery, device int
	}
	devices := make([][]sdk.Device, len(batch))
	outcomes := make([][]tokenOutcome, len(batch))
	var jobs []job
	for i, d := range batch {
		for _, dev := range d.Recipient.DevicesOf() {
			if s.serves(dev.Kind) {
				devices[i] = append(devices[i], dev)
			}
		}
		outcomes[i] = make([]tokenOutcome, len(devices[i]))
		for j := range devices[i] {
			jobs = append(jobs, job{i, j})
		}
	}
	work := make(chan job)
	var wg sync.WaitGroup
	for range min(s.cfg.Concurrency, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for jb := range work {
				outcomes[jb.delivery][jb.device] = s.sendTo(ctx, batch[jb.delivery], devices[jb.delivery][jb.device])
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
		results[i] = fold(d.DeliveryID, outcomes[i], s.cfg.Providers)
	}
	return sdk.SendResponse{Results: results}, nil
}

// serves reports whether a configured provider sends to devices of kind.
func (s sender) serves(kind string) bool {
	switch kind {
	case "", sdk.DeviceFCM:
		return s.cfg.has(ProviderFCM)
	case sdk.DeviceWebPush:
		return s.cfg.has(ProviderWebPush)
	case sdk.DeviceAPNs:
		return s.cfg.has(ProviderAPNs)
	}
	return false
}

// sendTo sends a delivery to one device through its kind's provider.
func (s sender) sendTo(ctx context.Context, d sdk.Delivery, dev sdk.Device) tokenOutcome {
	var out tokenOutcome
	switch dev.Kind {
	case sdk.DeviceWebPush:
		out = s.sendWebPush(ctx, d, dev)
	case sdk.DeviceAPNs:
		out = s.sendAPNs(ctx, d, dev)
	default:
		out = post(ctx, s.cfg, s.hc, s.tokens, fcmRequest{ValidateOnly: s.cfg.ValidateOnly, Message: buildMessage(d, dev.Token)})
		if out.code == "UNREGISTERED" {
			out.gone = true
		}
	}
	out.token = dev.Token
	return out
}

// tokenOutcome is what a provider said about one device.
type tokenOutcome struct {
	kind       sdk.Outcome
	name       string // provider message id, when sent
	reason     string
	code       string
	retryAfter time.Duration
	// gone is set when the provider said the device no longer exists.
	gone  bool
	token string
}

// fold turns the outcomes of a delivery's devices into its Result.
func fold(id string, outs []tokenOutcome, providers []string) sdk.Result {
	if len(outs) == 0 {
		return sdk.Permanent(id, "push: recipient has no device for "+strings.Join(providers, ", "), CodeNoAddress)
	}
	var names, gone []string
	best := -1
	rank := map[sdk.Outcome]int{sdk.OutcomePermanent: 0, sdk.OutcomeRetryable: 1, sdk.OutcomeRateLimited: 2}
	var reasons []string
	for i, o := range outs {
		if o.gone {
			gone = append(gone, o.token)
		}
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
	var r sdk.Result
	o := outs[max(best, 0)]
	reason := strings.Join(reasons, "; ")
	switch {
	case len(names) > 0:
		r = sdk.Sent(id, strings.Join(names, ","))
	case len(gone) == len(outs):
		r = sdk.Gone(id, reason)
	case o.kind == sdk.OutcomeRateLimited:
		r = sdk.RateLimited(id, reason, o.retryAfter)
	case o.kind == sdk.OutcomeRetryable:
		r = sdk.Retry(id, reason, o.retryAfter)
	default:
		r = sdk.Permanent(id, reason, o.code)
	}
	r.GoneDevices = gone
	return r
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
	if !noData(d.Content.Data) {
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
