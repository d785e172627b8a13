package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// Device tokens the FCM peer answers with an error.
const (
	tokUnregistered = "tok-unregistered" // 404 UNREGISTERED
	tokInvalid      = "tok-invalid"      // 400 INVALID_ARGUMENT
	tokQuota        = "tok-quota"        // 429 QUOTA_EXCEEDED, Retry-After: 7
	tokUnavailable  = "tok-unavailable"  // 503 UNAVAILABLE, Retry-After: 3
	tokInternal     = "tok-internal"     // 500 INTERNAL, no Retry-After
)

const peerProject = "herald-test"

// fcmPeer is a local HTTP server speaking the FCM HTTP v1 messages:send
// request, response and error shapes, plus an OAuth 2.0 token endpoint for
// service-account credentials.
type fcmPeer struct {
	srv *httptest.Server
	// bearer is the access token the peer accepts.
	bearer string
	// saKey verifies JWT assertions at the token endpoint.
	saKey *rsa.PublicKey

	mu          sync.Mutex
	requests    []fcmRequest
	tokenGrants int
}

func startFCMPeer(t *testing.T) *fcmPeer {
	t.Helper()
	p := &fcmPeer{bearer: "static-test-token"}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/projects/{project}/messages:send", p.send)
	mux.HandleFunc("POST /token", p.token)
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *fcmPeer) received() []fcmRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]fcmRequest(nil), p.requests...)
}

func (p *fcmPeer) grants() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tokenGrants
}

func fcmErr(w http.ResponseWriter, httpCode int, status, errorCode, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(httpCode)
	body := map[string]any{"error": map[string]any{
		"code": httpCode, "message": msg, "status": status,
		"details": []any{map[string]any{
			"@type":     "type.googleapis.com/google.firebase.fcm.v1.FcmError",
			"errorCode": errorCode,
		}},
	}}
	_ = json.NewEncoder(w).Encode(body)
}

func (p *fcmPeer) send(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	bearer := p.bearer
	p.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+bearer {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = fmt.Fprint(w, `{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}`)
		return
	}
	if r.PathValue("project") != peerProject {
		fcmErr(w, http.StatusNotFound, "NOT_FOUND", "UNSPECIFIED_ERROR", "project not found")
		return
	}
	var req fcmRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fcmErr(w, http.StatusBadRequest, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "bad JSON: "+err.Error())
		return
	}
	switch req.Message.Token {
	case tokUnregistered:
		fcmErr(w, http.StatusNotFound, "NOT_FOUND", "UNREGISTERED", "Requested entity was not found.")
		return
	case tokInvalid:
		fcmErr(w, http.StatusBadRequest, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token")
		return
	case tokQuota:
		w.Header().Set("Retry-After", "7")
		fcmErr(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", "Quota exceeded.")
		return
	case tokUnavailable:
		w.Header().Set("Retry-After", "3")
		fcmErr(w, http.StatusServiceUnavailable, "UNAVAILABLE", "UNAVAILABLE", "The service is currently unavailable.")
		return
	case tokInternal:
		fcmErr(w, http.StatusInternalServerError, "INTERNAL", "INTERNAL", "Internal error encountered.")
		return
	}
	if req.Message.Token == "" && req.Message.Topic == "" {
		fcmErr(w, http.StatusBadRequest, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "message has no target")
		return
	}
	p.mu.Lock()
	p.requests = append(p.requests, req)
	n := len(p.requests)
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_ = json.NewEncoder(w).Encode(map[string]string{"name": fmt.Sprintf("projects/%s/messages/0:%d", peerProject, n)})
}

// jwtBearerGrant is the OAuth 2.0 grant type of RFC 7523, which the
// plugin's token source (golang.org/x/oauth2/jwt) sends.
const jwtBearerGrant = "urn:ietf:params:oauth:grant-type:jwt-bearer"

// token is an RFC 7523 JWT-bearer token endpoint: it verifies the
// assertion's signature and claims and issues p.bearer.
func (p *fcmPeer) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != jwtBearerGrant {
		http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
		return
	}
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(r.PostForm.Get("assertion"), claims, func(*jwt.Token) (any, error) { return p.saKey, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithAudience(p.srv.URL+"/token"), jwt.WithIssuedAt())
	if err != nil || claims["scope"] != fcmScope || claims["iss"] != "herald@herald-test.iam.gserviceaccount.test" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, `{"error":"invalid_grant","error_description":%q}`, fmt.Sprint(err))
		return
	}
	p.mu.Lock()
	p.tokenGrants++
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": p.bearer, "expires_in": 3599, "token_type": "Bearer"})
}

// writeServiceAccount writes a service-account key file whose token_uri is
// the peer's token endpoint, and tells the peer the matching public key.
func writeServiceAccount(t *testing.T, p *fcmPeer) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.saKey = &key.PublicKey
	p.bearer = "sa-issued-token"
	p.mu.Unlock()
	sa := map[string]string{
		"type":           "service_account",
		"project_id":     peerProject,
		"private_key_id": "kid-1",
		"private_key":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":   "herald@herald-test.iam.gserviceaccount.test",
		"token_uri":      p.srv.URL + "/token",
	}
	b, err := json.Marshal(sa)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sa.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tokensOf lists the device tokens the peer accepted messages for.
func tokensOf(reqs []fcmRequest) []string {
	var out []string
	for _, r := range reqs {
		if r.Message.Token != "" {
			out = append(out, r.Message.Token)
		}
	}
	return out
}
