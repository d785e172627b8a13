// Package api is Herald's public HTTP API: producers post events with a
// per-tenant API key and read back their status and deliveries. Errors are
// RFC 9457 problem documents (application/problem+json) that name the field
// at fault.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/sdk/producer"
	"github.com/jackc/pgx/v5/pgxpool"
)

// MaxBody bounds a request body.
const MaxBody = 1 << 20

// Server serves the public API.
type Server struct {
	pool  *pgxpool.Pool
	rules func() *rules.RuleSet
	log   hclog.Logger
	// Ready reports whether the daemon is ready (for /readyz).
	Ready func(ctx context.Context) error
}

// New returns the API server.
func New(pool *pgxpool.Pool, ruleset func() *rules.RuleSet, log hclog.Logger) *Server {
	return &Server{pool: pool, rules: ruleset, log: log.Named("api")}
}

// Handler returns the API's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/events", s.auth(s.postEvent))
	mux.HandleFunc("GET /v1/events/{event_id}", s.auth(s.getEvent))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.pool.Ping(r.Context()); err != nil {
			problem(w, http.StatusServiceUnavailable, "not ready", "database: "+err.Error(), "")
			return
		}
		if s.Ready != nil {
			if err := s.Ready(r.Context()); err != nil {
				problem(w, http.StatusServiceUnavailable, "not ready", err.Error(), "")
				return
			}
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotFound, "not found", "no route for "+r.Method+" "+r.URL.Path, "")
	})
	return mux
}

type tenantKey struct{}

// auth resolves the tenant from "Authorization: Bearer <api key>".
func (s *Server) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || key == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="herald"`)
			problem(w, http.StatusUnauthorized, "unauthorized", "an API key is required: Authorization: Bearer <key>", "")
			return
		}
		tenant, err := store.TenantForAPIKey(r.Context(), s.pool, strings.TrimSpace(key))
		if errors.Is(err, store.ErrNotFound) {
			problem(w, http.StatusUnauthorized, "unauthorized", "unknown or revoked API key", "")
			return
		}
		if err != nil {
			s.internal(w, err)
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	}
}

func tenantOf(r *http.Request) string { return r.Context().Value(tenantKey{}).(string) }

// eventRequest is the body of POST /v1/events.
type eventRequest struct {
	EventID       string          `json:"event_id"`
	Type          string          `json:"type"`
	AggregateType string          `json:"aggregate_type"`
	AggregateID   string          `json:"aggregate_id"`
	Payload       json.RawMessage `json:"payload"`
	AvailableAt   *time.Time      `json:"available_at"`
}

func (s *Server) postEvent(w http.ResponseWriter, r *http.Request) {
	tenant := tenantOf(r)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		problem(w, http.StatusRequestEntityTooLarge, "body too large", fmt.Sprintf("the body exceeds %d bytes", MaxBody), "")
		return
	}
	var req eventRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		detail, field := describeJSONError(err)
		problem(w, http.StatusBadRequest, "malformed body", detail, field)
		return
	}
	if dec.More() {
		problem(w, http.StatusBadRequest, "malformed body", "the body holds more than one JSON value", "")
		return
	}
	ev := producer.Event{TenantID: tenant, EventID: req.EventID, Type: req.Type, AggregateType: req.AggregateType,
		AggregateID: req.AggregateID, Payload: req.Payload}
	if req.AvailableAt != nil {
		ev.AvailableAt = *req.AvailableAt
	}
	if err := ev.Validate(); err != nil {
		var fe *producer.FieldError
		if errors.As(err, &fe) {
			problem(w, http.StatusBadRequest, "invalid event", fe.Msg, fe.Field)
			return
		}
		problem(w, http.StatusBadRequest, "invalid event", err.Error(), "")
		return
	}
	if rs := s.rules(); rs != nil {
		if err := rs.ValidatePayload(ev.Type, ev.Payload); err != nil {
			var pe *rules.PayloadError
			switch {
			case errors.Is(err, rules.ErrNoRule):
				problem(w, http.StatusUnprocessableEntity, "unknown event type", fmt.Sprintf("no rule handles event type %q", ev.Type), "type")
			case errors.As(err, &pe):
				problem(w, http.StatusUnprocessableEntity, "payload does not match the event type's schema", err.Error(), "payload"+pe.Path)
			default:
				problem(w, http.StatusUnprocessableEntity, "invalid payload", err.Error(), "payload")
			}
			return
		}
	}
	_, err = producer.EnqueueID(r.Context(), s.pool, ev)
	created := err == nil
	if err != nil && !errors.Is(err, producer.ErrDuplicate) {
		s.internal(w, err)
		return
	}
	st, err := store.GetEvent(r.Context(), s.pool, tenant, ev.EventID)
	if err != nil {
		s.internal(w, err)
		return
	}
	if !created && st.Type != ev.Type {
		problem(w, http.StatusConflict, "event_id already used",
			fmt.Sprintf("event %q exists with type %q; an event_id identifies one event", ev.EventID, st.Type), "event_id")
		return
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
		w.Header().Set("Location", "/v1/events/"+ev.EventID)
	}
	writeJSON(w, code, st)
}

func (s *Server) getEvent(w http.ResponseWriter, r *http.Request) {
	st, err := store.GetEvent(r.Context(), s.pool, tenantOf(r), r.PathValue("event_id"))
	if errors.Is(err, store.ErrNotFound) {
		problem(w, http.StatusNotFound, "event not found", fmt.Sprintf("no event %q for this tenant", r.PathValue("event_id")), "event_id")
		return
	}
	if err != nil {
		s.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) internal(w http.ResponseWriter, err error) {
	s.log.Error("request failed", "error", err)
	problem(w, http.StatusInternalServerError, "internal error", "the request could not be completed; it is safe to retry", "")
}

// describeJSONError turns a decode error into a message and the field it
// concerns.
func describeJSONError(err error) (string, string) {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		return fmt.Sprintf("%s must be %s, got %s", te.Field, te.Type.String(), te.Value), te.Field
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, err), ""
	case errors.Is(err, io.EOF):
		return "the body is empty; send a JSON event", ""
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return fmt.Sprintf("unknown field %q", f), f
	}
	return err.Error(), ""
}

// Problem is an RFC 9457 problem document.
type Problem = producer.Problem

func problem(w http.ResponseWriter, status int, title, detail, field string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Problem{Type: "about:blank", Title: title, Status: status, Detail: detail, Field: field})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
