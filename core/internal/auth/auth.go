// Package auth verifies end users' tokens. A tenant's backend signs its
// users' JWTs with a key it registered with Herald (`herald tokens keys
// add`); the token's header names the key (kid) and its claims name the
// tenant, and a token is accepted only under a key of the tenant it names,
// with the key's own algorithm and issuer, Herald's audience, and a
// lifetime no longer than the configured cap. One Verifier serves the HTTP
// API and the live (WebSocket) sessions.
package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/config/field"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Algorithms a token key may have.
var Algorithms = []string{"HS256", "RS256", "ES256", "EdDSA"}

// MinSecretLen is the shortest HS256 secret accepted: the key should be at
// least as long as the hash's output.
const MinSecretLen = 32

// MaxTokenLen bounds a token; longer input is refused unread.
const MaxTokenLen = 8 << 10

// ErrInvalidToken wraps every reason a token is refused. The wrapping
// error's text names the reason (whether a tenant, key, algorithm, issuer
// or project exists) and goes to the daemon's log only: callers are told
// RefusedDetail, the same words for every refusal.
var ErrInvalidToken = errors.New("invalid token")

// RefusedDetail is what a caller whose token was refused is told, whatever
// the reason (the reason is logged): a caller without a valid credential
// learns nothing of which tenants, keys, issuers or projects exist.
const RefusedDetail = "the token is missing, malformed, expired or not accepted here"

// maxKidLen bounds a token header's kid.
const maxKidLen = 200

// Config tunes the verifier: the daemon's auth { ... } settings (the
// fields with a koanf tag) and what code sets.
type Config struct {
	// Audience is the aud claim every token must carry. Empty: the
	// deployment's own, "herald:" and the deployment id `herald migrate
	// up` stored in the database (herald doctor shows it), so that one
	// deployment refuses tokens minted for another even when a tenant
	// signs for both with one key and one issuer. Set it to keep an
	// audience your backends already put in their tokens.
	Audience string `koanf:"audience"`
	// MaxTokenLifetime caps a token's exp - iat.
	MaxTokenLifetime time.Duration `koanf:"max_token_lifetime"`
	// Leeway absorbs clock skew on exp, iat and nbf (0: 5 s).
	Leeway time.Duration
	// CacheTTL bounds how long a key (or its absence) is remembered: a
	// revoked key stops working within it (0: 1 s).
	CacheTTL time.Duration
}

// DefaultConfig returns the verifier's default settings.
func DefaultConfig() Config {
	return Config{MaxTokenLifetime: 15 * time.Minute}
}

// ResolveAudience returns cfg.Audience, or, when it is empty, the
// deployment's own audience (store.DeploymentAudience) read through q (a
// connection of the pipeline's role or the tables' owner).
func ResolveAudience(ctx context.Context, q store.Querier, cfg Config) (string, error) {
	if cfg.Audience != "" {
		return cfg.Audience, nil
	}
	aud, err := store.DeploymentAudience(ctx, q)
	if err != nil {
		return "", fmt.Errorf("auth.audience is empty and the deployment's own cannot be read (run herald migrate up): %w", err)
	}
	return aud, nil
}

// Validate checks the settings; it returns field.Errors naming the keys.
func (c Config) Validate() error {
	var errs field.Errors
	if len(c.Audience) > 200 || !cleanText(c.Audience, 200) {
		errs.Add("audience", "must be text of at most 200 bytes without control characters")
	}
	errs.PositiveDuration("max_token_lifetime", c.MaxTokenLifetime)
	return errs.Err()
}

// setDefaults gives every setting left zero its default.
func (c *Config) setDefaults() {
	d := DefaultConfig()
	if c.MaxTokenLifetime <= 0 {
		c.MaxTokenLifetime = d.MaxTokenLifetime
	}
	if c.Leeway <= 0 {
		c.Leeway = 5 * time.Second
	}
	if c.CacheTTL <= 0 {
		c.CacheTTL = time.Second
	}
}

