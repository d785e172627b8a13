package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/sdk/producer"
)

// The directory API: a tenant's recipients, their devices and
// preferences, groups, memberships and group settings, written with a
// tenant-wide API key. Bodies are the directory file's entries, decoded
// by the directory file's own decoder (directory.DecodeEntry), so the API
// and `herald directory import` accept exactly the same entries with the
// same checks, and every refusal names its field. Rows carry a version:
// GET and every write answer it as the ETag, and a write with If-Match
// is applied only while the row is still at that version (412 when
// another writer came first).
//
//	PUT    /v1/recipients/{user_id}                      create or replace
//	PATCH  /v1/recipients/{user_id}                      JSON merge patch
//	GET    /v1/recipients/{user_id}
//	GET    /v1/recipients?user_type=&group=&active=&updated_since=&cursor=&limit=
//	POST   /v1/recipients:batch?mode=all|partial         JSON lines of directory entries
//	POST   /v1/recipients/{user_id}/devices
//	GET    /v1/recipients/{user_id}/devices
//	DELETE /v1/recipients/{user_id}/devices/{device_id}
//	GET    /v1/recipients/{user_id}/preferences
//	PUT    /v1/recipients/{user_id}/preferences
//	PUT    /v1/groups/{key}                              create or replace
//	GET    /v1/groups/{key}
//	DELETE /v1/groups/{key}                              with its memberships and settings
//	GET    /v1/groups/{key}/settings
//	PUT    /v1/groups/{key}/settings
//	PUT    /v1/groups/{key}/members/{user_id}            {"role": "MANAGER"}
//	DELETE /v1/groups/{key}/members/{user_id}
//	GET    /v1/groups/{key}/members?cursor=&limit=

// DirectoryLimits bound the directory API's batch requests.
type DirectoryLimits struct {
	// MaxBatchEntries is how many entries one POST /v1/recipients:batch
	// may hold.
	MaxBatchEntries int
	// MaxBatchBytes bounds the body of one batch.
	MaxBatchBytes int64
}

// DefaultDirectoryLimits are the limits of a Server that was not given
// others.
func DefaultDirectoryLimits() DirectoryLimits {
	return DirectoryLimits{MaxBatchEntries: 5000, MaxBatchBytes: 16 << 20}
}

// directoryState is what the directory API needs beside the pool.
type directoryState struct {
	cursorKey []byte
	limits    DirectoryLimits
}

// SetCursorKey sets the key that signs the directory lists' cursors
// (store.Secret "cursor", the same on every daemon of a database); call
// it before Handler.
func (s *Server) SetCursorKey(key []byte) { s.dir.cursorKey = key }

// SetDirectoryLimits sets the batch limits; zero fields keep the
// defaults. Call it before Handler.
func (s *Server) SetDirectoryLimits(l DirectoryLimits) {
	d := DefaultDirectoryLimits()
	if l.MaxBatchEntries <= 0 {
		l.MaxBatchEntries = d.MaxBatchEntries
	}
	if l.MaxBatchBytes <= 0 {
		l.MaxBatchBytes = d.MaxBatchBytes
	}
	s.dir.limits = l
}

func (s *Server) directoryRoutes(mux *http.ServeMux) {
	if s.dir.limits.MaxBatchEntries == 0 {
		s.SetDirectoryLimits(DirectoryLimits{})
	}
	mux.HandleFunc("PUT /v1/recipients/{user_id}", s.tenantWide(s.putRecipient))
	mux.HandleFunc("PATCH /v1/recipients/{user_id}", s.tenantWide(s.patchRecipient))
	mux.HandleFunc("GET /v1/recipients/{user_id}", s.tenantWide(s.getRecipient))
	mux.HandleFunc("GET /v1/recipients", s.tenantWide(s.listRecipients))
	mux.HandleFunc("POST /v1/recipients:batch", s.tenantWide(s.batchRecipients))
	mux.HandleFunc("POST /v1/recipients/{user_id}/devices", s.tenantWide(s.addDevice))
	mux.HandleFunc("GET /v1/recipients/{user_id}/devices", s.tenantWide(s.listDevices))
	mux.HandleFunc("DELETE /v1/recipients/{user_id}/devices/{device_id}", s.tenantWide(s.removeDevice))
	mux.HandleFunc("GET /v1/recipients/{user_id}/preferences", s.tenantWide(preferencesDoc.serveGet(s)))
	mux.HandleFunc("PUT /v1/recipients/{user_id}/preferences", s.tenantWide(preferencesDoc.servePut(s)))
	mux.HandleFunc("PUT /v1/groups/{key}", s.tenantWide(s.putGroup))
	mux.HandleFunc("GET /v1/groups/{key}", s.tenantWide(s.getGroup))
	mux.HandleFunc("DELETE /v1/groups/{key}", s.tenantWide(s.deleteGroup))
	mux.HandleFunc("GET /v1/groups/{key}/settings", s.tenantWide(groupSettingsDoc.serveGet(s)))
	mux.HandleFunc("PUT /v1/groups/{key}/settings", s.tenantWide(groupSettingsDoc.servePut(s)))
	mux.HandleFunc("PUT /v1/groups/{key}/members/{user_id}", s.tenantWide(s.putMember))
	mux.HandleFunc("DELETE /v1/groups/{key}/members/{user_id}", s.tenantWide(s.removeMember))
	mux.HandleFunc("GET /v1/groups/{key}/members", s.tenantWide(s.listMembers))
}

