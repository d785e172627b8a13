package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/sdk"
)

// version is the plugin's own version; set with -ldflags "-X main.version=...".
var version = "0.1.0"

// Header names the receiver sees.
const (
	// SignatureHeader carries "sha256=" + hex(HMAC-SHA256(secret, body)).
	SignatureHeader = "X-Herald-Signature"
	// IdempotencyHeader carries the delivery's idempotency key, stable
	// across retries: receivers drop a request whose key they have seen.
	IdempotencyHeader = "Idempotency-Key"
	// DeliveryHeader carries the delivery id.
	DeliveryHeader = "X-Herald-Delivery"
	// MessageIDHeader, when the receiver sets it in a 2xx answer, becomes
	// the delivery's provider message id.
	MessageIDHeader = "X-Message-Id"
)

// Payload is the JSON body of one POST.
type Payload struct {
	DeliveryID     string          `json:"delivery_id"`
	IdempotencyKey string          `json:"idempotency_key"`
	TenantID       string          `json:"tenant_id"`
	EventID        string          `json:"event_id"`
	EventType      string          `json:"event_type"`
	NotificationID string          `json:"notification_id"`
	Channel        string          `json:"channel"`
	Severity       string          `json:"severity,omitempty"`
	Attempt        int             `json:"attempt"`
	Recipient      Recipient       `json:"recipient"`
	Subject        string          `json:"subject,omitempty"`
	Title          string          `json:"title,omitempty"`
	Body           string          `json:"body,omitempty"`
	HTML           string          `json:"html,omitempty"`
	Data           json.RawMessage `json:"data,omitempty"`
	CreatedAt      time.Time       `json:"created_at,omitzero"`
}

