package producer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client emits events over Herald's HTTP API (POST /v1/events) with a
// tenant's API key.
type Client struct {
	// BaseURL is Herald's public API, e.g. "http://127.0.0.1:8080".
	BaseURL string
	// APIKey authenticates the tenant.
	APIKey string
	// HTTP is the client used (http.DefaultClient when nil).
	HTTP *http.Client
}

// Problem is an RFC 9457 problem document returned by the API.
type Problem struct {
	// Type is the problem type URI.
	Type string `json:"type"`
	// Title is a short summary of the problem type.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail"`
	// Field names the request field at fault, when there is one.
	Field string `json:"field,omitempty"`
}

// Error returns the status, the detail and the field, if any.
func (p *Problem) Error() string {
	if p.Field != "" {
		return fmt.Sprintf("herald api: %d %s: %s (field %s)", p.Status, p.Title, p.Detail, p.Field)
	}
	return fmt.Sprintf("herald api: %d %s: %s", p.Status, p.Title, p.Detail)
}

// EventStatus is the API's view of one event and its deliveries.
type EventStatus struct {
	// EventID is the producer's idempotency key.
	EventID string `json:"event_id"`
	// ProjectID is the event's project, if any.
	ProjectID string `json:"project_id"`
	// Type is the event's type.
	Type string `json:"type"`
	// Status is PENDING, PROCESSED or FAILED.
	Status string `json:"status"`
	// Attempts counts the relay's tries to decide the event.
	Attempts int `json:"attempts"`
	// LastError is why the last try failed, if it did.
	LastError string `json:"last_error,omitempty"`
	// CreatedAt is when the event was recorded.
	CreatedAt time.Time `json:"created_at"`
	// ProcessedAt is when the relay decided it (nil while pending).
	ProcessedAt *time.Time `json:"processed_at,omitempty"`
	// Deliveries are the deliveries the event made.
	Deliveries []DeliveryStatus `json:"deliveries"`
}

// DeliveryStatus is one delivery of an event.
type DeliveryStatus struct {
	// DeliveryID identifies the delivery.
	DeliveryID string `json:"delivery_id"`
	// UserID is the recipient; empty for a post to a place.
	UserID string `json:"user_id"`
	// Place is, for a post to a place (a place channel's one post per
	// event, such as the restaurant's Slack channel), the key of the
	// directory group whose destination it went to; empty for a person's
	// delivery.
	Place string `json:"place,omitempty"`
	// Channel is the channel, e.g. "EMAIL".
	Channel string `json:"channel"`
	// Status is PENDING, PUBLISHED, SENT, RETRY, FAILED, DEFERRED,
	// WAITING (an escalation waiting for its due time, or another
	// workflow's hold), or one of the final SKIPPED, CANCELLED and
	// DIGESTED.
	Status string `json:"status"`
	// Hold says what a WAITING delivery waits for: "escalation" (sent when
	// due unless the in-app notification was read or acted on) or
	// "digest"; empty otherwise.
	Hold string `json:"hold,omitempty"`
	// EscalateUnless marks an escalation (the rule's escalate block): what
	// cancels it, "read" and/or "acted". It stays once the escalation was
	// sent or cancelled (LastError then says why: "read at …", "acted on
	// by …").
	EscalateUnless []string `json:"escalate_unless,omitempty"`
	// Attempts counts the sends tried so far.
	Attempts int `json:"attempts"`
	// Provider is the provider that handled the last attempt.
	Provider string `json:"provider,omitempty"`
	// ProviderMessageID is the provider's id of a sent delivery.
	ProviderMessageID string `json:"provider_message_id,omitempty"`
	// LastError is the last attempt's failure, if any.
	LastError string `json:"last_error,omitempty"`
	// NextAttemptAt is when a RETRY delivery is tried again (a DEFERRED
	// one, when its quiet hours end; a WAITING escalation, when it is due);
	// zero, and absent from the JSON, for a final delivery (SENT, FAILED,
	// SKIPPED, CANCELLED, DIGESTED).
	NextAttemptAt time.Time `json:"next_attempt_at,omitzero"`
	// UpdatedAt is when the delivery last changed.
	UpdatedAt time.Time `json:"updated_at"`
}

// Emit posts ev. created is false when the event_id was already known (the
// API answered 200 with the existing event instead of 201).
func (c *Client) Emit(ctx context.Context, ev Event) (status EventStatus, created bool, err error) {
	body, err := json.Marshal(ev)
	if err != nil {
		return EventStatus{}, false, err
	}
	if ev.TraceParent == "" && ev.TraceState == "" {
		ev.TraceParent, ev.TraceState = TraceFromContext(ctx)
	}
	if err := checkTrace(ev.TraceParent, ev.TraceState); err != nil {
		return EventStatus{}, false, fmt.Errorf("producer: %w", err)
	}
	var hdr http.Header
	if ev.TraceParent != "" {
		hdr = http.Header{"Traceparent": {ev.TraceParent}}
		if ev.TraceState != "" {
			hdr.Set("Tracestate", ev.TraceState)
		}
	}
	code, err := c.do(ctx, http.MethodPost, "/v1/events", body, &status, hdr)
	return status, code == http.StatusCreated, err
}

// Event fetches an event's status and deliveries.
func (c *Client) Event(ctx context.Context, eventID string) (EventStatus, error) {
	var st EventStatus
	_, err := c.do(ctx, http.MethodGet, "/v1/events/"+url.PathEscape(eventID), nil, &st, nil)
	return st, err
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any, hdr http.Header) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.APIKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("herald api: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("herald api: read: %w", err)
	}
	if resp.StatusCode >= 300 {
		p := &Problem{Status: resp.StatusCode}
		if json.Unmarshal(data, p) != nil || p.Title == "" {
			p.Title = http.StatusText(resp.StatusCode)
			p.Detail = strings.TrimSpace(string(data))
		}
		return resp.StatusCode, p
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("herald api: decode: %w", err)
		}
	}
	return resp.StatusCode, nil
}
