package main

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// fcmScope is the OAuth 2.0 scope FCM's HTTP v1 API requires.
const fcmScope = "https://www.googleapis.com/auth/firebase.messaging"

// jwtBearerGrant is the OAuth 2.0 grant type of RFC 7523.
const jwtBearerGrant = "urn:ietf:params:oauth:grant-type:jwt-bearer"

// serviceAccount is the part of a Google service-account key file the
// plugin uses.
type serviceAccount struct {
	Type         string `json:"type"`
	ClientEmail  string `json:"client_email"`
	PrivateKeyID string `json:"private_key_id"`
	PrivateKey   string `json:"private_key"`
	TokenURI     string `json:"token_uri"`

	key *rsa.PrivateKey
}

// parseServiceAccount reads a service-account key file.
func parseServiceAccount(b []byte) (*serviceAccount, error) {
	var sa serviceAccount
	if err := json.Unmarshal(b, &sa); err != nil {
		return nil, fmt.Errorf("not a service-account JSON file: %w", err)
	}
	if sa.Type != "service_account" {
		return nil, fmt.Errorf("type is %q, want \"service_account\"", sa.Type)
	}
	if sa.ClientEmail == "" || sa.TokenURI == "" {
		return nil, errors.New("client_email and token_uri must be set")
	}
	if u, err := url.Parse(sa.TokenURI); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("token_uri %q is not an http(s) URL", sa.TokenURI)
	}
	key, err := jwt.ParseRSAPrivateKeyFromPEM([]byte(sa.PrivateKey))
	if err != nil {
		return nil, fmt.Errorf("private_key: %w", err)
	}
	sa.key = key
	return &sa, nil
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

// exchange signs an assertion and trades it for an access token (RFC 7523).
func (ts *tokenSource) exchange(ctx context.Context) (string, time.Duration, error) {
	now := time.Now()
	claims := jwt.MapClaims{
		"iss":   ts.sa.ClientEmail,
		"scope": fcmScope,
		"aud":   ts.sa.TokenURI,
		"iat":   now.Unix(),
		"exp":   now.Add(time.Hour).Unix(),
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	if ts.sa.PrivateKeyID != "" {
		tok.Header["kid"] = ts.sa.PrivateKeyID
	}
	assertion, err := tok.SignedString(ts.sa.key)
	if err != nil {
		return "", 0, fmt.Errorf("push: sign token assertion: %w", err)
	}
	form := url.Values{"grant_type": {jwtBearerGrant}, "assertion": {assertion}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.sa.TokenURI, strings.NewReader(form.Encode()))
	if err != nil {
		return "", 0, fmt.Errorf("push: token request: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := ts.hc.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("push: token request: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusUnauthorized {
		return "", 0, fmt.Errorf("%w: %s: %s", errTokenRejected, resp.Status, strings.TrimSpace(string(body)))
	}
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("push: token endpoint: %s", resp.Status)
	}
	var out struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int    `json:"expires_in"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.AccessToken == "" {
		return "", 0, fmt.Errorf("push: token endpoint answered without an access_token")
	}
	ttl := time.Duration(out.ExpiresIn) * time.Second
	if ttl <= 0 {
		ttl = time.Hour
	}
	return out.AccessToken, ttl, nil
}