// User is who a verified token speaks for.
type User struct {
	Tenant   string
	UserID   string
	UserType string
	Roles    []string
	// Project scopes the user to one project of the tenant ("": every).
	Project   string
	ExpiresAt time.Time
}

// Claims are the claims Herald reads from an end-user token: sub is the
// user id.
type Claims struct {
	Tenant   string   `json:"tenant"`
	UserType string   `json:"user_type,omitempty"`
	Roles    []string `json:"roles,omitempty"`
	Project  string   `json:"project,omitempty"`
	jwt.RegisteredClaims
}

// Verifier checks end-user tokens against the tenants' keys.
type Verifier struct {
	pool *pgxpool.Pool
	cfg  Config
	now  func() time.Time

	mu    sync.Mutex
	cache map[keyRef]cachedKey
}

type keyRef struct{ tenant, kid string }

type cachedKey struct {
	key     *verifyKey // nil: no such key
	fetched time.Time
}

type verifyKey struct {
	alg, issuer string
	key         any
}

// NewVerifier returns a verifier that reads keys through pool, whose role
// is bound by row-level security to the tenant a token names (herald_api).
func NewVerifier(pool *pgxpool.Pool, cfg Config) *Verifier {
	cfg.setDefaults()
	return &Verifier{pool: pool, cfg: cfg, now: time.Now, cache: map[keyRef]cachedKey{}}
}

// Config returns the verifier's settings, defaults filled in.
func (v *Verifier) Config() Config { return v.cfg }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidToken, fmt.Sprintf(format, args...))
}

