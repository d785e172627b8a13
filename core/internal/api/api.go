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
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/httpguard"
	"github.com/heraldhq/herald/core/internal/metrics"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/tracing"
	"github.com/heraldhq/herald/sdk/producer"
	"github.com/heraldhq/herald/sdk/producer/jsonguard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
)

// MaxBody bounds a request body.
const MaxBody = 1 << 20

// readyTimeout bounds one /readyz check.
const readyTimeout = 3 * time.Second

// Server serves the public API. Every request that touches tenant data
// runs its queries in one transaction on pool, whose role (herald_api) is
// bound by row-level security to the tenant and project set for that
// transaction.
type Server struct {
	pool  *pgxpool.Pool
	rules func() *rules.RuleSet
	log   hclog.Logger
	// Ready reports whether the daemon is ready, for /readyz (nil: ready
	// when pool answers a ping). Its error is logged at debug level, never
	// sent: /readyz is public and says only ready or not ready (the
	// reasons are on the admin listener).
	Ready func(ctx context.Context) error
	// Metrics counts accepted events (nil: none).
	Metrics *metrics.Metrics
	// mounts are the handlers of other rooms (the superadmin API, ...).
	mounts map[string]http.Handler
	// perKey and perIP limit request rates (nil: no limit).
	perKey, perIP *httpguard.Limiter
	// dir is the directory API's cursor key and limits (directory.go).
	dir directoryState
	// CORS wraps the routes (inside the per-address rate limit) to answer
	// browsers' cross-origin requests (package cors; nil: none).
	CORS func(http.Handler) http.Handler
	// webhooks is the operator's webhook policy (webhooks.go).
	webhooks WebhookPolicy
}

// SetRateLimits limits request rates (http.rate_limit); call it before
// Handler.
func (s *Server) SetRateLimits(l httpguard.RateLimits) {
	s.perKey = httpguard.NewLimiter(httpguard.LimiterConfig{Rate: l.PerKey, Burst: l.Burst})
	s.perIP = httpguard.NewLimiter(httpguard.LimiterConfig{Rate: l.PerIP, Burst: l.Burst})
}

// New returns the API server. pool must run as the API role (see
// store.CheckAPIRole).
func New(pool *pgxpool.Pool, ruleset func() *rules.RuleSet, log hclog.Logger) *Server {
	return &Server{pool: pool, rules: ruleset, log: log.Named("api"), mounts: map[string]http.Handler{}}
}

// Mount serves h under the pattern (e.g. "/v1/admin/").
func (s *Server) Mount(pattern string, h http.Handler) { s.mounts[pattern] = h }

// Handler returns the API's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// The accept span's context is what the event keeps (its trace
	// continues in the relay, the broker and the plugin).
	mux.Handle("POST /v1/events", tracing.HTTP("POST /v1/events", s.auth(s.postEvent)))
	mux.HandleFunc("GET /v1/events/{event_id}", s.auth(s.getEvent))
	mux.HandleFunc("DELETE /v1/events/{event_id}", s.auth(s.cancelEvent))
	mux.HandleFunc("GET /v1/apikeys", s.keyManager(s.listKeys))
	mux.HandleFunc("POST /v1/apikeys", s.keyManager(s.createKey))
	mux.HandleFunc("POST /v1/apikeys/{key_id}/revoke", s.keyManager(s.revokeKey))
	mux.HandleFunc("POST /v1/apikeys/{key_id}/rotate", s.keyManager(s.rotateKey))
	mux.HandleFunc("GET /v1/settings/cors", s.keyManager(s.getCORS))
	mux.HandleFunc("PUT /v1/settings/cors", s.keyManager(s.putCORS))
	mux.HandleFunc("GET /v1/settings/webhook", s.keyManager(s.getWebhook)) // webhooks.go
	mux.HandleFunc("PUT /v1/settings/webhook", s.keyManager(s.putWebhook))
	mux.HandleFunc("DELETE /v1/settings/webhook", s.keyManager(s.deleteWebhook))
	mux.HandleFunc("POST /v1/settings/webhook/rotate", s.keyManager(s.rotateWebhook))
	mux.HandleFunc("POST /v1/webhooks/replay", s.keyManager(s.replayWebhook))
	mux.HandleFunc("DELETE /v1/recipients/{user_id}", s.tenantWide(s.deleteRecipient)) // erase.go
	s.directoryRoutes(mux)
	for p, h := range s.mounts {
		mux.Handle(p, h)
	}
	mux.HandleFunc("GET "+OpenAPIPath, serveOpenAPI)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ready := s.Ready
		if ready == nil {
			ready = func(ctx context.Context) error { return s.pool.Ping(ctx) }
		}
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := ready(ctx); err != nil {
			// The error may name the database, its role or its host: it
			// stays in the log.
			s.log.Debug("readyz: not ready", "error", err)
			WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
			return
		}
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	routes := MethodAware(mux)
	if s.CORS != nil {
		routes = s.CORS(routes)
	}
	if s.perIP == nil {
		return routes
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ok, wait := s.perIP.Allow(httpguard.ClientKey(r.RemoteAddr)); !ok {
			TooManyRequests(w, wait, fmt.Sprintf("more than %g requests per second from this client address", s.perIP.Rate()))
			return
		}
		routes.ServeHTTP(w, r)
	})
}

