// Package cors answers cross-origin requests from browsers on the
// end-user endpoints of the public API, for the origins tenants allow
// (store.AllowedOrigin, managed with `herald tenants origins` and
// PUT /v1/settings/cors).
//
// Exactly the inbox (/v1/inbox, /v1/inbox/...), the live ticket
// (POST /v1/live/tickets) and /v1/me (/v1/me, /v1/me/...) answer CORS:
// they take an end user's token, which a tenant's own front end holds.
// Producers' endpoints (/v1/events, /v1/apikeys, the directory, the
// settings) take API keys, which never belong in a browser, and never
// answer it.
//
// A preflight (OPTIONS with Access-Control-Request-Method) carries no
// credentials, so the tenant is unknown: it is granted when some tenant
// lists the origin (herald_origin_listed: yes or no, never which tenant,
// so it tells nothing of which tenants exist). The actual request is
// granted only when the token it carries verifies and its tenant lists the
// origin; a request whose token is missing or refused gets the grant on
// its 401 (which holds no tenant data) when some tenant lists the origin,
// so the front end can read the 401 and fetch a fresh token. Credentials
// are bearer tokens in the Authorization header, never cookies, so
// Access-Control-Allow-Credentials is never sent: a browser attaches
// nothing on its own, and a page of another origin can send only what it
// already holds.
//
// The Origin header must be exactly one header, in the form browsers send
// (origins.Canonical); anything else is granted nothing.
package cors

import (
	"context"
	"errors"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/origins"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// What a grant allows.
const (
	AllowMethods  = "GET, POST, PUT, PATCH, DELETE"
	AllowHeaders  = "Authorization, Content-Type, If-Match"
	ExposeHeaders = "ETag, Location, Retry-After, WWW-Authenticate"
	// MaxAge is how long (seconds) a browser may reuse a preflight.
	MaxAge = "600"
)

// cacheTTL is how long an answer about an origin is reused: a removed
// origin stops being granted within it.
const cacheTTL = 2 * time.Second

// maxCache bounds the cache (a flood of distinct origins cannot grow it).
const maxCache = 10000

// Covered reports whether p is one of the end-user paths that answer
// CORS. A path that is not clean (dot segments, doubled slashes) is not:
// the router redirects it elsewhere.
func Covered(p string) bool {
	if p != path.Clean(p) {
		return false
	}
	return p == "/v1/inbox" || strings.HasPrefix(p, "/v1/inbox/") ||
		p == "/v1/me" || strings.HasPrefix(p, "/v1/me/") ||
		p == "/v1/live/tickets"
}

// Policy decides grants from the tenants' lists, read through pool (the
// API role, bound by row-level security to one tenant per transaction).
type Policy struct {
	pool     *pgxpool.Pool
	verifier *auth.Verifier
	log      hclog.Logger
	now      func() time.Time

	mu     sync.Mutex
	cache  map[[2]string]cached
	frames map[string]cachedFrames
}

type cachedFrames struct {
	list []string
	at   time.Time
}

type cached struct {
	ok bool
	at time.Time
}

// New returns the policy. verifier checks the end users' tokens of actual
// requests.
func New(pool *pgxpool.Pool, verifier *auth.Verifier, log hclog.Logger) *Policy {
	return &Policy{pool: pool, verifier: verifier, log: log.Named("cors"), now: time.Now, cache: map[[2]string]cached{}, frames: map[string]cachedFrames{}}
}

// TenantAllows reports whether tenant lists origin (a canonical origin).
func (p *Policy) TenantAllows(ctx context.Context, tenant, origin string) (bool, error) {
	return p.lookup(ctx, tenant, origin, func() (bool, error) {
		var ok bool
		err := store.InTenant(ctx, p.pool, tenant, "", func(tx pgx.Tx) error {
			var err error
			ok, err = store.OriginAllowed(ctx, tx, tenant, origin)
			return err
		})
		return ok, err
	})
}

// Listed reports whether any tenant lists origin.
func (p *Policy) Listed(ctx context.Context, origin string) (bool, error) {
	return p.lookup(ctx, "", origin, func() (bool, error) { return store.OriginListed(ctx, p.pool, origin) })
}

func (p *Policy) lookup(ctx context.Context, tenant, origin string, read func() (bool, error)) (bool, error) {
	key := [2]string{tenant, origin}
	p.mu.Lock()
	c, ok := p.cache[key]
	p.mu.Unlock()
	if ok && p.now().Sub(c.at) < cacheTTL {
		return c.ok, nil
	}
	allowed, err := read()
	if err != nil {
		return false, err
	}
	p.mu.Lock()
	if len(p.cache) >= maxCache {
		clear(p.cache)
	}
	p.cache[key] = cached{ok: allowed, at: p.now()}
	p.mu.Unlock()
	return allowed, nil
}

// FrameOrigins returns the origins tenant lets embed the hosted inbox
// page (webinbox.FrameOrigins), none for an unknown tenant.
func (p *Policy) FrameOrigins(ctx context.Context, tenant string) ([]string, error) {
	p.mu.Lock()
	c, ok := p.frames[tenant]
	p.mu.Unlock()
	if ok && p.now().Sub(c.at) < cacheTTL {
		return c.list, nil
	}
	list, err := store.FrameOrigins(ctx, p.pool, tenant)
	if err != nil {
		p.log.Error("frame origins lookup failed; the page is framed by none", "error", err)
		return nil, err
	}
	p.mu.Lock()
	if len(p.frames) >= maxCache {
		clear(p.frames)
	}
	p.frames[tenant] = cachedFrames{list: list, at: p.now()}
	p.mu.Unlock()
	return list, nil
}

// RequestOrigin returns r's Origin when r carries exactly one, in the form
// browsers send it.
func RequestOrigin(r *http.Request) (string, bool) {
	v := r.Header.Values("Origin")
	if len(v) != 1 || !origins.Canonical(v[0]) {
		return "", false
	}
	return v[0], true
}

// Handler answers CORS on the covered paths in front of next; every other
// path goes to next untouched.
func (p *Policy) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Covered(r.URL.Path) || r.URL.RawPath != "" {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Add("Vary", "Origin")
		_, hasOrigin := r.Header["Origin"]
		if r.Method == http.MethodOptions && hasOrigin && r.Header.Get("Access-Control-Request-Method") != "" {
			p.preflight(w, r)
			return
		}
		origin, ok := RequestOrigin(r)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		// Verified once: the request goes on carrying the outcome, which
		// the handler's own check (auth.Verifier.Request) takes.
		r, u, err := p.verifier.Principal(r)
		switch {
		case err == nil:
			allowed, err := p.TenantAllows(r.Context(), u.Tenant, origin)
			if err != nil {
				p.log.Error("origin lookup failed; no CORS grant", "error", err)
			}
			if allowed {
				grant(h, origin)
			}
			next.ServeHTTP(w, r)
		case errors.Is(err, auth.ErrNoToken) || errors.Is(err, auth.ErrInvalidToken):
			// The answer will be a 401 (no tenant data): readable by an
			// origin some tenant lists, so the page can refresh its token.
			next.ServeHTTP(&onUnauthorized{ResponseWriter: w, grant: func() {
				if ok, _ := p.Listed(r.Context(), origin); ok {
					grant(h, origin)
				}
			}}, r)
		default:
			next.ServeHTTP(w, r) // the database: the handler answers 500
		}
	})
}

