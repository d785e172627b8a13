package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	oauth2jwt "golang.org/x/oauth2/jwt"
)

// fcmScope is the OAuth 2.0 scope FCM's HTTP v1 API requires.
const fcmScope = "https://www.googleapis.com/auth/firebase.messaging"

// serviceAccount is a Google service-account key file, read by
// golang.org/x/oauth2/google: its token_uri is where assertions are traded
// for access tokens (Google's, or a test peer's).
type serviceAccount struct {
	conf *oauth2jwt.Config
}

// parseServiceAccount reads a service-account key file.
func parseServiceAccount(b []byte) (*serviceAccount, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("not a service-account JSON file: %w", err)
	}
	if head.Type != "service_account" {
		return nil, fmt.Errorf("type is %q, want \"service_account\"", head.Type)
	}
	conf, err := google.JWTConfigFromJSON(b, fcmScope)
	if err != nil {
		return nil, err
	}
	if conf.Email == "" || conf.TokenURL == "" {
		return nil, errors.New("client_email and token_uri must be set")
	}
	if u, err := url.Parse(conf.TokenURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("token_uri %q is not an http(s) URL", conf.TokenURL)
	}
	// The key is otherwise parsed at the first send: refuse a bad one now.
	if _, err := jwt.ParseRSAPrivateKeyFromPEM(conf.PrivateKey); err != nil {
		return nil, fmt.Errorf("private_key: %w", err)
	}
	return &serviceAccount{conf: conf}, nil
}

// tokenSource hands out bearer tokens: a static one, or ones obtained from a
// service account and cached until shortly before they expire.
type tokenSource struct {
	static string
	sa     *serviceAccount
	hc     *http.Client

	mu      sync.Mutex
	token   string
	expires time.Time
}

// errTokenRejected marks a token endpoint answer that says the credentials
// are wrong; it prompts the operator, not a retry, to fix things.
var errTokenRejected = errors.New("push: token endpoint refused the credentials")

// Token returns a bearer token valid for at least another minute.
func (ts *tokenSource) Token(ctx context.Context) (string, error) {
	if ts.sa == nil {
		return ts.static, nil
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.token != "" && time.Until(ts.expires) > time.Minute {
		return ts.token, nil
	}
	tok, ttl, err := ts.exchange(ctx)
	if err != nil {
		return "", err
	}
	ts.token, ts.expires = tok, time.Now().Add(ttl)
	return tok, nil
}

// Invalidate drops a cached token the API refused.
func (ts *tokenSource) Invalidate() {
	ts.mu.Lock()
	ts.token = ""
	ts.mu.Unlock()
}

// exchange signs an assertion and trades it for an access token (RFC 7523)
// with golang.org/x/oauth2's JWT flow, over the plugin's HTTP client and
// bounded by ctx (a token source of its own per exchange: the cache is
// ts's, which Invalidate can drop).
func (ts *tokenSource) exchange(ctx context.Context) (string, time.Duration, error) {
	ctx = context.WithValue(ctx, oauth2.HTTPClient, ts.hc)
	tok, err := ts.sa.conf.TokenSource(ctx).Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.Response != nil {
			switch re.Response.StatusCode {
			case http.StatusBadRequest, http.StatusUnauthorized:
				return "", 0, fmt.Errorf("%w: %s: %s", errTokenRejected, re.Response.Status, strings.TrimSpace(string(re.Body)))
			}
			return "", 0, fmt.Errorf("push: token endpoint: %s", re.Response.Status)
		}
		return "", 0, fmt.Errorf("push: token request: %w", err)
	}
	if tok.AccessToken == "" {
		return "", 0, errors.New("push: token endpoint answered without an access_token")
	}
	ttl := time.Hour
	if !tok.Expiry.IsZero() {
		ttl = time.Until(tok.Expiry)
	}
	return tok.AccessToken, ttl, nil
}
