package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
)

// deleteRecipientResponse is the body of DELETE /v1/recipients/{user_id}.
type deleteRecipientResponse struct {
	UserID string `json:"user_id"`
	// Removed counts the directory rows deleted.
	Removed store.RemovedRecipient `json:"removed"`
	// Erased is what ?erase=true did to the stored rows (absent without
	// it).
	Erased *store.Erasure `json:"erased,omitempty"`
}

// deleteRecipient serves DELETE /v1/recipients/{user_id}[?erase=true]:
// the user leaves the tenant's directory (recipient, devices, memberships,
// preferences) in one transaction; with erase=true their personal data is
// also erased from stored notifications and deliveries (store.EraseRecipient),
// Like every directory route it needs a tenant-wide key. 404 when
// the tenant has no such user (nor, with erase, any stored row of them).
func (s *Server) deleteRecipient(w http.ResponseWriter, r *http.Request) {
	userID := r.PathValue("user_id")
	if !KnownID(userID) {
		Problem(w, http.StatusBadRequest, "invalid user_id", "user_id must be valid UTF-8 without NUL", "user_id")
		return
	}
	q, ok := Query(w, r, "erase")
	if !ok {
		return
	}
	erase := false
	if vs, ok := q["erase"]; ok {
		var err error
		if len(vs) > 1 {
			Problem(w, http.StatusBadRequest, "invalid query parameter", "erase is given more than once", "erase")
			return
		}
		if erase, err = strconv.ParseBool(vs[0]); err != nil {
			Problem(w, http.StatusBadRequest, "invalid query parameter", "erase must be true or false, got "+quoteShort(vs[0]), "erase")
			return
		}
	}
	pr := principalOf(r)
	notFound := func() {
		Problem(w, http.StatusNotFound, "recipient not found", fmt.Sprintf("this tenant has no recipient %s", quoteShort(userID)), "user_id")
	}
	if !erase {
		var removed store.RemovedRecipient
		err := s.inTenant(r, func(tx pgx.Tx) error {
			var err error
			removed, err = store.RemoveRecipient(r.Context(), tx, pr.Tenant, userID)
			return err
		})
		switch {
		case errors.Is(err, store.ErrNotFound):
			notFound()
		case err != nil:
			s.internal(w, err)
		default:
			WriteJSON(w, http.StatusOK, deleteRecipientResponse{UserID: userID, Removed: removed})
		}
		return
	}
	e, err := store.EraseRecipient(r.Context(), s.pool, pr.Tenant, userID, store.EraseOptions{})
	switch {
	case errors.Is(err, store.ErrNotFound):
		notFound()
	case err != nil:
		// What was erased stays erased; the rest waits for a retry.
		s.internal(w, err)
	default:
		WriteJSON(w, http.StatusOK, deleteRecipientResponse{UserID: userID, Removed: e.Removed, Erased: &e})
	}
}