// Recipient is the payload's recipient.
type Recipient struct {
	UserID     string            `json:"user_id"`
	UserType   string            `json:"user_type,omitempty"`
	Email      string            `json:"email,omitempty"`
	Phone      string            `json:"phone,omitempty"`
	Locale     string            `json:"locale,omitempty"`
	TimeZone   string            `json:"time_zone,omitempty"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

// Webhook is the WEBHOOK channel.
type Webhook struct {
	mu     sync.RWMutex
	cfg    config
	client *http.Client
}

var (
	_ sdk.Channel = (*Webhook)(nil)
	_ sdk.Closer  = (*Webhook)(nil)
)

// New returns an unconfigured Webhook; sdk.Serve calls it once.
func New() sdk.Channel {
	return &Webhook{client: &http.Client{}}
}

// Describe declares the WEBHOOK channel.
func (w *Webhook) Describe(context.Context, sdk.DescribeRequest) (sdk.DescribeResponse, error) {
	return sdk.DescribeResponse{Description: sdk.Description{
		ChannelType:   "WEBHOOK",
		Provider:      "http",
		PluginVersion: version,
		Class:         sdk.Persistent,
		MaxBatch:      50,
		Config:        configSpecs,
		Capabilities:  []string{"idempotency_key"},
	}}, nil
}

// Configure applies the provider config.
func (w *Webhook) Configure(_ context.Context, req sdk.ConfigureRequest) (sdk.ConfigureResponse, error) {
	cfg, err := configFromParsed(req.Config)
	if err != nil {
		return sdk.ConfigureResponse{}, err
	}
	w.mu.Lock()
	w.cfg = cfg
	w.mu.Unlock()
	sdk.Logger().Info("webhook configured", "provider", req.ProviderName, "url", cfg.url.Redacted(), "version", version)
	return sdk.ConfigureResponse{}, nil
}

func (w *Webhook) config() config {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.cfg
}

// Send POSTs each delivery in turn.
func (w *Webhook) Send(ctx context.Context, req sdk.SendRequest) (sdk.SendResponse, error) {
	cfg := w.config()
	if cfg.url == nil {
		return sdk.SendResponse{}, sdk.RetryableError(errors.New("webhook: not configured"), 0)
	}
	return sdk.SendEach(func(ctx context.Context, d sdk.Delivery) (string, error) {
		return w.post(ctx, cfg, d)
	})(ctx, req)
}

// post sends one delivery and classifies the answer: 2xx sent, 429 rate
// limited, 408 and 5xx retryable, other 4xx permanent.
func (w *Webhook) post(ctx context.Context, cfg config, d sdk.Delivery) (string, error) {
	body, err := json.Marshal(payloadOf(d))
	if err != nil {
		return "", sdk.PermanentError(fmt.Errorf("webhook: encode: %w", err), "encode")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.url.String(), bytes.NewReader(body))
	if err != nil {
		return "", sdk.PermanentError(fmt.Errorf("webhook: request: %w", err), "request")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "herald-plugin-webhook/"+version)
	req.Header.Set(SignatureHeader, Sign([]byte(cfg.Secret), body))
	req.Header.Set(IdempotencyHeader, d.IdempotencyKey)
	req.Header.Set(DeliveryHeader, d.DeliveryID)
	resp, err := w.client.Do(req)
	if err != nil {
		return "", sdk.RetryableError(fmt.Errorf("webhook: post: %w", err), 0)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	status := fmt.Errorf("webhook: receiver answered %s: %s", resp.Status, strings.TrimSpace(string(snippet)))
	code := "http_" + strconv.Itoa(resp.StatusCode)
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return resp.Header.Get(MessageIDHeader), nil
	case resp.StatusCode == http.StatusTooManyRequests:
		return "", sdk.RateLimitedError(status, retryAfter(resp.Header.Get("Retry-After"), time.Now()))
	case resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode >= 500:
		return "", sdk.RetryableError(status, retryAfter(resp.Header.Get("Retry-After"), time.Now()))
	}
	return "", sdk.PermanentError(status, code)
}

// Health checks that the receiver's host accepts TCP connections.
func (w *Webhook) Health(ctx context.Context, _ sdk.HealthRequest) (sdk.HealthResponse, error) {
	cfg := w.config()
	if cfg.url == nil {
		return sdk.HealthResponse{Message: "not configured"}, nil
	}
	host := cfg.url.Host
	if cfg.url.Port() == "" {
		port := "80"
		if cfg.url.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(cfg.url.Hostname(), port)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", host)
	if err != nil {
		return sdk.HealthResponse{Message: "receiver unreachable: " + err.Error()}, nil
	}
	_ = conn.Close()
	return sdk.HealthResponse{Healthy: true, Message: "receiver " + host + " reachable"}, nil
}

// Close releases idle connections.
func (w *Webhook) Close() error {
	w.client.CloseIdleConnections()
	return nil
}

// Sign returns the X-Herald-Signature value for body.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether header is body's signature under secret; a
// receiver calls it before trusting a request.
func Verify(secret, body []byte, header string) bool {
	return hmac.Equal([]byte(Sign(secret, body)), []byte(header))
}

// retryAfter parses a Retry-After header (seconds or an HTTP date).
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now).Round(time.Second)
	}
	return 0
}

func payloadOf(d sdk.Delivery) Payload {
	return Payload{
		DeliveryID: d.DeliveryID, IdempotencyKey: d.IdempotencyKey, TenantID: d.TenantID, EventID: d.EventID,
		EventType: d.EventType, NotificationID: d.NotificationID, Channel: d.Channel, Severity: d.Severity,
		Attempt: d.Attempt,
		Recipient: Recipient{UserID: d.Recipient.UserID, UserType: d.Recipient.UserType, Email: d.Recipient.Email,
			Phone: d.Recipient.Phone, Locale: d.Recipient.Locale, TimeZone: d.Recipient.TimeZone, Attributes: d.Recipient.Attributes},
		Subject: d.Content.Subject, Title: d.Content.Title, Body: d.Content.Body, HTML: d.Content.HTML,
		Data: d.Content.Data, CreatedAt: d.CreatedAt,
	}
}
