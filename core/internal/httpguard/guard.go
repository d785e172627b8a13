// Package httpguard bounds what one client can take from Herald's HTTP
// listeners: read, write and idle timeouts, a header size limit, a
// connection cap, a per-address connection cap and early idle closes under
// pressure for every server (Listener); per-key and per-IP request rates
// (Limiter); security headers on every response (Headers); and, for the
// admin listener, a bearer token with Host and Origin checks (AdminGuard).
package httpguard

import (
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Limits bound one HTTP server and its listener.
type Limits struct {
	// ReadHeaderTimeout bounds reading a request's headers; it also bounds
	// how long a new connection may stay silent.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its response.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that waits this long for
	// its next request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers; net/http answers 431 past
	// it (it reads up to 4 KiB more before it gives up).
	MaxHeaderBytes int
	// MaxConns caps the listener's open connections (0: no cap). Accept
	// waits while the cap is reached, so further connections queue in the
	// kernel's backlog until one closes.
	MaxConns int
	// MaxConnsPerIP caps one client address's open connections (0: no
	// cap); past it a new connection is answered 429 and closed.
	MaxConnsPerIP int
	// PressureIdleTimeout replaces IdleTimeout while the open connections
	// are at three quarters of MaxConns or more (0: never).
	PressureIdleTimeout time.Duration
}

// NewServer returns an HTTP server for h bounded by lim; what net/http
// logs (mostly clients' protocol mistakes) goes to log at debug level.
func NewServer(h http.Handler, lim Limits, log hclog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ErrorLog:          log.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}
}

// Headers sets, before h writes anything, the headers every API response
// carries: X-Content-Type-Options: nosniff (a browser never guesses a
// type, so no JSON is ever run as script or HTML) and Cache-Control:
// no-store (no proxy or browser keeps a tenant's data or a token check).
func Headers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}
