package pluginhost

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/heraldhq/herald/sdk/producer"
)

// Admin API paths, served by AdminHandler.
const (
	// AdminPluginsPath lists every provider: GET → JSON array of
	// ProviderStatus.
	AdminPluginsPath = "/admin/v1/plugins"
	// AdminReloadPattern hot-swaps a plugin: POST /admin/v1/plugins/{name}/reload.
	AdminReloadPattern = "/admin/v1/plugins/{name}/reload"
)

// AdminError is the body of a failed admin request: an RFC 9457 problem
// document (application/problem+json) whose Detail says what failed.
type AdminError = producer.Problem

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
// Any other method on these paths is a 405, any other path a 404, both
// problem documents.
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
			writeProblem(w, http.StatusNotFound, "unknown plugin", err.Error(), "name")
			return
		case errors.Is(err, ErrClosed):
			writeProblem(w, http.StatusServiceUnavailable, "plugin host closed", err.Error(), "")
			return
		case err != nil:
			writeProblem(w, http.StatusConflict, "reload failed", err.Error(), "")
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
	for pattern, allow := range map[string]string{AdminPluginsPath: "GET", AdminReloadPattern: "POST"} {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeProblem(w, http.StatusMethodNotAllowed, "method not allowed", r.Method+" "+r.URL.Path+": use "+allow, "")
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, "not found", "no route for "+r.Method+" "+r.URL.Path, "")
	})
	return mux
}

// writeProblem answers an RFC 9457 problem document.
func writeProblem(w http.ResponseWriter, status int, title, detail, field string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(AdminError{Type: "about:blank", Title: title, Status: status, Detail: detail, Field: field})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
