package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/heraldhq/herald/core/internal/cursor"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
)

// Groups, their settings and memberships (see directory.go).

func groupNotFound(w http.ResponseWriter, key string) {
	Problem(w, http.StatusNotFound, "group not found", fmt.Sprintf("this tenant has no group %q", clipID(key)), "key")
}

func answerGroup(w http.ResponseWriter, code int, sg store.StoredGroup) {
	setETag(w, sg.Version)
	WriteJSON(w, code, sg)
}

func (s *Server) putGroup(w http.ResponseWriter, r *http.Request) {
	key, ok := pathID(w, r, "key")
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
	var g directory.Group
	if ps := withoutMissing(directory.DecodeEntry(body, &g, "body", entryLimits), "key"); len(ps) > 0 {
		invalidEntry(w, "group", ps)
		return
	}
	if !samePath(w, "key", g.Key, key) {
		return
	}
	g.Key = key
	tenant := principalOf(r).Tenant
	var sg store.StoredGroup
	var created bool
	var current int64
	err := s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		if current, created, err = store.PutGroup(r.Context(), tx, tenant, g, ifVersion); err != nil {
			return err
		}
		sg, err = store.GetGroup(r.Context(), tx, tenant, key)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrVersionMismatch):
		preconditionFailed(w, "group", current)
	case err != nil:
		s.internal(w, err)
	case created:
		w.Header().Set("Location", "/v1/groups/"+url.PathEscape(key))
		answerGroup(w, http.StatusCreated, sg)
	default:
		answerGroup(w, http.StatusOK, sg)
	}
}

func (s *Server) getGroup(w http.ResponseWriter, r *http.Request) {
	key, ok := pathID(w, r, "key")
	if !ok {
		return
	}
	var sg store.StoredGroup
	err := s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		sg, err = store.GetGroup(r.Context(), tx, principalOf(r).Tenant, key)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		groupNotFound(w, key)
	case err != nil:
		s.internal(w, err)
	default:
		answerGroup(w, http.StatusOK, sg)
	}
}

func (s *Server) deleteGroup(w http.ResponseWriter, r *http.Request) {
	key, ok := pathID(w, r, "key")
	if !ok {
		return
	}
	ifVersion, ok := ifMatch(w, r)
	if !ok {
		return
	}
	var current int64
	err := s.inTenant(r, func(tx pgx.Tx) error {
		err := store.DeleteGroup(r.Context(), tx, principalOf(r).Tenant, key, ifVersion)
		if errors.Is(err, store.ErrVersionMismatch) {
			sg, gerr := store.GetGroup(r.Context(), tx, principalOf(r).Tenant, key)
			if gerr == nil {
				current = sg.Version
			}
		}
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		groupNotFound(w, key)
	case errors.Is(err, store.ErrVersionMismatch):
		preconditionFailed(w, "group", current)
	case err != nil:
		s.internal(w, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// memberAnswer is a membership as PUT answers it.
type memberAnswer struct {
	Group  string `json:"group"`
	UserID string `json:"user_id"`
	Role   string `json:"role"`
}

func (s *Server) putMember(w http.ResponseWriter, r *http.Request) {
	key, ok := pathID(w, r, "key")
	if !ok {
		return
	}
	userID, ok := pathID(w, r, "user_id")
	if !ok {
		return
	}
	body, ok := readBody(w, r, MaxBody)
	if !ok {
		return
	}
	if len(body) == 0 {
		body = []byte("{}")
	}
	var m directory.Member
	if ps := withoutMissing(directory.DecodeEntry(body, &m, "body", entryLimits), "group", "user_id"); len(ps) > 0 {
		invalidEntry(w, "membership", ps)
		return
	}
	if !samePath(w, "group", m.Group, key) || !samePath(w, "user_id", m.UserID, userID) {
		return
	}
	var created bool
	err := s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		created, err = store.PutMember(r.Context(), tx, principalOf(r).Tenant, key, userID, m.Role)
		return err
	})
	var missing *store.MissingError
	switch {
	case errors.As(err, &missing) && missing.What == "group":
		groupNotFound(w, key)
	case errors.As(err, &missing):
		recipientNotFound(w, userID)
	case err != nil:
		s.internal(w, err)
	case created:
		WriteJSON(w, http.StatusCreated, memberAnswer{key, userID, m.Role})
	default:
		WriteJSON(w, http.StatusOK, memberAnswer{key, userID, m.Role})
	}
}

func (s *Server) removeMember(w http.ResponseWriter, r *http.Request) {
	key, ok := pathID(w, r, "key")
	if !ok {
		return
	}
	userID, ok := pathID(w, r, "user_id")
	if !ok {
		return
	}
	err := s.inTenant(r, func(tx pgx.Tx) error {
		return store.RemoveMember(r.Context(), tx, principalOf(r).Tenant, key, userID)
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		Problem(w, http.StatusNotFound, "membership not found",
			fmt.Sprintf("recipient %q is not a member of group %q of this tenant", clipID(userID), clipID(key)), "user_id")
	case err != nil:
		s.internal(w, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// memberPage is the answer of GET /v1/groups/{key}/members.
type memberPage struct {
	Members    []store.StoredMember `json:"members"`
	NextCursor string               `json:"next_cursor,omitempty"`
}

func (s *Server) listMembers(w http.ResponseWriter, r *http.Request) {
	key, ok := pathID(w, r, "key")
	if !ok {
		return
	}
	q, ok := Query(w, r, "cursor", "limit")
	if !ok {
		return
	}
	limit, ok := listLimit(w, q.Get("limit"))
	if !ok {
		return
	}
	scope := "members|" + key
	after, ok := s.readCursor(w, q.Get("cursor"), scope)
	if !ok {
		return
	}
	var page memberPage
	err := s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		page.Members, err = store.ListMembers(r.Context(), tx, principalOf(r).Tenant, key, after, limit+1)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		groupNotFound(w, key)
		return
	case err != nil:
		s.internal(w, err)
		return
	}
	if len(page.Members) > limit {
		page.Members = page.Members[:limit]
		page.NextCursor = cursor.Encode(s.dir.cursorKey, cursor.Position{ID: page.Members[limit-1].UserID, Scope: scope})
	}
	WriteJSON(w, http.StatusOK, page)
}
