package auth_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

type keys struct {
	secretA, secretB []byte
	rsa              *rsa.PrivateKey
	ec               *ecdsa.PrivateKey
	ed               ed25519.PrivateKey
}

// setup makes tenants a and b, each with an HS256 key "k1" (different
// secrets), and tenant a's RS256, ES256 and EdDSA keys from a JWKS.
func setup(t *testing.T) (*auth.Verifier, keys, *testenv.DB) {
	t.Helper()
	ctx := context.Background()
	db := testenv.Postgres(t)
	var k keys
	var err error
	k.secretA, _ = auth.NewSecret()
	k.secretB, _ = auth.NewSecret()
	if k.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	if k.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	var edPub ed25519.PublicKey
	if edPub, k.ed, err = ed25519.GenerateKey(rand.Reader); err != nil {
		t.Fatal(err)
	}
	for ten, secret := range map[string][]byte{"a": k.secretA, "b": k.secretB} {
		if err := store.EnsureTenant(ctx, db.Pool, ten, ""); err != nil {
			t.Fatal(err)
		}
		if err := store.AddTokenKey(ctx, db.Pool, store.TokenKey{TenantID: ten, Kid: "k1", Alg: "HS256", Issuer: "https://" + ten + ".example", Key: secret}); err != nil {
			t.Fatal(err)
		}
	}
	ecBytes, _ := k.ec.PublicKey.Bytes() // 0x04 || x || y
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": "rsa", "alg": "RS256", "use": "sig", "n": enc(k.rsa.N.Bytes()), "e": enc(big.NewInt(int64(k.rsa.E)).Bytes())},
		{"kty": "EC", "kid": "ec", "alg": "ES256", "crv": "P-256", "x": enc(ecBytes[1:33]), "y": enc(ecBytes[33:])},
		{"kty": "OKP", "kid": "ed", "alg": "EdDSA", "crv": "Ed25519", "x": enc(edPub)},
	}})
	tks, err := auth.KeysFromJWKS("a", "https://a.example", jwks)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range tks {
		if err := store.AddTokenKey(ctx, db.Pool, tk); err != nil {
			t.Fatal(err)
		}
	}
	api, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 2, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	return auth.NewVerifier(api, auth.Config{Audience: "herald", MaxTokenLifetime: 15 * time.Minute, CacheTTL: time.Nanosecond}), k, db
}

func enc(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func claims(tenant, iss string, life time.Duration) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"tenant": tenant, "sub": "u1", "user_type": "STAFF", "roles": []string{"MANAGER"},
		"iss": iss, "aud": "herald", "iat": now.Unix(), "exp": now.Add(life).Unix()}
}