// Verify checks raw and returns its user, or an error wrapping
// ErrInvalidToken.
func (v *Verifier) Verify(ctx context.Context, raw string) (User, error) {
	if raw == "" {
		return User{}, invalid("no token")
	}
	if len(raw) > MaxTokenLen {
		return User{}, invalid("longer than %d bytes", MaxTokenLen)
	}
	if v.cfg.Audience == "" {
		// NewVerifier's caller resolves the audience (ResolveAudience); an
		// empty one would accept tokens for any audience.
		return User{}, invalid("no audience configured")
	}
	parser := jwt.NewParser(
		jwt.WithValidMethods(Algorithms),
		jwt.WithAudience(v.cfg.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(v.cfg.Leeway),
		jwt.WithTimeFunc(v.now),
	)
	var c Claims
	var lookupErr error
	_, err := parser.ParseWithClaims(raw, &c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if kid == "" {
			return nil, errors.New("the header names no key (kid)")
		}
		if !cleanText(kid, maxKidLen) {
			// Checked before the lookup: PostgreSQL refuses NUL and
			// invalid UTF-8, and that must not be a 500.
			return nil, errors.New("the key id (kid) is not text of at most 200 bytes without control characters")
		}
		if store.ValidID("tenant", c.Tenant) != nil {
			return nil, errors.New("the tenant claim is missing or malformed")
		}
		k, err := v.key(ctx, c.Tenant, kid)
		if err != nil {
			lookupErr = err
			return nil, err
		}
		if k == nil {
			// The same words whether the tenant or the key is unknown.
			return nil, errors.New("no such key for this tenant")
		}
		if t.Method.Alg() != k.alg {
			return nil, fmt.Errorf("signed with %s; the key verifies %s only", t.Method.Alg(), k.alg)
		}
		if c.Issuer != k.issuer {
			return nil, errors.New("the issuer is not the key's")
		}
		return k.key, nil
	})
	if lookupErr != nil {
		return User{}, lookupErr // the database, not the token
	}
	if err != nil {
		return User{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	switch {
	case c.Subject == "":
		return User{}, invalid("no subject (sub, the user id)")
	case !cleanText(c.Subject, 200):
		return User{}, invalid("the subject (sub) is not text of at most 200 bytes without control characters")
	case !cleanText(c.UserType, 200):
		return User{}, invalid("user_type is not text of at most 200 bytes without control characters")
	case c.IssuedAt == nil:
		return User{}, invalid("no issued-at time (iat)")
	case c.ExpiresAt.Sub(c.IssuedAt.Time) > v.cfg.MaxTokenLifetime:
		return User{}, invalid("lives %s; at most %s is accepted", c.ExpiresAt.Sub(c.IssuedAt.Time), v.cfg.MaxTokenLifetime)
	}
	for _, role := range c.Roles {
		if !cleanText(role, 200) {
			return User{}, invalid("a role is not text of at most 200 bytes without control characters")
		}
	}
	if c.Project != "" {
		if store.ValidID("project", c.Project) != nil {
			return User{}, invalid("the project claim is malformed")
		}
		// Checked only now, under a valid signature: an unauthenticated
		// caller cannot probe which projects exist.
		ok, err := v.projectExists(ctx, c.Tenant, c.Project)
		if err != nil {
			return User{}, err // the database, not the token
		}
		if !ok {
			return User{}, invalid("tenant %s has no project %q", c.Tenant, c.Project)
		}
	}
	return User{Tenant: c.Tenant, UserID: c.Subject, UserType: c.UserType, Roles: c.Roles, Project: c.Project,
		ExpiresAt: c.ExpiresAt.Time}, nil
}

// cleanText reports whether s is valid UTF-8 of at most max bytes without
// control characters (NUL among them: PostgreSQL refuses it in text).
func cleanText(s string, max int) bool {
	if len(s) > max || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// projectExists reports whether tenant has project, from a cache at most
// CacheTTL old (a deleted project stops working within it).
func (v *Verifier) projectExists(ctx context.Context, tenant, project string) (bool, error) {
	ref := keyRef{tenant, "\x00project\x00" + project} // no kid holds NUL
	v.mu.Lock()
	c, ok := v.cache[ref]
	v.mu.Unlock()
	if ok && v.now().Sub(c.fetched) < v.cfg.CacheTTL {
		return c.key != nil, nil
	}
	var exists bool
	err := store.InTenant(ctx, v.pool, tenant, "", func(tx pgx.Tx) error {
		var err error
		exists, err = store.ProjectExists(ctx, tx, tenant, project)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("token project: %w", err)
	}
	var mark *verifyKey
	if exists {
		mark = &verifyKey{}
	}
	v.mu.Lock()
	if len(v.cache) > 10000 {
		clear(v.cache)
	}
	v.cache[ref] = cachedKey{key: mark, fetched: v.now()}
	v.mu.Unlock()
	return exists, nil
}

// key returns the tenant's key kid (nil when there is none), from a cache
// at most CacheTTL old.
func (v *Verifier) key(ctx context.Context, tenant, kid string) (*verifyKey, error) {
	ref := keyRef{tenant, kid}
	v.mu.Lock()
	c, ok := v.cache[ref]
	v.mu.Unlock()
	if ok && v.now().Sub(c.fetched) < v.cfg.CacheTTL {
		return c.key, nil
	}
	var k store.TokenKey
	err := store.InTenant(ctx, v.pool, tenant, "", func(tx pgx.Tx) error {
		var err error
		k, err = store.GetTokenKey(ctx, tx, tenant, kid)
		return err
	})
	var vk *verifyKey
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("token key: %w", err)
	default:
		pub, err := parseKey(k.Alg, k.Key)
		if err != nil {
			return nil, fmt.Errorf("token key %s/%s: %w", tenant, kid, err)
		}
		vk = &verifyKey{alg: k.Alg, issuer: k.Issuer, key: pub}
	}
	v.mu.Lock()
	if len(v.cache) > 10000 {
		clear(v.cache) // bounded: a flood of unknown kids cannot grow it
	}
	v.cache[ref] = cachedKey{key: vk, fetched: v.now()}
	v.mu.Unlock()
	return vk, nil
}

// parseKey turns stored key material into what jwt verifies with.
func parseKey(alg string, b []byte) (any, error) {
	if alg == "HS256" {
		return b, nil
	}
	pub, err := x509.ParsePKIXPublicKey(b)
	if err != nil {
		return nil, err
	}
	if err := checkKeyAlg(alg, pub); err != nil {
		return nil, err
	}
	return pub, nil
}

// checkKeyAlg reports whether pub is a key of alg.
func checkKeyAlg(alg string, pub crypto.PublicKey) error {
	ok := false
	switch k := pub.(type) {
	case *rsa.PublicKey:
		ok = alg == "RS256" && k.N.BitLen() >= 2048
	case *ecdsa.PublicKey:
		ok = alg == "ES256" && k.Curve.Params().Name == "P-256"
	case ed25519.PublicKey:
		ok = alg == "EdDSA"
	}
	if !ok {
		return fmt.Errorf("a %T is not a key for %s (RS256 needs RSA ≥ 2048 bits, ES256 P-256, EdDSA Ed25519)", pub, alg)
	}
	return nil
}

// ErrNoToken is Principal's answer for a request with no bearer token.
var ErrNoToken = errors.New("no bearer token")

// verifiedKey is the context key of the outcome Principal attached to a
// request (a verified value).
type verifiedKey struct{}

// verified is the outcome of verifying one request's bearer token raw:
// its user, or ErrNoToken or an error wrapping ErrInvalidToken.
type verified struct {
	v    *Verifier
	raw  string
	user User
	err  error
}

// Principal verifies r's bearer token once for the whole request: it
// returns the user, ErrNoToken, or an error wrapping ErrInvalidToken (or
// another error: the database), and r carrying that outcome, so a later
// layer's Principal or Request takes it instead of verifying again (the
// CORS layer in front of a handler). The outcome is bound to this
// verifier and to the token's exact text; a database failure is not
// carried, so the next layer tries again.
func (v *Verifier) Principal(r *http.Request) (*http.Request, User, error) {
	raw, ok := api.BearerToken(r)
	if c, done := r.Context().Value(verifiedKey{}).(verified); done && c.v == v && c.raw == raw {
		return r, c.user, c.err
	}
	var u User
	err := ErrNoToken
	if ok {
		u, err = v.Verify(r.Context(), raw)
	}
	if err == nil || errors.Is(err, ErrNoToken) || errors.Is(err, ErrInvalidToken) {
		r = r.WithContext(context.WithValue(r.Context(), verifiedKey{}, verified{v: v, raw: raw, user: u, err: err}))
	}
	return r, u, err
}

// Request verifies the bearer token of r (or takes the outcome Principal
// attached to r). When it cannot, it has answered w (401 with
// RefusedDetail, the reason logged to log at debug level, or 500 for a
// failure of the database, logged to log) and returns false.
func (v *Verifier) Request(w http.ResponseWriter, r *http.Request, log hclog.Logger) (User, bool) {
	_, u, err := v.Principal(r)
	switch {
	case errors.Is(err, ErrNoToken):
		w.Header().Set("WWW-Authenticate", `Bearer realm="herald"`)
		api.Problem(w, http.StatusUnauthorized, "unauthorized", "a user token is required: Authorization: Bearer <jwt>", "")
		return User{}, false
	case errors.Is(err, ErrInvalidToken):
		log.Debug("token refused", "reason", err, "remote", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="herald", error="invalid_token"`)
		api.Problem(w, http.StatusUnauthorized, "unauthorized", RefusedDetail, "")
		return User{}, false
	case err != nil:
		log.Error("request failed", "error", err)
		api.Problem(w, http.StatusInternalServerError, "internal error", "the request could not be completed; it is safe to retry", "")
		return User{}, false
	}
	return u, true
}
