package pluginhost

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// Admin API paths, served by AdminHandler.
const (
	// AdminPluginsPath lists every provider: GET → JSON array of
	// ProviderStatus.
	AdminPluginsPath = "/admin/v1/plugins"
	// AdminReloadPattern hot-swaps a plugin: POST /admin/v1/plugins/{name}/reload.
	AdminReloadPattern = "/admin/v1/plugins/{name}/reload"
)

// AdminError is the JSON body of a failed admin request.
type AdminError struct {
	Error string `json:"error"`
}

// ReloadResponse is the JSON body of a successful reload: the status of
// every provider the name matched.
type ReloadResponse struct {
	Reloaded []ProviderStatus `json:"reloaded"`
}

// AdminHandler serves the plugin part of the daemon's admin API:
//
//	GET  /admin/v1/plugins                200 [ProviderStatus...]
//	POST /admin/v1/plugins/{name}/reload  200 ReloadResponse
//	                                      404 AdminError  no provider matches name
//	                                      409 AdminError  the new plugin failed; the old one keeps serving
//
// Mount it on the admin listener (loopback only): mux.Handle("/admin/v1/plugins", h)
// and mux.Handle("/admin/v1/plugins/", h), or mux.Handle("/admin/", h).
func AdminHandler(h *Host) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+AdminPluginsPath, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, h.Status())
	})
	mux.HandleFunc("POST "+AdminReloadPattern, func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
		defer cancel()
		err := h.Reload(ctx, name)
		switch {
		case errors.Is(err, ErrUnknownPlugin):
			writeJSON(w, http.StatusNotFound, AdminError{Error: err.Error()})
			return
		case errors.Is(err, ErrClosed):
			writeJSON(w, http.StatusServiceUnavailable, AdminError{Error: err.Error()})
			return
		case err != nil:
			writeJSON(w, http.StatusConflict, AdminError{Error: err.Error()})
			return
		}
		var out ReloadResponse
		for _, s := range h.Status() {
			if s.Name == name || s.Provider == name || s.Channel+"/"+s.Provider == name {
				out.Reloaded = append(out.Reloaded, s)
			}
		}
		writeJSON(w, http.StatusOK, out)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
