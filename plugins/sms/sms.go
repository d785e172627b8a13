package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/plugins/internal/retryafter"
	"github.com/heraldhq/herald/sdk"
)

// Version is the plugin's own version; make stamps it from git with -ldflags "-X main.Version=...".
var Version = "0.1.0"

// MaxBatch is the largest batch one Send accepts.
const MaxBatch = 20

// HeaderIdempotency is Twilio's idempotency header: a request repeated with
// the same token within Twilio's window creates no second message.
const HeaderIdempotency = "I-Twilio-Idempotency-Token"

// Permanent codes the plugin sets itself (Twilio's numeric error codes,
// such as "21211" for an invalid To number, are passed through).
const (
	CodeNoAddress = "no_address"
	CodeEmptyBody = "empty_body"
)

// DefaultRateLimitWait is the wait after a 429 without Retry-After.
const DefaultRateLimitWait = 10 * time.Second

// ErrNotConfigured prompts the host to call Configure before Send or Health.
var ErrNotConfigured = errors.New("sms: not configured")

// SMS is the SMS channel over Twilio's Messages API.
type SMS struct {
	mu  sync.RWMutex
	cfg Config
	hc  *http.Client
}

var _ sdk.Channel = (*SMS)(nil)

// New returns an unconfigured sms channel; Serve calls it once.
func New() sdk.Channel { return &SMS{} }

// Describe returns the plugin's static description.
func (s *SMS) Describe(ctx context.Context, _ sdk.DescribeRequest) (sdk.DescribeResponse, error) {
	return sdk.DescribeResponse{Description: sdk.Description{
		ChannelType:   "SMS",
		Provider:      "twilio",
		PluginVersion: Version,
		Class:         sdk.Persistent,
		MaxBatch:      MaxBatch,
		Config:        configSpecs,
	}}, nil
}

// Configure checks the config and prepares the HTTP client.
func (s *SMS) Configure(ctx context.Context, req sdk.ConfigureRequest) (sdk.ConfigureResponse, error) {
	cfg, err := configFromParsed(req.Config)
	if err != nil {
		return sdk.ConfigureResponse{}, err
	}
	s.mu.Lock()
	s.cfg, s.hc = cfg, &http.Client{Timeout: cfg.Timeout}
	s.mu.Unlock()
	return sdk.ConfigureResponse{}, nil
}

func (s *SMS) configured() (Config, *http.Client, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.hc == nil {
		return Config{}, nil, ErrNotConfigured
	}
	return s.cfg, s.hc, nil
}

// Health fetches the account resource: it proves the API answers and
// accepts the credentials.
func (s *SMS) Health(ctx context.Context, _ sdk.HealthRequest) (sdk.HealthResponse, error) {
	cfg, hc, err := s.configured()
	if err != nil {
		return sdk.HealthResponse{Healthy: false, Message: err.Error()}, nil
	}
	u := accountURL(cfg) + ".json"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return sdk.HealthResponse{Healthy: false, Message: "sms: " + err.Error()}, nil
	}
	req.SetBasicAuth(cfg.AccountSID, cfg.AuthToken)
	resp, err := hc.Do(req)
	if err != nil {
		return sdk.HealthResponse{Healthy: false, Message: "sms: get account: " + err.Error()}, nil
	}
	defer resp.Body.Close()
	var acct struct {
		Status string `json:"status"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&acct)
	if resp.StatusCode != http.StatusOK {
		return sdk.HealthResponse{Healthy: false, Message: "sms: get account: " + resp.Status}, nil
	}
	if acct.Status != "" && acct.Status != "active" {
		return sdk.HealthResponse{Healthy: false, Message: "sms: twilio account is " + acct.Status}, nil
	}
	return sdk.HealthResponse{Healthy: true, Message: "twilio account " + cfg.AccountSID + " is active"}, nil
}

// Send creates one Twilio message per delivery, at most cfg.Concurrency at
// a time.
func (s *SMS) Send(ctx context.Context, req sdk.SendRequest) (sdk.SendResponse, error) {
	batch := req.Deliveries
	cfg, hc, err := s.configured()
	if err != nil {
		return sdk.SendResponse{}, err
	}
	results := make([]sdk.Result, len(batch))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(cfg.Concurrency, len(batch)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				results[i] = sendOne(ctx, cfg, hc, batch[i])
			}
		}()
	}
	for i := range batch {
		work <- i
	}
	close(work)
	wg.Wait()
	return sdk.SendResponse{Results: results}, nil
}

func accountURL(cfg Config) string {
	return strings.TrimRight(cfg.BaseURL, "/") + "/2010-04-01/Accounts/" + url.PathEscape(cfg.AccountSID)
}

// twilioError is the error body of the Twilio REST API.
type twilioError struct {
	Code     int    `json:"code"`
	Message  string `json:"message"`
	MoreInfo string `json:"more_info"`
	Status   int    `json:"status"`
}

// sendOne posts one message and classifies Twilio's answer.
func sendOne(ctx context.Context, cfg Config, hc *http.Client, d sdk.Delivery) sdk.Result {
	to := strings.TrimSpace(d.Recipient.Phone)
	if to == "" {
		return sdk.Permanent(d.DeliveryID, "sms: recipient has no phone number", CodeNoAddress)
	}
	body := d.Content.Body
	if body == "" {
		body = d.Content.Title
	}
	if body == "" {
		return sdk.Permanent(d.DeliveryID, "sms: message has no body", CodeEmptyBody)
	}
	form := url.Values{"To": {to}, "Body": {body}}
	if cfg.MessagingServiceSID != "" {
		form.Set("MessagingServiceSid", cfg.MessagingServiceSID)
	} else {
		form.Set("From", cfg.From)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, accountURL(cfg)+"/Messages.json", strings.NewReader(form.Encode()))
	if err != nil {
		return sdk.Retry(d.DeliveryID, "sms: request: "+err.Error(), 0)
	}
	req.SetBasicAuth(cfg.AccountSID, cfg.AuthToken)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	key := d.IdempotencyKey
	if key == "" {
		key = d.DeliveryID
	}
	req.Header.Set(HeaderIdempotency, key)
	resp, err := hc.Do(req)
	if err != nil {
		return sdk.Retry(d.DeliveryID, "sms: post twilio: "+err.Error(), 0)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 == 2 {
		var msg struct {
			SID    string `json:"sid"`
			Status string `json:"status"`
		}
		if err := json.Unmarshal(raw, &msg); err != nil || msg.SID == "" {
			return sdk.Retry(d.DeliveryID, fmt.Sprintf("sms: twilio answered %s without a message sid", resp.Status), 0)
		}
		return sdk.Sent(d.DeliveryID, msg.SID)
	}
	var te twilioError
	_ = json.Unmarshal(raw, &te)
	code := "http_" + strconv.Itoa(resp.StatusCode)
	if te.Code != 0 {
		code = strconv.Itoa(te.Code)
	}
	reason := fmt.Sprintf("sms: twilio %s: %s: %s", resp.Status, code, te.Message)
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		return sdk.RateLimited(d.DeliveryID, reason, retryafter.From(resp.Header, DefaultRateLimitWait))
	case resp.StatusCode >= 500:
		return sdk.Retry(d.DeliveryID, reason, retryafter.From(resp.Header, 0))
	case resp.StatusCode == http.StatusUnauthorized:
		// Wrong credentials (20003) fail every message until the operator
		// fixes them; the deliveries wait rather than fail.
		return sdk.Retry(d.DeliveryID, reason, 0)
	}
	return sdk.Permanent(d.DeliveryID, reason, code)
}
