package me

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
)

// Devices is the answer of GET /v1/me/devices.
type Devices struct {
	Items []store.StoredDevice `json:"items"`
}

func (s *Server) listDevices(w http.ResponseWriter, r *http.Request) {
	u := userOf(r)
	var out Devices
	err := s.inUserTx(r.Context(), u, func(tx pgx.Tx) error {
		var err error
		out.Items, err = store.ListDevices(r.Context(), tx, u.Tenant, u.UserID)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		notInDirectory(w)
	case err != nil:
		s.internal(w, err)
	default:
		api.WriteJSON(w, http.StatusOK, out)
	}
}

// errTooMany is a device beyond MaxDevices.
var errTooMany = errors.New("too many devices")

// addDevice registers a push device of the user: an FCM or APNs token, or
// a Web Push subscription (the directory file's device entry, with its
// checks). A device already registered (the same token or endpoint) is
// updated and answered 200 with its id; a new one 201.
func (s *Server) addDevice(w http.ResponseWriter, r *http.Request) {
	u := userOf(r)
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var d directory.Device
	if !decodeEntry(w, body, &d) {
		return
	}
	if probs := directory.CheckDevice(d); len(probs) > 0 {
		ps := make(directory.Problems, len(probs))
		for i, p := range probs {
			ps[i] = directory.Problem{Field: p.Field, Msg: p.Msg}
		}
		writeProblems(w, http.StatusBadRequest, "invalid body", ps)
		return
	}
	var sd store.StoredDevice
	var created bool
	err := s.inUserTx(r.Context(), u, func(tx pgx.Tx) error {
		// The recipient's row is locked first (FOR UPDATE: two
		// registrations of one user take turns), so the count holds.
		var n int
		err := tx.QueryRow(r.Context(), `SELECT (SELECT count(*) FROM recipient_devices d
				WHERE d.tenant_id = r.tenant_id AND d.user_id = r.user_id AND d.token <> $3)
			FROM recipients r WHERE r.tenant_id = $1 AND r.user_id = $2 FOR UPDATE`,
			u.Tenant, u.UserID, d.Address()).Scan(&n)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if n >= MaxDevices {
			return errTooMany
		}
		sd, created, err = store.AddDevice(r.Context(), tx, u.Tenant, u.UserID, d)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		notInDirectory(w)
	case errors.Is(err, errTooMany):
		api.Problem(w, http.StatusConflict, "too many devices",
			fmt.Sprintf("you have %d devices, the most one user may register; remove one (DELETE /v1/me/devices/{id}) first", MaxDevices), "")
	case err != nil:
		s.internal(w, err)
	case created:
		w.Header().Set("Location", "devices/"+sd.ID)
		api.WriteJSON(w, http.StatusCreated, sd)
	default:
		api.WriteJSON(w, http.StatusOK, sd)
	}
}

// deviceID is what a device id looks like (md5 of its address, hex).
var deviceID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// removeDevice deletes one device of the user. An id that is malformed,
// unknown or another user's is the same 404.
func (s *Server) removeDevice(w http.ResponseWriter, r *http.Request) {
	u := userOf(r)
	id := r.PathValue("id")
	err := store.ErrNotFound
	if deviceID.MatchString(id) {
		err = s.inUserTx(r.Context(), u, func(tx pgx.Tx) error {
			return store.RemoveDevice(r.Context(), tx, u.Tenant, u.UserID, id)
		})
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		if !deviceID.MatchString(id) {
			id = "(this id)"
		}
		api.Problem(w, http.StatusNotFound, "device not found", fmt.Sprintf("you have no device %q", id), "id")
	case err != nil:
		s.internal(w, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
