package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
)

// document is a whole versioned document that belongs to one directory
// entry: a recipient's preferences, a group's settings. GET answers it with
// the entry's version as its ETag; PUT decodes the body with the directory
// file's decoder, replaces the document (honouring If-Match) and answers
// what was stored, read back in the same tenant transaction.
type document[T any] struct {
	param    string // the path parameter that names the entry
	what     string // the document, in problems: "preferences"
	entry    string // the entry it belongs to, in a 412: "recipient"
	notFound func(w http.ResponseWriter, id string)
	get      func(ctx context.Context, q store.Querier, tenant, id string) (T, int64, error)
	replace  func(ctx context.Context, q store.Querier, tenant, id string, doc T, ifVersion int64) (int64, error)
	// decode is directory.DecodeEntry for T.
	decode func(body []byte, doc *T) directory.Problems
}

var (
	preferencesDoc = document[directory.UserPreferences]{param: "user_id", what: "preferences", entry: "recipient",
		notFound: recipientNotFound, get: store.GetPreferences, replace: store.ReplacePreferences,
		decode: func(b []byte, p *directory.UserPreferences) directory.Problems {
			return directory.DecodeEntry(b, p, "body", entryLimits)
		}}
	groupSettingsDoc = document[directory.GroupSettings]{param: "key", what: "group settings", entry: "group",
		notFound: groupNotFound, get: store.GetGroupSettings, replace: store.ReplaceGroupSettings,
		decode: func(b []byte, gs *directory.GroupSettings) directory.Problems {
			return directory.DecodeEntry(b, gs, "body", entryLimits)
		}}
)

func (d document[T]) serveGet(s *Server) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := pathID(w, r, d.param)
		if !ok {
			return
		}
		var doc T
		var v int64
		err := s.inTenant(r, func(tx pgx.Tx) error {
			var err error
			doc, v, err = d.get(r.Context(), tx, principalOf(r).Tenant, id)
			return err
		})
		d.answer(s, w, id, doc, v, err)
	}
}

func (d document[T]) servePut(s *Server) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := pathID(w, r, d.param)
		if !ok {
			return
		}
		ifVersion, ok := ifMatch(w, r)
		if !ok {
			return
		}
		body, ok := readBody(w, r, MaxBody)
		if !ok {
			return
		}
		var doc T
		if ps := d.decode(body, &doc); len(ps) > 0 {
			invalidEntry(w, d.what, ps)
			return
		}
		tenant := principalOf(r).Tenant
		var v int64
		err := s.inTenant(r, func(tx pgx.Tx) error {
			var err error
			if v, err = d.replace(r.Context(), tx, tenant, id, doc, ifVersion); err != nil {
				return err
			}
			doc, v, err = d.get(r.Context(), tx, tenant, id)
			return err
		})
		d.answer(s, w, id, doc, v, err)
	}
}

// answer writes the document with its ETag, or the problem err names (a
// mismatch answers the entry's current version).
func (d document[T]) answer(s *Server, w http.ResponseWriter, id string, doc T, v int64, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		d.notFound(w, id)
	case errors.Is(err, store.ErrVersionMismatch):
		preconditionFailed(w, d.entry, v)
	case err != nil:
		s.internal(w, err)
	default:
		setETag(w, v)
		WriteJSON(w, http.StatusOK, doc)
	}
}
