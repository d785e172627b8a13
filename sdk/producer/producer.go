// Package producer is for services that emit events to Herald.
//
// Enqueue writes an event into Herald's transactional outbox inside the
// caller's own pgx transaction, so the event exists if and only if the
// business change commits. Client does the same over Herald's HTTP API for
// services that do not share Herald's database.
//
// The package is the Go module github.com/heraldhq/herald/sdk/producer,
// released under tags sdk/producer/vX.Y.Z and versioned apart from the
// plugin SDK (github.com/heraldhq/herald/sdk), so that a plugin's build
// does not pull pgx and a service's build does not pull go-plugin and
// gRPC: go get github.com/heraldhq/herald/sdk/producer@v1.0.0.
package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/heraldhq/herald/sdk/producer/jsonguard"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/trace"
)

// Event is one business event. EventID is the idempotency key: enqueuing
// the same EventID again for the same tenant has no further effect.
type Event struct {
	// TenantID owns the event. Enqueue passes it to herald_enqueue, which
	// refuses a tenant the database login was not granted.
	TenantID string `json:"tenant_id,omitempty"`
	// ProjectID scopes the event to one of the tenant's projects (empty:
	// "default", or the project an API key is limited to).
	ProjectID string `json:"project_id,omitempty"`
	// EventID is unique per tenant and chosen by the producer.
	EventID string `json:"event_id"`
	// Type selects the rules, e.g. "RESERVATION_REQUESTED".
	Type string `json:"type"`
	// AggregateType names the kind of business entity, e.g. "reservation".
	AggregateType string `json:"aggregate_type,omitempty"`
	// AggregateID identifies the business entity.
	AggregateID string `json:"aggregate_id,omitempty"`
	// Payload is a JSON object the rules and templates read.
	Payload json.RawMessage `json:"payload"`
	// AvailableAt delays processing until then (zero: now).
	AvailableAt time.Time `json:"available_at,omitzero"`
	// TraceParent is the W3C traceparent of the trace the event belongs to
	// ("00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>"). It
	// is kept with the event and follows each of its deliveries into the
	// plugin's Send. Empty: Enqueue and Client.Emit take the span context
	// of their ctx, if it holds one (OpenTelemetry). Client sends it as the
	// traceparent header, not in the body.
	TraceParent string `json:"-"`
	// TraceState is the W3C tracestate that goes with TraceParent (at most
	// 32 list members, 512 bytes); ignored without a TraceParent.
	TraceState string `json:"-"`
}

// FieldError names the field of an Event that is not valid.
type FieldError struct {
	// Field names the event field at fault, e.g. "payload".
	Field string
	// Msg says what is wrong with it.
	Msg string
}

// Error returns "field: message".
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Limits of an Event, checked by Validate.
const (
	// MaxIDLength bounds EventID, Type, AggregateType and AggregateID, in
	// bytes.
	MaxIDLength = 200
	// MaxPayloadBytes bounds Payload.
	MaxPayloadBytes = 256 << 10
	// MaxPayloadDepth bounds how deeply Payload's objects and arrays nest;
	// the payload object itself is depth 1.
	MaxPayloadDepth = 32
)