// TooManyRequests answers 429 with Retry-After (whole seconds) and a
// problem document saying which limit was hit, and closes the connection
// (Connection: close): a client over a limit holds no keep-alive slot.
func TooManyRequests(w http.ResponseWriter, wait time.Duration, detail string) {
	secs := httpguard.RetryAfter(wait)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	w.Header().Set("Connection", "close")
	Problem(w, http.StatusTooManyRequests, "too many requests", fmt.Sprintf("%s; retry after %d s", detail, secs), "")
}

type principalKey struct{}

// auth resolves the tenant (and project) from "Authorization: Bearer <api
// key>". The key is looked up on every request, so a revoked key is
// refused at once.
func (s *Server) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, ok := BearerToken(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="herald"`)
			Problem(w, http.StatusUnauthorized, "unauthorized", "an API key is required: Authorization: Bearer <key>", "")
			return
		}
		if strings.HasPrefix(key, store.AdminKeyPrefix) {
			Problem(w, http.StatusForbidden, "superadmin credentials are read-only",
				"a superadmin credential reads /v1/admin/ only; post and read events with a tenant API key", "")
			return
		}
		p, err := store.Authenticate(r.Context(), s.pool, key)
		if errors.Is(err, store.ErrNotFound) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="herald", error="invalid_token"`)
			Problem(w, http.StatusUnauthorized, "unauthorized", "unknown or revoked API key", "")
			return
		}
		if err != nil {
			s.internal(w, err)
			return
		}
		if ok, wait := s.perKey.Allow(p.KeyID); !ok {
			TooManyRequests(w, wait, fmt.Sprintf("more than %g requests per second with this API key", s.perKey.Rate()))
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	}
}

// BearerToken returns the token of "Authorization: Bearer <token>".
func BearerToken(r *http.Request) (string, bool) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	key = strings.TrimSpace(key)
	return key, ok && key != ""
}

func principalOf(r *http.Request) store.Principal {
	return r.Context().Value(principalKey{}).(store.Principal)
}

// PrincipalOf returns the tenant and project of a request Authenticated
// let through.
func PrincipalOf(r *http.Request) store.Principal { return principalOf(r) }

// Authenticated wraps next with API-key authentication (see auth).
func (s *Server) Authenticated(next http.HandlerFunc) http.HandlerFunc { return s.auth(next) }

// inTenant runs fn in a transaction bound to the request's tenant and
// project.
func (s *Server) inTenant(r *http.Request, fn func(tx pgx.Tx) error) error {
	p := principalOf(r)
	return store.InTenant(r.Context(), s.pool, p.Tenant, p.Project, fn)
}

