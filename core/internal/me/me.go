// Package me is the end user's own corner of the directory: the HTTP API
// under /v1/me, authenticated with the same user token as the inbox
// (package auth). A user reads and replaces their preferences (the channel
// switches the rules let them change, quiet hours, time zone, locale),
// registers and removes their push devices (an FCM or APNs token, or the
// Web Push subscription a browser made) and reads what a browser needs to
// subscribe (the VAPID public key of the Web Push provider).
//
// Every request works as the API's role with the token's tenant (and
// project) set for row-level security, on the token's own user only: the
// URL never names a user, and another user's device id is the same 404 as
// one that does not exist. The entries and their checks are the directory
// file's (directory.DecodeEntry, the validator `herald directory import`
// and the service API share), and the writes are the store's
// (store.ReplacePreferences, store.AddDevice, store.RemoveDevice).
package me

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Limits of the end-user API.
const (
	// MaxBody bounds a request body.
	MaxBody = 64 << 10
	// MaxDevices is how many push devices one user may register; a new
	// one beyond it is refused until they remove one.
	MaxDevices = 50
)

// Server serves /v1/me.
type Server struct {
	pool     *pgxpool.Pool
	verifier *auth.Verifier
	ruleset  func() *rules.RuleSet
	log      hclog.Logger
}

// New returns the end-user API on pool (the API role). ruleset returns the
// rules in force (nil while none are loaded): they say which switches a
// user may change and which provider sends Web Push.
func New(pool *pgxpool.Pool, verifier *auth.Verifier, ruleset func() *rules.RuleSet, log hclog.Logger) *Server {
	return &Server{pool: pool, verifier: verifier, ruleset: ruleset, log: log.Named("me")}
}

// Handler serves /v1/me.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/me/preferences", s.user(s.getPreferences))
	mux.HandleFunc("PUT /v1/me/preferences", s.user(s.putPreferences))
	mux.HandleFunc("GET /v1/me/devices", s.user(s.listDevices))
	mux.HandleFunc("POST /v1/me/devices", s.user(s.addDevice))
	mux.HandleFunc("DELETE /v1/me/devices/{id}", s.user(s.removeDevice))
	mux.HandleFunc("GET /v1/me/push-config", s.user(s.pushConfig))
	// A wrong method is 405 with Allow, an unknown path 404, both problem
	// documents.
	return api.MethodAware(mux)
}

type userKey struct{}

// user authenticates the request's bearer token and refuses any query
// parameter (none of these endpoints takes one).
func (s *Server) user(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u, ok := s.verifier.Request(w, r, s.log)
		if !ok {
			return
		}
		if _, ok := api.Query(w, r); !ok {
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
	}
}

func userOf(r *http.Request) auth.User { return r.Context().Value(userKey{}).(auth.User) }

// inUserTx runs fn in a transaction bound to the user's tenant and
// project, again (up to three times) when it lost a deadlock or a
// serialization race.
func (s *Server) inUserTx(ctx context.Context, u auth.User, fn func(pgx.Tx) error) error {
	return store.RetryRaces(func() error { return store.InTenant(ctx, s.pool, u.Tenant, u.Project, fn) })
}

// readBody reads a request body of at most MaxBody bytes; it answers 413
// or 400 itself when it cannot.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		api.Problem(w, http.StatusRequestEntityTooLarge, "body too large", fmt.Sprintf("the body exceeds %d bytes", MaxBody), "")
		return nil, false
	case err != nil:
		api.Problem(w, http.StatusBadRequest, "body not received", "the body could not be read", "")
		return nil, false
	case len(bytes.TrimSpace(body)) == 0:
		api.Problem(w, http.StatusBadRequest, "malformed body", "the body is empty; send a JSON object", "")
		return nil, false
	}
	return body, true
}

// decodeEntry decodes body into v with the directory file's checks
// (directory.DecodeEntry): on a problem it answers 400 naming the first
// field at fault, with every problem in the detail.
func decodeEntry[T directory.Entry](w http.ResponseWriter, body []byte, v T) bool {
	probs := directory.DecodeEntry(body, v, "body", directory.DefaultLimits())
	if len(probs) == 0 {
		return true
	}
	writeProblems(w, http.StatusBadRequest, "invalid body", probs)
	return false
}

// writeProblems answers a problem document naming the first problem's
// field, with every problem in the detail ("field: message; ...").
func writeProblems(w http.ResponseWriter, status int, title string, probs directory.Problems) {
	msgs := make([]string, len(probs))
	for i, p := range probs {
		if p.Field != "" {
			msgs[i] = p.Field + ": " + p.Msg
		} else {
			msgs[i] = p.Msg
		}
	}
	api.Problem(w, status, title, strings.Join(msgs, "; "), probs[0].Field)
}

// notInDirectory answers for a user the tenant's directory does not list:
// they have no preferences or devices to manage (the tenant's backend
// adds them, with their user type, through the directory).
func notInDirectory(w http.ResponseWriter) {
	api.Problem(w, http.StatusNotFound, "not in the directory",
		"you are not in this tenant's directory, so you have no preferences or devices here; the service you use adds you", "")
}

func (s *Server) internal(w http.ResponseWriter, err error) {
	s.log.Error("request failed", "error", err)
	api.Problem(w, http.StatusInternalServerError, "internal error", "the request could not be completed; it is safe to retry", "")
}
