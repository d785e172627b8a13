package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/heraldhq/herald/core/internal/origins"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
)

// A tenant's allowed browser origins (package cors), managed with a
// tenant-wide API key:
//
//	GET /v1/settings/cors   {"origins": [{"origin", "frame", "created_at"}]}
//	PUT /v1/settings/cors   {"origins": [{"origin", "frame"?}]} → the whole list, normalised

// corsSettings is the body of PUT /v1/settings/cors.
type corsSettings struct {
	Origins *[]corsOrigin `json:"origins"`
}

type corsOrigin struct {
	Origin *string `json:"origin"`
	Frame  bool    `json:"frame"`
}

func (s *Server) getCORS(w http.ResponseWriter, r *http.Request) {
	var list []store.AllowedOrigin
	err := s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		list, err = store.ListOrigins(r.Context(), tx, principalOf(r).Tenant)
		return err
	})
	if err != nil {
		s.internal(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"origins": nonNil(list)})
}

func (s *Server) putCORS(w http.ResponseWriter, r *http.Request) {
	var req corsSettings
	if !s.decode(w, r, &req) {
		return
	}
	if req.Origins == nil {
		Problem(w, http.StatusBadRequest, "invalid settings", "origins is required (an empty list allows no origin)", "origins")
		return
	}
	if n := len(*req.Origins); n > origins.MaxPerTenant {
		Problem(w, http.StatusBadRequest, "invalid settings", fmt.Sprintf("origins holds %d entries; a tenant lists at most %d", n, origins.MaxPerTenant), "origins")
		return
	}
	list := make([]store.AllowedOrigin, 0, len(*req.Origins))
	seen := map[string]int{}
	for i, o := range *req.Origins {
		field := fmt.Sprintf("origins[%d].origin", i)
		if o.Origin == nil {
			Problem(w, http.StatusBadRequest, "invalid settings", field+" is required", field)
			return
		}
		n, err := origins.Normalize(*o.Origin)
		if err != nil {
			Problem(w, http.StatusBadRequest, "invalid origin", field+" "+err.Error(), field)
			return
		}
		if j, dup := seen[n]; dup {
			Problem(w, http.StatusBadRequest, "invalid settings", fmt.Sprintf("%s is %s, as is origins[%d].origin; list an origin once", field, n, j), field)
			return
		}
		seen[n] = i
		list = append(list, store.AllowedOrigin{Origin: n, Frame: o.Frame})
	}
	var out []store.AllowedOrigin
	err := s.inTenant(r, func(tx pgx.Tx) error {
		tenant := principalOf(r).Tenant
		if err := store.ReplaceOrigins(r.Context(), tx, tenant, list); err != nil {
			return err
		}
		var err error
		out, err = store.ListOrigins(r.Context(), tx, tenant)
		return err
	})
	if errors.Is(err, store.ErrTooManyOrigins) {
		Problem(w, http.StatusBadRequest, "invalid settings", "origins: "+err.Error(), "origins")
		return
	}
	if err != nil {
		s.internal(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"origins": nonNil(out)})
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