func sign(t *testing.T, m jwt.SigningMethod, kid string, c jwt.MapClaims, key any) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVerifier(t *testing.T) {
	v, k, _ := setup(t)
	ctx := context.Background()
	good := claims("a", "https://a.example", 10*time.Minute)
	with := func(key string, val any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for kk, vv := range good {
			c[kk] = vv
		}
		if val == nil {
			delete(c, key)
		} else {
			c[key] = val
		}
		return c
	}
	accepted := map[string]string{
		"HS256":                 sign(t, jwt.SigningMethodHS256, "k1", good, k.secretA),
		"RS256":                 sign(t, jwt.SigningMethodRS256, "rsa", good, k.rsa),
		"ES256":                 sign(t, jwt.SigningMethodES256, "ec", good, k.ec),
		"EdDSA":                 sign(t, jwt.SigningMethodEdDSA, "ed", good, k.ed),
		"issued":                mustIssue(t, store.TokenKey{TenantID: "a", Kid: "k1", Alg: "HS256", Issuer: "https://a.example", Key: k.secretA}),
		"a project that exists": sign(t, jwt.SigningMethodHS256, "k1", with("project", store.DefaultProject), k.secretA),
	}
	for name, tok := range accepted {
		u, err := v.Verify(ctx, tok)
		if err != nil || u.Tenant != "a" || u.UserID != "u1" || u.UserType != "STAFF" || len(u.Roles) != 1 {
			t.Errorf("%s: %+v %v", name, u, err)
		}
	}
	refused := map[string]string{
		"a's key naming tenant b":            sign(t, jwt.SigningMethodHS256, "k1", with("tenant", "b"), k.secretA),
		"b's kid with a's secret":            sign(t, jwt.SigningMethodHS256, "k1", claims("b", "https://b.example", time.Minute), k.secretA),
		"a's RSA key naming tenant b":        sign(t, jwt.SigningMethodRS256, "rsa", with("tenant", "b"), k.rsa),
		"unknown tenant":                     sign(t, jwt.SigningMethodHS256, "k1", with("tenant", "zz"), k.secretA),
		"no tenant":                          sign(t, jwt.SigningMethodHS256, "k1", with("tenant", nil), k.secretA),
		"malformed tenant":                   sign(t, jwt.SigningMethodHS256, "k1", with("tenant", "a/../b"), k.secretA),
		"unknown kid":                        sign(t, jwt.SigningMethodHS256, "k9", good, k.secretA),
		"no kid":                             sign(t, jwt.SigningMethodHS256, "", good, k.secretA),
		"wrong audience":                     sign(t, jwt.SigningMethodHS256, "k1", with("aud", "other-app"), k.secretA),
		"no audience":                        sign(t, jwt.SigningMethodHS256, "k1", with("aud", nil), k.secretA),
		"wrong issuer":                       sign(t, jwt.SigningMethodHS256, "k1", with("iss", "https://b.example"), k.secretA),
		"no issuer":                          sign(t, jwt.SigningMethodHS256, "k1", with("iss", nil), k.secretA),
		"100-year token":                     sign(t, jwt.SigningMethodHS256, "k1", with("exp", time.Now().AddDate(100, 0, 0).Unix()), k.secretA),
		"16-minute token":                    sign(t, jwt.SigningMethodHS256, "k1", with("exp", time.Now().Add(16*time.Minute).Unix()), k.secretA),
		"no iat":                             sign(t, jwt.SigningMethodHS256, "k1", with("iat", nil), k.secretA),
		"iat in the future":                  sign(t, jwt.SigningMethodHS256, "k1", with("iat", time.Now().Add(time.Hour).Unix()), k.secretA),
		"expired":                            sign(t, jwt.SigningMethodHS256, "k1", with("exp", time.Now().Add(-time.Minute).Unix()), k.secretA),
		"no exp":                             sign(t, jwt.SigningMethodHS256, "k1", with("exp", nil), k.secretA),
		"no sub":                             sign(t, jwt.SigningMethodHS256, "k1", with("sub", nil), k.secretA),
		"NUL in sub":                         sign(t, jwt.SigningMethodHS256, "k1", with("sub", "u\x001"), k.secretA),
		"NUL in kid":                         sign(t, jwt.SigningMethodHS256, "k\x001", good, k.secretA),
		"invalid UTF-8 in kid":               sign(t, jwt.SigningMethodHS256, "k\xff", good, k.secretA),
		"a project that does not exist":      sign(t, jwt.SigningMethodHS256, "k1", with("project", "nope"), k.secretA),
		"RS256 key, HS256 token (confusion)": sign(t, jwt.SigningMethodHS256, "rsa", good, mustDER(t, &k.rsa.PublicKey)),
		"HS256 key, RS256 token":             sign(t, jwt.SigningMethodRS256, "k1", good, k.rsa),
		"EdDSA kid, ES256 token":             sign(t, jwt.SigningMethodES256, "ed", good, k.ec),
		"alg none":                           sign(t, jwt.SigningMethodNone, "k1", good, jwt.UnsafeAllowNoneSignatureType),
		"tampered payload":                   tamper(sign(t, jwt.SigningMethodHS256, "k1", good, k.secretA)),
		"empty":                              "",
		"garbage":                            "not.a.token",
		"huge":                               strings.Repeat("a", auth.MaxTokenLen+1),
	}
	for name, tok := range refused {
		if u, err := v.Verify(ctx, tok); !errors.Is(err, auth.ErrInvalidToken) {
			t.Errorf("%s: accepted or wrong error: %+v %v", name, u, err)
		}
	}
	// The refusals for an unknown tenant and an unknown key read the same.
	_, e1 := v.Verify(ctx, refused["unknown tenant"])
	_, e2 := v.Verify(ctx, refused["unknown kid"])
	if e1.Error() != e2.Error() {
		t.Errorf("unknown tenant and unknown key answer differently: %q vs %q", e1, e2)
	}
}