func (p *Policy) preflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	origin, ok := RequestOrigin(r)
	if !ok {
		api.Problem(w, http.StatusForbidden, "origin not allowed",
			"the Origin header must be one origin as browsers send it (scheme://host[:port], lower case, no path)", "Origin")
		return
	}
	listed, err := p.Listed(r.Context(), origin)
	if err != nil {
		p.log.Error("origin lookup failed", "error", err)
		api.Problem(w, http.StatusInternalServerError, "internal error", "the request could not be completed; it is safe to retry", "")
		return
	}
	if !listed {
		api.Problem(w, http.StatusForbidden, "origin not allowed",
			"this origin may not call the API from a browser; a tenant allows it with herald tenants origins add or PUT /v1/settings/cors", "Origin")
		return
	}
	grant(h, origin)
	h.Set("Access-Control-Allow-Methods", AllowMethods)
	h.Set("Access-Control-Allow-Headers", AllowHeaders)
	h.Set("Access-Control-Max-Age", MaxAge)
	w.WriteHeader(http.StatusNoContent)
}

func grant(h http.Header, origin string) {
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Expose-Headers", ExposeHeaders)
}

// onUnauthorized calls grant before a 401 is written.
type onUnauthorized struct {
	http.ResponseWriter
	grant   func()
	written bool
}

func (o *onUnauthorized) WriteHeader(code int) {
	if !o.written {
		o.written = true
		if code == http.StatusUnauthorized {
			o.grant()
		}
	}
	o.ResponseWriter.WriteHeader(code)
}

func (o *onUnauthorized) Write(b []byte) (int, error) {
	if !o.written {
		o.WriteHeader(http.StatusOK)
	}
	return o.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (o *onUnauthorized) Unwrap() http.ResponseWriter { return o.ResponseWriter }