// eventRequest is the body of POST /v1/events.
type eventRequest struct {
	EventID       string          `json:"event_id"`
	ProjectID     string          `json:"project_id"`
	Type          string          `json:"type"`
	AggregateType string          `json:"aggregate_type"`
	AggregateID   string          `json:"aggregate_id"`
	Payload       json.RawMessage `json:"payload"`
	AvailableAt   *time.Time      `json:"available_at"`
}

func (s *Server) postEvent(w http.ResponseWriter, r *http.Request) {
	pr := principalOf(r)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		Problem(w, http.StatusRequestEntityTooLarge, "body too large", fmt.Sprintf("the body exceeds %d bytes", MaxBody), "")
		return
	case err != nil:
		// The client was too slow (http.read_timeout) or went away.
		detail := "the body could not be read"
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			detail = "the body did not arrive within the server's read timeout"
		}
		Problem(w, http.StatusBadRequest, "body not received", detail, "")
		return
	}
	ev, prob := parseEvent(body, pr)
	if prob != nil {
		Problem(w, prob.status, prob.title, prob.detail, prob.field)
		return
	}
	if rs := s.rules(); rs != nil {
		if err := rs.ValidatePayload(ev.Type, ev.Payload); err != nil {
			var pe *rules.PayloadError
			switch {
			case errors.Is(err, rules.ErrNoRule):
				Problem(w, http.StatusUnprocessableEntity, "unknown event type", fmt.Sprintf("no rule handles event type %q", ev.Type), "type")
			case errors.As(err, &pe):
				Problem(w, http.StatusUnprocessableEntity, "payload does not match the event type's schema", err.Error(), "payload"+pe.Path)
			default:
				Problem(w, http.StatusUnprocessableEntity, "invalid payload", err.Error(), "payload")
			}
			return
		}
	}
	span := trace.SpanFromContext(r.Context())
	span.SetAttributes(tracing.Tenant.String(pr.Tenant), tracing.EventType.String(ev.Type))
	ev.TraceParent, ev.TraceState = tracing.Header(r.Context())
	var st producer.EventStatus
	var created, conflict, noProject bool
	err = s.inTenant(r, func(tx pgx.Tx) error {
		ok, err := store.ProjectExists(r.Context(), tx, pr.Tenant, ev.ProjectID)
		if err != nil || !ok {
			noProject = !ok
			return err
		}
		_, err = producer.EnqueueID(r.Context(), tx, ev)
		created = err == nil
		if err != nil && !errors.Is(err, producer.ErrDuplicate) {
			return err
		}
		st, err = store.GetEvent(r.Context(), tx, pr.Tenant, ev.EventID)
		if errors.Is(err, store.ErrNotFound) && !created {
			// The event_id is taken in a project this key cannot see.
			conflict = true
			return nil
		}
		if err != nil || created {
			return err
		}
		same, err := store.SameEvent(r.Context(), tx, pr.Tenant, ev.EventID, ev.Type, ev.Payload)
		conflict = !same
		return err
	})
	if p := contractProblem(err); p != nil {
		Problem(w, p.status, p.title, p.detail, p.field)
		return
	}
	switch {
	case err != nil:
		s.internal(w, err)
		return
	case noProject:
		Problem(w, http.StatusUnprocessableEntity, "unknown project", fmt.Sprintf("project_id: this tenant has no project %q", ev.ProjectID), "project_id")
		return
	case conflict:
		Problem(w, http.StatusConflict, "event_id already used",
			fmt.Sprintf("this tenant already has an event %q with another type, payload or project; an event_id identifies one event, "+
				"so post a new event under a new event_id", ev.EventID), "event_id")
		return
	}
	code := http.StatusOK
	outcome := "duplicate"
	if created {
		outcome = "accepted"
	}
	span.SetAttributes(tracing.Outcome.String(outcome))
	if created {
		s.Metrics.EventAccepted()
		code = http.StatusCreated
		w.Header().Set("Location", "/v1/events/"+ev.EventID)
	}
	WriteJSON(w, code, st)
}