func TestRevokedKeyStopsAtOnce(t *testing.T) {
	v, k, db := setup(t)
	ctx := context.Background()
	tok := sign(t, jwt.SigningMethodHS256, "k1", claims("a", "https://a.example", time.Minute), k.secretA)
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := store.RevokeTokenKey(ctx, db.Pool, "a", "k1"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		_, err := v.Verify(ctx, tok)
		return errors.Is(err, auth.ErrInvalidToken)
	}, "a token under a revoked key is refused")
}

func TestJWKSRefusesPrivateAndBadKeys(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"private RSA":   `{"keys":[{"kty":"RSA","kid":"x","alg":"RS256","n":"AQAB","e":"AQAB","d":"AQAB"}]}`,
		"symmetric":     `{"keys":[{"kty":"oct","kid":"x","alg":"HS256","k":"c2VjcmV0"}]}`,
		"no kid":        `{"keys":[{"kty":"OKP","alg":"EdDSA","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`,
		"small RSA":     `{"keys":[{"kty":"RSA","kid":"x","alg":"RS256","n":"AQAB","e":"AQAB"}]}`,
		"alg mismatch":  `{"keys":[{"kty":"OKP","kid":"x","alg":"RS256","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`,
		"bad curve":     `{"keys":[{"kty":"EC","kid":"x","alg":"ES256","crv":"P-384","x":"AA","y":"AA"}]}`,
		"off the curve": `{"keys":[{"kty":"EC","kid":"x","alg":"ES256","crv":"P-256","x":"` + enc(make([]byte, 32)) + `","y":"` + enc(make([]byte, 32)) + `"}]}`,
		"dup kid":       `{"keys":[{"kty":"OKP","kid":"x","alg":"EdDSA","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},{"kty":"OKP","kid":"x","alg":"EdDSA","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`,
		"empty":         `{"keys":[]}`,
		"not json":      `{`,
		"enc use":       `{"keys":[{"kty":"OKP","kid":"x","use":"enc","alg":"EdDSA","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`,
	}
	for name, doc := range cases {
		if _, err := auth.KeysFromJWKS("a", "iss", []byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzKeysFromJWKS(f *testing.F) {
	f.Add([]byte(`{"keys":[{"kty":"OKP","kid":"x","alg":"EdDSA","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA","kid":"x","alg":"RS256","n":"AQAB","e":"AQAB"}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		ks, err := auth.KeysFromJWKS("a", "iss", doc)
		if err == nil && len(ks) == 0 {
			t.Fatal("no error and no keys")
		}
	})
}

func mustIssue(t *testing.T, k store.TokenKey) string {
	t.Helper()
	s, err := auth.Issue(k, "herald", auth.User{UserID: "u1", UserType: "STAFF", Roles: []string{"MANAGER"}}, 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustDER(t *testing.T, pub crypto.PublicKey) []byte {
	t.Helper()
	ks, err := auth.KeysFromJWKS("a", "x", []byte(`{"keys":[{"kty":"RSA","kid":"x","alg":"RS256","n":"`+
		enc(pub.(*rsa.PublicKey).N.Bytes())+`","e":"AQAB"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return ks[0].Key
}

func tamper(tok string) string {
	parts := strings.Split(tok, ".")
	var c map[string]any
	b, _ := base64.RawURLEncoding.DecodeString(parts[1])
	_ = json.Unmarshal(b, &c)
	c["sub"] = "admin"
	b, _ = json.Marshal(c)
	parts[1] = base64.RawURLEncoding.EncodeToString(b)
	return strings.Join(parts, ".")
}

// TestDeploymentAudience: with auth.audience empty the audience is the
// deployment's own ("herald:" and the id migration 0025 stored), the same
// for every reader of one database and another for another database; a
// configured audience wins; and a verifier left with no audience refuses
// every token, an audience-less one included.
func TestDeploymentAudience(t *testing.T) {
	_, k, db := setup(t)
	ctx := context.Background()
	aud, err := auth.ResolveAudience(ctx, db.Pool, auth.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if len(aud) != len("herald:")+32 || !strings.HasPrefix(aud, "herald:") {
		t.Fatalf("deployment audience %q, want herald: and 32 hex digits", aud)
	}
	if again, err := auth.ResolveAudience(ctx, db.Pool, auth.Config{}); err != nil || again != aud {
		t.Fatalf("second read %q (%v), want %q", again, err, aud)
	}
	other, err := auth.ResolveAudience(ctx, testenv.Postgres(t).Pool, auth.Config{})
	if err != nil || other == aud {
		t.Fatalf("another database's audience %q (%v), ours %q", other, err, aud)
	}
	if got, err := auth.ResolveAudience(ctx, db.Pool, auth.Config{Audience: "https://herald.example"}); err != nil || got != "https://herald.example" {
		t.Fatalf("configured audience: %q %v", got, err)
	}

	api, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 1, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	ours := auth.NewVerifier(api, auth.Config{Audience: aud})
	empty := auth.NewVerifier(api, auth.Config{})
	tk := store.TokenKey{TenantID: "a", Kid: "k1", Alg: "HS256", Issuer: "https://a.example", Key: k.secretA}
	for name, tc := range map[string]struct {
		v    *auth.Verifier
		aud  string
		want bool
	}{
		"ours":                         {ours, aud, true},
		"another deployment's":         {ours, other, false},
		"the old shared one":           {ours, "herald", false},
		"no audience configured":       {empty, aud, false},
		"no audience configured or in": {empty, "", false},
	} {
		tok, err := auth.Issue(tk, tc.aud, auth.User{UserID: "u1", UserType: "STAFF"}, time.Minute, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		_, err = tc.v.Verify(ctx, tok)
		if (err == nil) != tc.want || (err != nil && !errors.Is(err, auth.ErrInvalidToken)) {
			t.Errorf("%s: %v, want accepted %v", name, err, tc.want)
		}
	}
	if err := (auth.Config{Audience: "a\x00b", MaxTokenLifetime: time.Minute}).Validate(); err == nil || !strings.Contains(err.Error(), "audience") {
		t.Errorf("NUL in auth.audience: %v", err)
	}
}

// TestPrincipalVerifiesOncePerRequest: the outcome Principal attaches to a
// request is what a later layer's Request takes, without verifying again
// (the key is revoked in between, and the carried user still stands),
// while a request without it, with another token, or seen by another
// verifier is verified afresh. A refusal is carried the same way.
func TestPrincipalVerifiesOncePerRequest(t *testing.T) {
	v, k, db := setup(t)
	ctx := context.Background()
	tok := sign(t, jwt.SigningMethodHS256, "k1", claims("a", "https://a.example", time.Minute), k.secretA)
	req := func(token string) *http.Request {
		r := httptest.NewRequest("GET", "/v1/inbox", nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		return r
	}
	r, u, err := v.Principal(req(tok))
	if err != nil || u.Tenant != "a" || u.UserID != "u1" {
		t.Fatalf("Principal: %+v, %v", u, err)
	}
	if err := store.RevokeTokenKey(ctx, db.Pool, "a", "k1"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		_, _, err := v.Principal(req(tok))
		return errors.Is(err, auth.ErrInvalidToken)
	}, "the revoked key refuses a request verified afresh")

	w := httptest.NewRecorder()
	if got, ok := v.Request(w, r, hclog.NewNullLogger()); !ok || got.UserID != "u1" {
		t.Fatalf("Request on the verified request: %+v %v (%d %s); want the carried user, not a second verification", got, ok, w.Code, w.Body)
	}
	other := auth.NewVerifier(db.Pool, auth.Config{Audience: "herald"})
	if _, _, err := other.Principal(r); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("another verifier took the carried outcome: %v", err)
	}
	changed := r.Clone(ctx)
	changed.Header.Set("Authorization", "Bearer "+tok+"x")
	if _, _, err := v.Principal(changed); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("another token took the carried outcome: %v", err)
	}

	r, _, err = v.Principal(req(""))
	if !errors.Is(err, auth.ErrNoToken) {
		t.Fatalf("no token: %v", err)
	}
	w = httptest.NewRecorder()
	if _, ok := v.Request(w, r, hclog.NewNullLogger()); ok || w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "a user token is required") {
		t.Fatalf("Request with no token: %v %d %s", ok, w.Code, w.Body)
	}
	r, _, err = v.Principal(req(tok))
	if !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("revoked: %v", err)
	}
	w = httptest.NewRecorder()
	if _, ok := v.Request(w, r, hclog.NewNullLogger()); ok || w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), auth.RefusedDetail) {
		t.Fatalf("Request with a carried refusal: %v %d %s", ok, w.Code, w.Body)
	}
}