// tenantWide lets only tenant-wide keys reach the directory: it is the
// tenant's, not a project's.
func (s *Server) tenantWide(next http.HandlerFunc) http.HandlerFunc {
	return s.auth(func(w http.ResponseWriter, r *http.Request) {
		if p := principalOf(r); p.Project != "" {
			Problem(w, http.StatusForbidden, "tenant-wide key required",
				fmt.Sprintf("this key is limited to project %q; the directory is the tenant's: use a key of the whole tenant", p.Project), "")
			return
		}
		next(w, r)
	})
}

// entryLimits bound one entry's body as DecodeEntry reads it.
var entryLimits = directory.Limits{MaxDepth: 8}

// readBody reads a request body of at most max bytes, answering 413 or
// 400 when it cannot.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		Problem(w, http.StatusRequestEntityTooLarge, "body too large", fmt.Sprintf("the body exceeds %d bytes", max), "")
		return nil, false
	case err != nil:
		detail := "the body could not be read"
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			detail = "the body did not arrive within the server's read timeout"
		}
		Problem(w, http.StatusBadRequest, "body not received", detail, "")
		return nil, false
	}
	return body, true
}

// pathID returns the path parameter name checked as a directory id,
// answering 400 naming it when it is not one.
func pathID(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	id := r.PathValue(name)
	if msg := directory.CheckID(id); msg != "" {
		Problem(w, http.StatusBadRequest, "invalid "+name, name+" in the path: "+msg, name)
		return "", false
	}
	return id, true
}

// ifMatch reads If-Match: a version this API gave as an ETag ("3"), or 0
// when the header is absent. Anything else is answered 400.
func ifMatch(w http.ResponseWriter, r *http.Request) (int64, bool) {
	h := r.Header.Get("If-Match")
	if h == "" {
		return 0, true
	}
	h = strings.TrimSpace(h)
	v, err := strconv.ParseInt(strings.Trim(strings.TrimPrefix(h, "W/"), `"`), 10, 64)
	if err != nil || v <= 0 || !strings.HasPrefix(h, `"`) || !strings.HasSuffix(h, `"`) || len(h) < 3 {
		Problem(w, http.StatusBadRequest, "invalid If-Match",
			`If-Match: want one ETag this API answered, such as "3" (with the quotes)`, "If-Match")
		return 0, false
	}
	return v, true
}

// setETag sets the ETag of a versioned row.
func setETag(w http.ResponseWriter, version int64) {
	w.Header().Set("ETag", `"`+strconv.FormatInt(version, 10)+`"`)
}

// preconditionFailed answers 412: the row changed since the If-Match
// version (or does not exist).
func preconditionFailed(w http.ResponseWriter, what string, current int64) {
	detail := fmt.Sprintf("If-Match names a version, but there is no such %s", what)
	if current > 0 {
		setETag(w, current)
		detail = fmt.Sprintf("the %s is at version %d, not the one If-Match names: another write came first; GET it again and retry", what, current)
	}
	Problem(w, http.StatusPreconditionFailed, "precondition failed", detail, "If-Match")
}

// entryProblem is one problem of an entry in a problem document's
// "problems" list.
type entryProblem struct {
	Line    int    `json:"line,omitempty"`
	Entry   string `json:"entry,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// problemList is a problem document with every problem of a body.
type problemList struct {
	producer.Problem
	Problems []entryProblem `json:"problems"`
	// Dropped counts problems beyond those listed.
	Dropped int `json:"dropped,omitempty"`
}

func entryProblems(ps directory.Problems) []entryProblem {
	out := make([]entryProblem, len(ps))
	for i, p := range ps {
		out[i] = entryProblem{Line: p.Line, Entry: p.Entry, Field: p.Field, Message: p.Msg}
	}
	return out
}

// invalidEntry answers 400 with every problem of a body; the document's
// field and detail are the first problem's.
func invalidEntry(w http.ResponseWriter, what string, ps directory.Problems) {
	first := ps[0]
	detail := first.Msg
	if first.Field != "" {
		detail = first.Field + ": " + first.Msg
	}
	if len(ps) > 1 {
		detail += fmt.Sprintf(" (and %d more problems, listed in problems)", len(ps)-1)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusBadRequest)
	writeBody(w, problemList{
		Problem:  producer.Problem{Type: "about:blank", Title: "invalid " + what, Status: http.StatusBadRequest, Detail: detail, Field: first.Field},
		Problems: entryProblems(ps),
	})
}

// withoutMissing drops the "missing (required)" problems of the fields
// the path gives (user_id, key, ...): the body may leave them out.
func withoutMissing(ps directory.Problems, fields ...string) directory.Problems {
	var out directory.Problems
	for _, p := range ps {
		missing := p.Msg == "missing (required)"
		drop := false
		for _, f := range fields {
			drop = drop || missing && p.Field == f
		}
		if !drop {
			out = append(out, p)
		}
	}
	return out
}

// samePath checks that a body's id (when it gives one) is the path's.
func samePath(w http.ResponseWriter, field, body, path string) bool {
	if body != "" && body != path {
		Problem(w, http.StatusBadRequest, "invalid "+field,
			fmt.Sprintf("%s: the body says %q, the path %q; leave it out of the body or make them equal", field, clipID(body), clipID(path)), field)
		return false
	}
	return true
}

func clipID(s string) string {
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}

// listLimit reads the limit parameter: 1 to 500, 100 by default.
func listLimit(w http.ResponseWriter, raw string) (int, bool) {
	if raw == "" {
		return 100, true
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > 500 {
		Problem(w, http.StatusBadRequest, "invalid query parameter", "limit: want a whole number from 1 to 500", "limit")
		return 0, false
	}
	return n, true
}

func writeBody(w http.ResponseWriter, v any) {
	_ = json.NewEncoder(w).Encode(v)
}
