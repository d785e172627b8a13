package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/sdk/producer/jsonguard"
	"github.com/jackc/pgx/v5"
)

// Key management for a tenant's own API keys, authenticated with one of
// them. Only a tenant-wide key (not limited to a project) manages keys;
// row-level security keeps every statement inside the tenant.
//
//	GET  /v1/apikeys                     list (never the keys themselves)
//	POST /v1/apikeys                     create {"name", "project_id"?, "expires_at"?} → the key, once
//	POST /v1/apikeys/{key_id}/revoke     refused from the next request on
//	POST /v1/apikeys/{key_id}/rotate     {"grace": "24h"?} → a new key; the old one works for grace more

// createdKey is the answer to create and rotate: the only time the key is
// shown.
type createdKey struct {
	store.APIKey
	Key string `json:"key"`
}

// keyManager lets only tenant-wide keys manage keys.
func (s *Server) keyManager(next http.HandlerFunc) http.HandlerFunc {
	return s.auth(func(w http.ResponseWriter, r *http.Request) {
		if p := principalOf(r); p.Project != "" {
			Problem(w, http.StatusForbidden, "tenant-wide key required",
				fmt.Sprintf("this key is limited to project %q; manage keys with a key of the whole tenant", p.Project), "")
			return
		}
		next(w, r)
	})
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	var keys []store.APIKey
	err := s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		keys, err = store.ListAPIKeys(r.Context(), tx, principalOf(r).Tenant)
		return err
	})
	if err != nil {
		s.internal(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"keys": keys})
}

type createKeyRequest struct {
	Name      string     `json:"name"`
	ProjectID string     `json:"project_id"`
	ExpiresAt *time.Time `json:"expires_at"`
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	var req createKeyRequest
	if !s.decode(w, r, &req) {
		return
	}
	if msg := checkName(req.Name); msg != "" {
		Problem(w, http.StatusBadRequest, "invalid key", "name "+msg, "name")
		return
	}
	if req.ExpiresAt != nil && !req.ExpiresAt.After(time.Now()) {
		Problem(w, http.StatusBadRequest, "invalid key", "expires_at is in the past", "expires_at")
		return
	}
	if req.ProjectID != "" {
		if err := store.ValidID("project", req.ProjectID); err != nil {
			Problem(w, http.StatusBadRequest, "invalid key", err.Error(), "project_id")
			return
		}
	}
	var out createdKey
	var noProject bool
	err := s.inTenant(r, func(tx pgx.Tx) error {
		if req.ProjectID != "" {
			ok, err := store.ProjectExists(r.Context(), tx, principalOf(r).Tenant, req.ProjectID)
			if err != nil || !ok {
				noProject = !ok
				return err
			}
		}
		var err error
		out.APIKey, out.Key, err = store.CreateKey(r.Context(), tx, store.NewAPIKey{TenantID: principalOf(r).Tenant,
			ProjectID: req.ProjectID, Name: req.Name, ExpiresAt: req.ExpiresAt})
		return err
	})
	switch {
	case err != nil:
		s.internal(w, err)
	case noProject:
		Problem(w, http.StatusUnprocessableEntity, "unknown project", fmt.Sprintf("this tenant has no project %q", req.ProjectID), "project_id")
	default:
		WriteJSON(w, http.StatusCreated, out)
	}
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("key_id")
	if !KnownID(id) {
		Problem(w, http.StatusNotFound, "key not found", "no key has this key_id", "key_id")
		return
	}
	err := s.inTenant(r, func(tx pgx.Tx) error { return store.RevokeAPIKey(r.Context(), tx, principalOf(r).Tenant, id) })
	if errors.Is(err, store.ErrNotFound) {
		Problem(w, http.StatusNotFound, "key not found", fmt.Sprintf("no unrevoked key %q for this tenant", id), "key_id")
		return
	}
	if err != nil {
		s.internal(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]string{"key_id": id, "status": "revoked"})
}

type rotateRequest struct {
	// Grace is how long the old key keeps working ("24h"; empty or "0s":
	// it is revoked at once).
	Grace string `json:"grace"`
}

// maxGrace bounds how long a rotated key may live on.
const maxGrace = 30 * 24 * time.Hour

func (s *Server) rotateKey(w http.ResponseWriter, r *http.Request) {
	var req rotateRequest
	if r.ContentLength != 0 && !s.decode(w, r, &req) {
		return
	}
	var grace time.Duration
	if req.Grace != "" {
		g, err := time.ParseDuration(req.Grace)
		if err != nil || g < 0 || g > maxGrace {
			Problem(w, http.StatusBadRequest, "invalid grace", fmt.Sprintf("grace must be a duration from 0s to %s, such as \"24h\"", maxGrace), "grace")
			return
		}
		grace = g
	}
	id := r.PathValue("key_id")
	if !KnownID(id) {
		Problem(w, http.StatusNotFound, "key not found", "no key has this key_id", "key_id")
		return
	}
	var out createdKey
	err := s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		out.APIKey, out.Key, err = store.RotateAPIKey(r.Context(), tx, principalOf(r).Tenant, id, grace)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		Problem(w, http.StatusNotFound, "key not found", fmt.Sprintf("no active key %q for this tenant", id), "key_id")
		return
	}
	if err != nil {
		s.internal(w, err)
		return
	}
	WriteJSON(w, http.StatusCreated, out)
}

// checkName says what is wrong with a key's name ("" when nothing): at
// most 200 bytes of UTF-8 without control characters.
func checkName(name string) string {
	if len(name) > 200 {
		return "is longer than 200 bytes"
	}
	for i, r := range name {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return fmt.Sprintf("holds %U at byte %d; a name is UTF-8 without control characters", r, i)
		}
	}
	return ""
}

// KnownID reports whether id could name a stored row: valid UTF-8 without
// NUL, which PostgreSQL refuses in text (a 5xx otherwise). An id that cannot
// is one no row has.
func KnownID(id string) bool { return utf8.ValidString(id) && !strings.ContainsRune(id, 0) }

// maxKeyBody bounds the body of a key management request.
const maxKeyBody = 64 << 10

// decode reads a strict JSON body into v, answering 400 naming the field
// when it cannot: every string in it must be valid UTF-8 without NUL
// (jsonguard), since encoding/json would silently rewrite invalid UTF-8.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxKeyBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		Problem(w, http.StatusRequestEntityTooLarge, "body too large", fmt.Sprintf("the body exceeds %d bytes", maxKeyBody), "")
		return false
	case err != nil:
		Problem(w, http.StatusBadRequest, "body not received", "the body could not be read", "")
		return false
	}
	if err := jsonguard.Check(body, 8); err != nil {
		Problem(w, http.StatusBadRequest, "malformed body", err.Error(), guiltyField(body))
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		detail, field := describeJSONError(err, body)
		Problem(w, http.StatusBadRequest, "malformed body", detail, field)
		return false
	}
	if dec.More() {
		Problem(w, http.StatusBadRequest, "malformed body", "the body holds more than one JSON value", "")
		return false
	}
	return true
}
