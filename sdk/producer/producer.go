// Package producer is for services that emit events to Herald.
//
// Enqueue writes an event into Herald's transactional outbox inside the
// caller's own pgx transaction, so the event exists if and only if the
// business change commits. Client does the same over Herald's HTTP API for
// services that do not share Herald's database.
package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Event is one business event. EventID is the idempotency key: enqueuing
// the same EventID again for the same tenant has no further effect.
type Event struct {
	// TenantID owns the event.
	TenantID string `json:"tenant_id,omitempty"`
	// EventID is unique per tenant and chosen by the producer.
	EventID string `json:"event_id"`
	// Type selects the rules, e.g. "RESERVATION_REQUESTED".
	Type string `json:"type"`
	// AggregateType and AggregateID name the business entity.
	AggregateType string `json:"aggregate_type,omitempty"`
	AggregateID   string `json:"aggregate_id,omitempty"`
	// Payload is a JSON object the rules and templates read.
	Payload json.RawMessage `json:"payload"`
	// AvailableAt delays processing until then (zero: now).
	AvailableAt time.Time `json:"available_at,omitzero"`
}

// FieldError names the field of an Event that is not valid.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// MaxIDLength bounds EventID, Type and TenantID.
const MaxIDLength = 200

// Validate checks an event before it is written and returns a *FieldError.
func (e Event) Validate() error {
	check := []struct{ field, v string }{{"tenant_id", e.TenantID}, {"event_id", e.EventID}, {"type", e.Type}}
	for _, c := range check {
		if c.v == "" {
			return &FieldError{Field: c.field, Msg: "is required"}
		}
		if len(c.v) > MaxIDLength {
			return &FieldError{Field: c.field, Msg: fmt.Sprintf("is longer than %d bytes", MaxIDLength)}
		}
	}
	if len(e.Payload) == 0 {
		return nil
	}
	var obj map[string]any
	if err := json.Unmarshal(e.Payload, &obj); err != nil || obj == nil {
		return &FieldError{Field: "payload", Msg: "must be a JSON object"}
	}
	return nil
}

// Execer is satisfied by pgx.Tx (and pools and connections).
type Execer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrDuplicate reports an EventID the tenant already enqueued; the caller's
// transaction stays usable and nothing was written.
var ErrDuplicate = errors.New("producer: event_id already enqueued")

// Enqueue writes ev into the outbox using tx, the caller's transaction. It
// returns ErrDuplicate when the tenant already has an event with this
// EventID (the statement does not fail, so tx stays usable).
func Enqueue(ctx context.Context, tx Execer, ev Event) error {
	_, err := EnqueueID(ctx, tx, ev)
	return err
}

// EnqueueID is Enqueue that also returns the outbox row id.
func EnqueueID(ctx context.Context, tx Execer, ev Event) (int64, error) {
	if err := ev.Validate(); err != nil {
		return 0, fmt.Errorf("producer: %w", err)
	}
	payload := ev.Payload
	if len(payload) == 0 {
		payload = json.RawMessage(`{}`)
	}
	var avail any
	if !ev.AvailableAt.IsZero() {
		avail = ev.AvailableAt
	}
	var id int64
	err := tx.QueryRow(ctx, `INSERT INTO event_outbox (tenant_id, event_id, event_type, aggregate_type, aggregate_id, payload, available_at)
		VALUES ($1, $2, $3, $4, $5, $6, COALESCE($7::timestamptz, now()))
		ON CONFLICT (tenant_id, event_id) DO NOTHING RETURNING id`,
		ev.TenantID, ev.EventID, ev.Type, ev.AggregateType, ev.AggregateID, payload, avail).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrDuplicate
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return 0, fmt.Errorf("producer: enqueue %s: %s", ev.EventID, pgErr.Message)
		}
		return 0, fmt.Errorf("producer: enqueue %s: %w", ev.EventID, err)
	}
	return id, nil
}