// contractProblem is the problem of an event the database refused for the
// event contract (migrations 0023 and 0045: SQLSTATE 23514 from
// event_outbox_contract, naming the column), or nil for any other error.
// Event.Validate checks the payload as sent; the database measures it as
// stored (jsonb's text), which can be larger (numbers written out: 1e308
// is 309 digits).
func contractProblem(err error) *problem {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23514" || pe.ConstraintName != "event_outbox_contract" {
		return nil
	}
	field := pe.ColumnName
	if field == "event_type" {
		field = "type"
	}
	detail := strings.TrimPrefix(pe.Message, "event_outbox.")
	if field == "payload" && strings.Contains(pe.Message, " bytes, more than ") {
		return &problem{http.StatusRequestEntityTooLarge, "payload too large", detail, field}
	}
	return &problem{http.StatusBadRequest, "invalid event", detail, field}
}

// problem is a problem document to answer with.
type problem struct {
	status               int
	title, detail, field string
}

// parseEvent decodes and checks the body of POST /v1/events for the
// principal pr, without touching the database: every string that reaches
// PostgreSQL is valid UTF-8 without NUL, and the event passes
// producer.Event.Validate (see its limits).
func parseEvent(body []byte, pr store.Principal) (producer.Event, *problem) {
	if err := jsonguard.Check(body, producer.MaxPayloadDepth+1); err != nil {
		field, detail := guiltyField(body), err.Error()
		if field == "payload" {
			// The words of Event.Validate and herald_enqueue.
			var fields map[string]json.RawMessage
			if json.Unmarshal(body, &fields) == nil {
				if err := producer.CheckPayload(fields["payload"]); err != nil {
					detail = err.Error()
				}
			}
		}
		return producer.Event{}, &problem{http.StatusBadRequest, "invalid event", detail, field}
	}
	var req eventRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		detail, field := describeJSONError(err, body)
		return producer.Event{}, &problem{http.StatusBadRequest, "malformed body", detail, field}
	}
	if dec.More() {
		return producer.Event{}, &problem{http.StatusBadRequest, "malformed body", "the body holds more than one JSON value", ""}
	}
	if len(req.Payload) > producer.MaxPayloadBytes {
		return producer.Event{}, &problem{http.StatusRequestEntityTooLarge, "payload too large",
			fmt.Sprintf("payload: is %d bytes, more than %d", len(req.Payload), producer.MaxPayloadBytes), "payload"}
	}
	ev := producer.Event{TenantID: pr.Tenant, ProjectID: req.ProjectID, EventID: req.EventID, Type: req.Type, AggregateType: req.AggregateType,
		AggregateID: req.AggregateID, Payload: req.Payload}
	if req.AvailableAt != nil {
		ev.AvailableAt = *req.AvailableAt
	}
	switch {
	case ev.ProjectID == "" && pr.Project != "":
		ev.ProjectID = pr.Project
	case ev.ProjectID == "":
		ev.ProjectID = store.DefaultProject
	case pr.Project != "" && ev.ProjectID != pr.Project:
		return producer.Event{}, &problem{http.StatusForbidden, "project not allowed", fmt.Sprintf("this API key is limited to project %q", pr.Project), "project_id"}
	}
	if err := ev.Validate(); err != nil {
		var fe *producer.FieldError
		if errors.As(err, &fe) {
			// The words of the database's herald_enqueue too (sdk/producer).
			return producer.Event{}, &problem{http.StatusBadRequest, "invalid event", fe.Error(), fe.Field}
		}
		return producer.Event{}, &problem{http.StatusBadRequest, "invalid event", err.Error(), ""}
	}
	return ev, nil
}

// guiltyField names the top-level field of body that jsonguard refuses
// ("" when it is none of them, e.g. a key).
func guiltyField(body []byte) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return ""
	}
	for name, raw := range fields {
		if jsonguard.Check(raw, producer.MaxPayloadDepth) != nil {
			return name
		}
	}
	return ""
}

