// Package delivery moves deliveries from the database through RabbitMQ to
// the channel plugins: the publisher (PENDING → PUBLISHED on confirm), the
// listeners (consume, claim, send through the plugin host, record, ack),
// with NextStep (outcome.go), the one function from an attempt's outcome to
// the delivery's next status and time. Due RETRY deliveries are claimed by
// the publisher like PENDING ones; the maintenance stage
// (core/internal/maintenance) returns lost attempts and deferred rows to
// them.
package delivery

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
)

// Envelope is the body of one broker message: the attempts of one or more
// deliveries that share a routing key. Each delivery keeps its own state
// and idempotency in the database.
//
// Version 1 names the attempts only; the listener reads each delivery from
// the database. Version 2, which the relay's handoff publishes, also
// carries what the plugin is sent, so the listener only checks in the
// database that each attempt is still due.
type Envelope struct {
	// V is the envelope version (1 or 2).
	V int `json:"v"`
	// Deliveries lists the delivery attempts the message carries.
	Deliveries []Wire `json:"deliveries"`
}

// Wire is one delivery attempt in a message. Version 1 sets the Ref only.
type Wire struct {
	store.Ref
	TenantID       string          `json:"tenant_id,omitempty"`
	NotificationID string          `json:"notification_id,omitempty"`
	EventID        string          `json:"event_id,omitempty"`
	EventType      string          `json:"event_type,omitempty"`
	UserID         string          `json:"user_id,omitempty"`
	UserType       string          `json:"user_type,omitempty"`
	Channel        string          `json:"channel,omitempty"`
	Severity       string          `json:"severity,omitempty"`
	MaxAttempts    int             `json:"max_attempts,omitempty"`
	BestEffort     bool            `json:"best_effort,omitempty"`
	Recipient      json.RawMessage `json:"recipient,omitempty"`
	Content        json.RawMessage `json:"content,omitempty"`
	CreatedAt      time.Time       `json:"created_at,omitzero"`
	// TraceParent and TraceState are the W3C trace context of the
	// delivery's publish span (both versions; "": none): the listener's
	// span continues it.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// wireOf is the version-2 form of a delivery the relay just wrote, for its
// first attempt.
func wireOf(d store.NewDelivery) Wire {
	return Wire{Ref: store.Ref{ID: d.ID, Attempt: 1}, TenantID: d.TenantID, NotificationID: d.NotificationID,
		EventID: d.EventID, EventType: d.EventType, UserID: d.UserID, UserType: d.UserType, Channel: d.Channel,
		Severity: d.Severity, MaxAttempts: d.MaxAttempts, BestEffort: d.BestEffort, Recipient: d.Recipient,
		Content: d.Content, CreatedAt: d.CreatedAt, TraceParent: d.TraceParent, TraceState: d.TraceState}
}

// claimed is the delivery a version-2 message describes.
func (w Wire) claimed() store.Claimed {
	return store.Claimed{ID: w.ID, TenantID: w.TenantID, NotificationID: w.NotificationID, EventID: w.EventID,
		EventType: w.EventType, UserID: w.UserID, UserType: w.UserType, Channel: w.Channel, Severity: w.Severity,
		Attempt: w.Attempt, MaxAttempts: w.MaxAttempts, BestEffort: w.BestEffort, Recipient: w.Recipient,
		Content: w.Content, CreatedAt: w.CreatedAt, TraceParent: w.TraceParent, TraceState: w.TraceState}
}

// Refs lists the attempts the message names.
func (e Envelope) Refs() []store.Ref {
	refs := make([]store.Ref, len(e.Deliveries))
	for i, w := range e.Deliveries {
		refs[i] = w.Ref
	}
	return refs
}

// MaxEnvelope bounds the deliveries one message may carry.
const MaxEnvelope = 1000

// DecodeEnvelope parses and checks a message body.
func DecodeEnvelope(body []byte) (Envelope, error) {
	var e Envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return e, fmt.Errorf("decode message: %w", err)
	}
	if e.V != 1 && e.V != 2 {
		return e, fmt.Errorf("decode message: unsupported envelope version %d", e.V)
	}
	if len(e.Deliveries) == 0 || len(e.Deliveries) > MaxEnvelope {
		return e, fmt.Errorf("decode message: %d deliveries (want 1..%d)", len(e.Deliveries), MaxEnvelope)
	}
	for i, r := range e.Deliveries {
		if len(r.ID) != 36 || r.Attempt < 1 {
			return e, fmt.Errorf("decode message: deliveries[%d]: bad id %q or attempt %d", i, r.ID, r.Attempt)
		}
		if e.V == 2 && (r.TenantID == "" || r.Channel == "" || r.MaxAttempts < 1 || len(r.Recipient) == 0 || len(r.Content) == 0) {
			return e, fmt.Errorf("decode message: deliveries[%d]: version 2 needs tenant_id, channel, max_attempts, recipient and content", i)
		}
	}
	return e, nil
}
