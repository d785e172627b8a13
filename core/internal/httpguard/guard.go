// Package httpguard bounds what one client can take from Herald's HTTP
// listeners: read, write and idle timeouts, a header size limit and a
// connection cap for every server; per-key and per-IP request rates
// (Limiter); security headers on every response (Headers); and, for the
// admin listener, a bearer token with Host and Origin checks (AdminGuard).
package httpguard

import (
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/net/netutil"
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
}

// Listen opens a TCP listener on addr whose open connections are capped
// at maxConns (0: no cap).
func Listen(addr string, maxConns int) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if maxConns > 0 {
		ln = netutil.LimitListener(ln, maxConns)
	}
	return ln, nil
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