func (s *Server) getEvent(w http.ResponseWriter, r *http.Request) {
	if !KnownID(r.PathValue("event_id")) {
		Problem(w, http.StatusNotFound, "event not found", "no event has this event_id", "event_id")
		return
	}
	var st producer.EventStatus
	err := s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		st, err = store.GetEvent(r.Context(), tx, principalOf(r).Tenant, r.PathValue("event_id"))
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		Problem(w, http.StatusNotFound, "event not found", fmt.Sprintf("no event %q for this tenant", r.PathValue("event_id")), "event_id")
		return
	}
	if err != nil {
		s.internal(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, st)
}

// cancelEvent cancels an event still pending and every delivery of it
// still waiting (store.CancelEvent): 200 with what the cancel left, the
// same again on a repeat; 409 naming what went out when nothing could be
// cancelled; 404 for an event the key cannot see. A cancel that PostgreSQL
// aborted as a deadlock's victim or on a serialization failure
// (store.Retryable) runs again, up to three times in all.
func (s *Server) cancelEvent(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("event_id")
	if msg := store.EventIDProblem(id); msg != "" {
		Problem(w, http.StatusBadRequest, "invalid event_id", "event_id: "+msg, "event_id")
		return
	}
	var c store.Cancellation
	err := store.RetryRaces(func() error {
		return s.inTenant(r, func(tx pgx.Tx) error {
			var err error
			c, err = store.CancelEvent(r.Context(), tx, principalOf(r).Tenant, id)
			return err
		})
	})
	if errors.Is(err, store.ErrNotFound) {
		Problem(w, http.StatusNotFound, "event not found", fmt.Sprintf("no event %q for this tenant", id), "event_id")
		return
	}
	if err != nil {
		s.internal(w, err)
		return
	}
	for ch, n := range c.Now {
		s.Metrics.Delivery(ch, "", metrics.OutcomeCancelled, n)
	}
	if !c.Done {
		Problem(w, http.StatusConflict, "nothing to cancel",
			fmt.Sprintf("event %q is %s and none of its deliveries is still waiting: %s", id, c.Status, c.Went()), "event_id")
		return
	}
	WriteJSON(w, http.StatusOK, c)
}

func (s *Server) internal(w http.ResponseWriter, err error) {
	s.log.Error("request failed", "error", err)
	Problem(w, http.StatusInternalServerError, "internal error", "the request could not be completed; it is safe to retry", "")
}

// DescribeJSONError turns a decode error of body into a message and the
// field it concerns.
func DescribeJSONError(err error, body []byte) (string, string) { return describeJSONError(err, body) }

// GuiltyField names the top-level field of the JSON object body that
// jsonguard refuses at depth limit maxDepth ("" when it is none of them).
func GuiltyField(body []byte, maxDepth int) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return ""
	}
	for name, raw := range fields {
		if jsonguard.Check(raw, maxDepth) != nil {
			return name
		}
	}
	return ""
}

func describeJSONError(err error, body []byte) (string, string) {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var pe *time.ParseError
	switch {
	case errors.As(err, &pe):
		// A time field's own error does not name the field: the top-level
		// field holding the refused text does.
		var fields map[string]json.RawMessage
		_ = json.Unmarshal(body, &fields)
		for name, raw := range fields {
			var v string
			if json.Unmarshal(raw, &v) == nil && v == pe.Value {
				return fmt.Sprintf("%s must be an RFC 3339 time such as 2026-11-22T10:00:00Z, got %q", name, pe.Value), name
			}
		}
		return fmt.Sprintf("a time must be RFC 3339, such as 2026-11-22T10:00:00Z, got %q", pe.Value), ""
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

// Problem writes an RFC 9457 problem document (application/problem+json)
// naming the request field at fault, when there is one.
func Problem(w http.ResponseWriter, status int, title, detail, field string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(producer.Problem{Type: "about:blank", Title: title, Status: status, Detail: detail, Field: field})
}

// WriteJSON writes v as a JSON response.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