// idPattern is what TenantID and ProjectID look like (as Herald creates
// them).
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,99}$`)

// Validate checks an event before it is written and returns a *FieldError.
// Its messages are, word for word, those of the database's herald_enqueue
// (migration 0045), where the field type is called event_type. Every
// string must be valid UTF-8 without NUL, so that PostgreSQL stores
// exactly what was sent:
//
//   - tenant_id (required) and project_id: 1-100 characters of A-Z a-z 0-9
//     . _ : @ - starting with a letter or digit.
//   - event_id (required): 1-200 bytes of printable ASCII without spaces
//     (0x21-0x7E); nothing is rewritten, so two different ids never
//     collide.
//   - type (required), aggregate_type, aggregate_id: at most 200 bytes of
//     UTF-8 without control characters.
//   - payload: a JSON object of at most MaxPayloadBytes, nested at most
//     MaxPayloadDepth deep, with no invalid UTF-8, no \u0000 and no
//     unpaired surrogate escape in any key or string, and numbers that fit
//     a float64.
func (e Event) Validate() error {
	if err := checkID("tenant_id", e.TenantID, true); err != nil {
		return err
	}
	if err := checkID("project_id", e.ProjectID, false); err != nil {
		return err
	}
	if err := checkEventID(e.EventID); err != nil {
		return err
	}
	for _, c := range []struct {
		field, v string
		required bool
	}{{"type", e.Type, true}, {"aggregate_type", e.AggregateType, false}, {"aggregate_id", e.AggregateID, false}} {
		if err := checkText(c.field, c.v, c.required); err != nil {
			return err
		}
	}
	if err := checkPayload(e.Payload); err != nil {
		return err
	}
	return checkTrace(e.TraceParent, e.TraceState)
}

// MaxTraceStateBytes bounds Event.TraceState.
const MaxTraceStateBytes = 512

// checkTrace checks a W3C trace context: traceparent version 00 (or a
// later version's first four fields, as the spec has a receiver do), with
// a trace id and a parent span id that are not all zeros.
func checkTrace(parent, state string) error {
	if parent == "" {
		if state != "" {
			return &FieldError{Field: "tracestate", Msg: "is set without a traceparent"}
		}
		return nil
	}
	if !ValidTraceParent(parent) {
		return &FieldError{Field: "traceparent", Msg: "is not a W3C traceparent (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, ids not all zeros)"}
	}
	if len(state) > MaxTraceStateBytes {
		return &FieldError{Field: "tracestate", Msg: fmt.Sprintf("is longer than %d bytes", MaxTraceStateBytes)}
	}
	if _, err := trace.ParseTraceState(state); err != nil {
		return &FieldError{Field: "tracestate", Msg: "is not a W3C tracestate: " + err.Error()}
	}
	return nil
}

// ValidTraceParent reports whether s is a W3C traceparent Herald keeps:
// lower-case hex fields, version 00 with exactly four fields (a later
// version may add fields after a dash; ff is invalid), a trace id and a
// parent id that are not all zeros.
func ValidTraceParent(s string) bool {
	if len(s) < 55 || (len(s) > 55 && (s[:2] == "00" || s[55] != '-')) || s[:2] == "ff" {
		return false
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	zeroTrace, zeroSpan := true, true
	for i := 0; i < 55; i++ {
		if i == 2 || i == 35 || i == 52 {
			continue
		}
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
		if c != '0' && i > 2 && i < 35 {
			zeroTrace = false
		}
		if c != '0' && i > 35 && i < 52 {
			zeroSpan = false
		}
	}
	return !zeroTrace && !zeroSpan && utf8.ValidString(s) && len(s) <= 512
}

// TraceFromContext returns the W3C traceparent and tracestate of the span
// context ctx holds (OpenTelemetry), or two empty strings.
func TraceFromContext(ctx context.Context) (parent, state string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", ""
	}
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags()), sc.TraceState().String()
}

func checkID(field, v string, required bool) error {
	switch {
	case v == "" && required:
		return &FieldError{Field: field, Msg: "is required"}
	case v != "" && !idPattern.MatchString(v):
		return &FieldError{Field: field, Msg: "must be 1-100 characters of A-Z a-z 0-9 . _ : @ - and start with a letter or digit"}
	}
	return nil
}

func checkEventID(v string) error {
	if v == "" {
		return &FieldError{Field: "event_id", Msg: "is required"}
	}
	if len(v) > MaxIDLength {
		return &FieldError{Field: "event_id", Msg: fmt.Sprintf("is longer than %d bytes", MaxIDLength)}
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return &FieldError{Field: "event_id", Msg: fmt.Sprintf("byte %d is 0x%02x; an event_id is printable ASCII without spaces (0x21-0x7E)", i, v[i])}
		}
	}
	return nil
}

func checkText(field, v string, required bool) error {
	switch {
	case v == "" && required:
		return &FieldError{Field: field, Msg: "is required"}
	case len(v) > MaxIDLength:
		return &FieldError{Field: field, Msg: fmt.Sprintf("is longer than %d bytes", MaxIDLength)}
	case !utf8.ValidString(v):
		return &FieldError{Field: field, Msg: "is not valid UTF-8"}
	}
	for i, r := range v {
		if unicode.IsControl(r) {
			return &FieldError{Field: field, Msg: fmt.Sprintf("holds the control character %U at byte %d", r, i)}
		}
	}
	return nil
}

// CheckPayload checks an event payload as Validate does and returns a
// *FieldError on payload, or nil (an empty payload is {}).
func CheckPayload(p json.RawMessage) error {
	if err := checkPayload(p); err != nil {
		return err
	}
	return nil
}

func checkPayload(p json.RawMessage) *FieldError {
	if len(p) == 0 {
		return nil
	}
	if len(p) > MaxPayloadBytes {
		return &FieldError{Field: "payload", Msg: fmt.Sprintf("is %d bytes, more than %d", len(p), MaxPayloadBytes)}
	}
	if err := jsonguard.Check(p, MaxPayloadDepth); err != nil {
		var je *jsonguard.Error
		if errors.As(err, &je) && strings.HasPrefix(je.Msg, "nested deeper") {
			return &FieldError{Field: "payload", Msg: "is " + je.Msg}
		}
		return &FieldError{Field: "payload", Msg: "holds " + err.Error()}
	}
	var obj map[string]any
	if err := json.Unmarshal(p, &obj); err != nil || obj == nil {
		var te *json.UnmarshalTypeError
		// A number float64 cannot hold is "number <text>"; a bare
		// "number" is a payload that is one.
		if errors.As(err, &te) && strings.HasPrefix(te.Value, "number ") {
			return &FieldError{Field: "payload", Msg: "holds a number beyond the range of a 64-bit float"}
		}
		if kind := jsonKind(p); kind != "" && kind != "object" {
			return &FieldError{Field: "payload", Msg: "must be a JSON object, not " + kind}
		}
		return &FieldError{Field: "payload", Msg: "must be a JSON object"}
	}
	return nil
}

// jsonKind names the kind of the JSON value p starts with, as PostgreSQL's
// jsonb_typeof does ("" when p starts with none).
func jsonKind(p []byte) string {
	for _, c := range p {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return "object"
		case '[':
			return "array"
		case '"':
			return "string"
		case 't', 'f':
			return "boolean"
		case 'n':
			return "null"
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			return "number"
		}
		return ""
	}
	return ""
}

// Execer is satisfied by pgx.Tx (and pools and connections).
type Execer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrNotPermitted reports an event for a tenant the database login was
// not granted (SQLSTATE 42501), or for a project the tenant does not have
// (SQLSTATE 23503); nothing was written and the caller's transaction is
// aborted.
var ErrNotPermitted = errors.New("producer: the database role may not enqueue events for this tenant or project")

// DefaultProject is the project of an event that names none.
const DefaultProject = "default"

// ErrDuplicate reports an EventID the tenant already enqueued; the caller's
// transaction stays usable and nothing was written.
var ErrDuplicate = errors.New("producer: event_id already enqueued")

// ErrConflict reports an EventID the tenant already enqueued for another
// event (another type, project or payload): the producer reused an id.
// errors.Is(ErrConflict, ErrDuplicate) holds, so that a caller that only
// tells new from not new goes on as before.
var ErrConflict = fmt.Errorf("producer: event_id already enqueued with another type, project or payload: %w", ErrDuplicate)

// Outcome is what herald_enqueue answers for an event.
type Outcome string

// The outcomes of herald_enqueue.
const (
	// OutcomeNew: the event was written.
	OutcomeNew Outcome = "new"
	// OutcomeRepeat: the tenant has this event_id with the same type,
	// project and payload; nothing was written.
	OutcomeRepeat Outcome = "repeat"
	// OutcomeConflict: the tenant has this event_id for another event;
	// nothing was written.
	OutcomeConflict Outcome = "conflict"
)

// Enqueue writes ev into the outbox using tx, the caller's transaction,
// through the database function herald_enqueue (migration 0045; Herald's
// schema must have it). It returns ErrDuplicate when the tenant already
// has an event with this EventID (ErrConflict, which is an ErrDuplicate,
// when that event has another type, project or payload); the statement
// does not fail, so tx stays usable. That holds for as long as Herald
// keeps the event: with the daemon's retention.events set, a processed
// event older than that is deleted, and its EventID enqueued again is a
// new event. A PostgreSQL error unwraps to its *pgconn.PgError: under
// SERIALIZABLE or REPEATABLE READ, errors.As it and run the transaction
// again on SQLSTATE 40001.
func Enqueue(ctx context.Context, tx Execer, ev Event) error {
	_, err := EnqueueID(ctx, tx, ev)
	return err
}

// EnqueueID is Enqueue that also returns the outbox row id (0 with
// ErrDuplicate).
func EnqueueID(ctx context.Context, tx Execer, ev Event) (int64, error) {
	id, outcome, err := EnqueueOutcome(ctx, tx, ev)
	switch {
	case err != nil:
		return 0, err
	case outcome == OutcomeRepeat:
		return 0, ErrDuplicate
	case outcome == OutcomeConflict:
		return 0, ErrConflict
	}
	return id, nil
}

// EnqueueOutcome is Enqueue that returns herald_enqueue's answer instead of
// ErrDuplicate: the row id (the existing row's for a repeat or a conflict)
// and the outcome.
func EnqueueOutcome(ctx context.Context, tx Execer, ev Event) (int64, Outcome, error) {
	if ev.TraceParent == "" && ev.TraceState == "" {
		ev.TraceParent, ev.TraceState = TraceFromContext(ctx)
	}
	if err := ev.Validate(); err != nil {
		return 0, "", fmt.Errorf("producer: %w", err)
	}
	payload := ev.Payload
	if len(payload) == 0 {
		payload = json.RawMessage(`{}`)
	}
	var avail any
	if !ev.AvailableAt.IsZero() {
		avail = ev.AvailableAt
	}
	project := ev.ProjectID
	if project == "" {
		project = DefaultProject
	}
	// herald_enqueue checks the event again, checks that the login may
	// write for the tenant and project, hashes the payload (SHA-256 of
	// jsonb's text, so that a repeated event can be told from a reused
	// event_id) and inserts it, in one statement.
	const enqueue = `SELECT outcome, id FROM herald_enqueue(tenant_id => $1, event_id => $2, event_type => $3, payload => $4::jsonb,
		aggregate_type => $5, aggregate_id => $6, project_id => $7, available_at => $8::timestamptz, traceparent => $9, tracestate => $10)`
	var id int64
	var outcome string
	err := tx.QueryRow(ctx, enqueue, ev.TenantID, ev.EventID, ev.Type, string(payload), ev.AggregateType, ev.AggregateID, project, avail,
		ev.TraceParent, ev.TraceState).Scan(&outcome, &id)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			if pgErr.Code == "42501" || pgErr.Code == "23503" { // the tenant is not the login's, or has no such project
				return 0, "", &enqueueError{msg: fmt.Sprintf("producer: enqueue %s for tenant %q, project %q: %v (%s)", ev.EventID, ev.TenantID, project, ErrNotPermitted, pgErr.Message),
					errs: []error{ErrNotPermitted, err}}
			}
			return 0, "", &enqueueError{msg: fmt.Sprintf("producer: enqueue %s: %s", ev.EventID, pgErr.Message), errs: []error{err}}
		}
		return 0, "", fmt.Errorf("producer: enqueue %s: %w", ev.EventID, err)
	}
	return id, Outcome(outcome), nil
}

// enqueueError is a PostgreSQL error from Enqueue: its message is the
// server's, and it unwraps to the *pgconn.PgError (and to ErrNotPermitted
// when row-level security refused the row), so that a caller can read the
// SQLSTATE with errors.As and, on 40001 (serialization_failure) or 40P01
// (deadlock_detected), run its whole transaction again.
type enqueueError struct {
	msg  string
	errs []error
}

func (e *enqueueError) Error() string   { return e.msg }
func (e *enqueueError) Unwrap() []error { return e.errs }
