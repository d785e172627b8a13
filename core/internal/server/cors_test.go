package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/cors"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// corsWorld is the tenancy world with token keys for tenants a and b, a
// allowing https://app.example.com (calls and frames) and
// http://localhost:3000, b allowing https://b.example.
type corsWorld struct {
	*world
	tokenKeys map[string]store.TokenKey
	audience  string
}

const (
	appOrigin = "https://app.example.com"
	bOrigin   = "https://b.example"
)

func newCORSWorld(t *testing.T) *corsWorld {
	t.Helper()
	w := &corsWorld{world: newWorld(t), tokenKeys: map[string]store.TokenKey{}}
	var err error
	if w.audience, err = auth.ResolveAudience(context.Background(), w.db.Pool, config.DefaultDaemon().Auth); err != nil {
		t.Fatal(err)
	}
	for _, ten := range []string{"a", "b"} {
		secret, err := auth.NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		k := store.TokenKey{TenantID: ten, Kid: "k1", Alg: "HS256", Issuer: "https://" + ten + ".example", Key: secret}
		if err := store.AddTokenKey(context.Background(), w.db.Pool, k); err != nil {
			t.Fatal(err)
		}
		w.tokenKeys[ten] = k
		dir := &directory.Directory{Recipients: []directory.Recipient{{UserID: "alice", UserType: "CUSTOMER", Active: true}}}
		if err := store.ImportDirectory(context.Background(), w.db.Pool, ten, dir); err != nil {
			t.Fatal(err)
		}
	}
	r := w.do(t, "PUT", "/v1/settings/cors", w.keys["a"],
		`{"origins": [{"origin": "HTTPS://App.Example.COM:443", "frame": true}, {"origin": "http://localhost:3000"}]}`)
	var got struct {
		Origins []store.AllowedOrigin `json:"origins"`
	}
	if err := json.Unmarshal(r.body, &got); r.code != http.StatusOK || err != nil || len(got.Origins) != 2 ||
		got.Origins[1].Origin != appOrigin || !got.Origins[1].Frame || got.Origins[0].Origin != "http://localhost:3000" || got.Origins[0].Frame {
		t.Fatalf("PUT /v1/settings/cors: %d %s", r.code, r.body)
	}
	if r := w.do(t, "PUT", "/v1/settings/cors", w.keys["b"], `{"origins": [{"origin": "`+bOrigin+`"}]}`); r.code != http.StatusOK {
		t.Fatalf("PUT /v1/settings/cors for b: %d %s", r.code, r.body)
	}
	return w
}

func (w *corsWorld) token(t *testing.T, tenant string) string {
	t.Helper()
	tok, err := auth.Issue(w.tokenKeys[tenant], w.audience, auth.User{UserID: "alice", UserType: "CUSTOMER"}, 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// send makes one request with the headers given (each a name and a value;
// a name may repeat) and returns the response, its body read.
func (w *corsWorld) send(t *testing.T, method, path string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, w.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// raw sends head (the request line and headers, CRLF-separated, without
// the blank line) byte for byte, past the client's own header checks.
func (w *corsWorld) raw(t *testing.T, head string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(w.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, head+"\r\nHost: herald\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// endUserPaths are one request of each end-user endpoint class.
var endUserPaths = []struct{ method, path string }{
	{"GET", "/v1/inbox"},
	{"GET", "/v1/inbox/unread-count"},
	{"POST", "/v1/live/tickets"},
	{"GET", "/v1/me/preferences"},
}

// TestCORSGrantsExactlyTheTokensTenantsOrigins: the end-user endpoints
// grant a tenant's origin on preflight and on the actual request with that
// tenant's token, and nothing to another origin, to another tenant's
// token, or on any other endpoint.
func TestCORSGrantsExactlyTheTokensTenantsOrigins(t *testing.T) {
	w := newCORSWorld(t)
	tokA, tokB := w.token(t, "a"), w.token(t, "b")
	for _, ep := range endUserPaths {
		resp, body := w.send(t, "OPTIONS", ep.path, "Origin", appOrigin, "Access-Control-Request-Method", ep.method,
			"Access-Control-Request-Headers", "authorization,if-match,content-type")
		h := resp.Header
		if resp.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != appOrigin ||
			h.Get("Access-Control-Allow-Methods") != cors.AllowMethods || h.Get("Access-Control-Allow-Headers") != "Authorization, Content-Type, If-Match" ||
			h.Get("Access-Control-Max-Age") != "600" || !strings.Contains(strings.Join(h.Values("Vary"), ","), "Origin") ||
			h.Get("Access-Control-Allow-Credentials") != "" {
			t.Fatalf("preflight %s %s from %s: %d %v %s", ep.method, ep.path, appOrigin, resp.StatusCode, h, body)
		}
		// An origin no tenant lists: a 403 problem naming Origin, no grant.
		resp, body = w.send(t, "OPTIONS", ep.path, "Origin", "https://evil.example", "Access-Control-Request-Method", ep.method)
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" || !strings.Contains(body, `"field":"Origin"`) {
			t.Fatalf("preflight %s from evil: %d %v %s", ep.path, resp.StatusCode, resp.Header, body)
		}

		// The actual request: granted for a's token only.
		resp, body = w.send(t, ep.method, ep.path, "Origin", appOrigin, "Authorization", "Bearer "+tokA)
		if resp.StatusCode >= 300 || resp.Header.Get("Access-Control-Allow-Origin") != appOrigin ||
			!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "ETag") || !strings.Contains(strings.Join(resp.Header.Values("Vary"), ","), "Origin") {
			t.Fatalf("%s %s, a's token, from %s: %d %v %s", ep.method, ep.path, appOrigin, resp.StatusCode, resp.Header, body)
		}
		resp, body = w.send(t, ep.method, ep.path, "Origin", appOrigin, "Authorization", "Bearer "+tokB)
		if resp.StatusCode >= 300 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("%s %s, b's token, from a's origin: %d granted %q %s", ep.method, ep.path, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), body)
		}
		resp, _ = w.send(t, ep.method, ep.path, "Origin", bOrigin, "Authorization", "Bearer "+tokB)
		if resp.Header.Get("Access-Control-Allow-Origin") != bOrigin {
			t.Fatalf("%s %s, b's token, from b's origin: %d %v", ep.method, ep.path, resp.StatusCode, resp.Header)
		}
		resp, _ = w.send(t, ep.method, ep.path, "Origin", "https://evil.example", "Authorization", "Bearer "+tokA)
		if resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("%s %s from evil: granted", ep.method, ep.path)
		}
		// Without a token, or with a refused one: the 401 is readable by an
		// origin some tenant lists (to refresh the token), by no other.
		for _, authz := range []string{"", "Bearer not-a-jwt"} {
			hs := []string{"Origin", appOrigin}
			if authz != "" {
				hs = append(hs, "Authorization", authz)
			}
			resp, _ = w.send(t, ep.method, ep.path, hs...)
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Access-Control-Allow-Origin") != appOrigin {
				t.Fatalf("%s %s with %q from %s: %d %v", ep.method, ep.path, authz, appOrigin, resp.StatusCode, resp.Header)
			}
			resp, _ = w.send(t, ep.method, ep.path, "Origin", "https://evil.example")
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Access-Control-Allow-Origin") != "" {
				t.Fatalf("%s %s without a token from evil: %d %v", ep.method, ep.path, resp.StatusCode, resp.Header)
			}
		}
	}

	// Producers', directory, settings, admin and health endpoints never
	// answer CORS, whatever the origin and credential.
	for _, ep := range []struct{ method, path, key string }{
		{"POST", "/v1/events", w.keys["a"]},
		{"GET", "/v1/events/e1", w.keys["a"]},
		{"GET", "/v1/apikeys", w.keys["a"]},
		{"GET", "/v1/settings/cors", w.keys["a"]},
		{"GET", "/v1/recipients", w.keys["a"]},
		{"GET", "/v1/groups", w.keys["a"]},
		{"GET", "/v1/actions", w.keys["a"]},
		{"GET", "/v1/admin/tenants", w.admin},
		{"GET", "/healthz", ""},
		{"GET", "/v1/inboxes", "Bearer " + tokA},
	} {
		resp, _ := w.send(t, "OPTIONS", ep.path, "Origin", appOrigin, "Access-Control-Request-Method", ep.method)
		if resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.StatusCode == http.StatusNoContent {
			t.Fatalf("preflight %s %s: %d %v", ep.method, ep.path, resp.StatusCode, resp.Header)
		}
		resp, _ = w.send(t, ep.method, ep.path, "Origin", appOrigin, "Authorization", "Bearer "+strings.TrimPrefix(ep.key, "Bearer "))
		if resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("%s %s: granted %v", ep.method, ep.path, resp.Header)
		}
	}

	// A path that is not clean is redirected by the router, granted
	// nothing on the way.
	for _, head := range []string{"OPTIONS /v1/inbox/../events/e1 HTTP/1.1\r\nAccess-Control-Request-Method: GET", "GET /v1/inbox/../events/e1 HTTP/1.1",
		"GET /v1/inbox//x HTTP/1.1", "GET /v1/inbox%2F..%2Fevents HTTP/1.1"} {
		resp := w.raw(t, head+"\r\nAuthorization: Bearer "+w.keys["a"]+"\r\nOrigin: "+appOrigin)
		if resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("%q: %d granted", head, resp.StatusCode)
		}
	}

	// Origin headers no browser sends are granted nothing: the preflight
	// is a 403 (or net/http's 400), the actual request is served without
	// a grant.
	hostile := []string{
		"Origin: null",
		"Origin: HTTPS://APP.EXAMPLE.COM",
		"Origin: https://app.example.com/",
		"Origin: https://app.example.com:443",
		"Origin: https://user@app.example.com",
		"Origin: https://app.example.com\x00",
		"Origin: https://app.example.com\xff",
		"Origin: \xff\xfe",
		"Origin: https://" + strings.Repeat("a", 6000) + ".example.com",
		"Origin: https://app.example.com\r\nOrigin: https://app.example.com",
		"Origin: https://app.example.com\r\nOrigin: https://evil.example",
		"Origin: https://app.example.com, https://evil.example",
		"Origin: https://*.example.com",
	}
	for _, h := range hostile {
		resp := w.raw(t, "OPTIONS /v1/inbox HTTP/1.1\r\nAccess-Control-Request-Method: GET\r\n"+h)
		if resp.Header.Get("Access-Control-Allow-Origin") != "" || (resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusBadRequest) {
			t.Fatalf("preflight with %q: %d %v", h, resp.StatusCode, resp.Header)
		}
		resp = w.raw(t, "GET /v1/inbox HTTP/1.1\r\nAuthorization: Bearer "+tokA+"\r\n"+h)
		if resp.Header.Get("Access-Control-Allow-Origin") != "" || (resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusBadRequest) {
			t.Fatalf("GET /v1/inbox with %q: %d %v", h, resp.StatusCode, resp.Header)
		}
	}

	// A removed origin stops being granted within the cache's life.
	if r := w.do(t, "PUT", "/v1/settings/cors", w.keys["a"], `{"origins": []}`); r.code != http.StatusOK || string(r.body) != "{\"origins\":[]}\n" {
		t.Fatalf("PUT an empty list: %d %s", r.code, r.body)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		resp, _ := w.send(t, "GET", "/v1/inbox", "Origin", appOrigin, "Authorization", "Bearer "+tokA)
		return resp.StatusCode == http.StatusOK && resp.Header.Get("Access-Control-Allow-Origin") == ""
	}, "a's origin is still granted after a removed it")
}

// TestCORSSettingsRefuseWhatIsNotAnOrigin: PUT /v1/settings/cors names the
// entry at fault, takes at most 50, needs a tenant-wide key, and keeps
// each tenant's list its own.
func TestCORSSettingsRefuseWhatIsNotAnOrigin(t *testing.T) {
	w := newCORSWorld(t)
	many := make([]string, 51)
	for i := range many {
		many[i] = fmt.Sprintf(`{"origin": "https://a%d.example.com"}`, i)
	}
	for body, want := range map[string]string{
		`{"origins": [{"origin": "https://app.example.com/inbox"}]}`:                          `"field":"origins[0].origin"`,
		`{"origins": [{"origin": "https://ok.example"}, {"origin": "null"}]}`:                 `"field":"origins[1].origin"`,
		`{"origins": [{"origin": "https://*.example.com"}]}`:                                  "wildcard",
		`{"origins": [{"origin": "http://app.example.com"}]}`:                                 "localhost only",
		`{"origins": [{"origin": "https://a.example\u0000"}]}`:                                "NUL",
		`{"origins": [{"origin": "https://A.example"}, {"origin": "https://a.example:443"}]}`: "list an origin once",
		`{"origins": [{"frame": true}]}`:                                                      `"field":"origins[0].origin"`,
		`{"origins": [{"origin": 7}]}`:                                                        "origin",
		`{"origins": [{"origin": "https://a.example", "extra": 1}]}`:                          "unknown field",
		`{}`:                `"field":"origins"`,
		`{"origins": null}`: `"field":"origins"`,
		`{"origins": [` + strings.Join(many, ",") + `]}`:                                "at most 50",
		`{"origins": [{"origin": "https://` + strings.Repeat("a", 400) + `.example"}]}`: "more than 300",
		`{"origins": [{"origin": "https://x.example"}]}{}`:                              "more than one JSON value",
		`{"origins": ` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`:      "deep",
	} {
		r := w.do(t, "PUT", "/v1/settings/cors", w.keys["a"], body)
		if r.code != http.StatusBadRequest || !strings.Contains(string(r.body), want) {
			t.Errorf("PUT %.80s: %d %s; want 400 saying %s", body, r.code, r.body, want)
		}
	}
	r := w.do(t, "GET", "/v1/settings/cors", w.keys["b"], "")
	if r.code != http.StatusOK || !strings.Contains(string(r.body), bOrigin) || strings.Contains(string(r.body), appOrigin) {
		t.Fatalf("b's list: %d %s", r.code, r.body)
	}
	ctx := context.Background()
	if err := store.EnsureProject(ctx, w.db.Pool, "a", "p1", ""); err != nil {
		t.Fatal(err)
	}
	k, err := store.CreateProjectAPIKey(ctx, w.db.Pool, "a", "p1", "scoped", "")
	if err != nil {
		t.Fatal(err)
	}
	if r := w.do(t, "PUT", "/v1/settings/cors", k, `{"origins": []}`); r.code != http.StatusForbidden {
		t.Fatalf("a project key: %d %s", r.code, r.body)
	}
	if r := w.do(t, "GET", "/v1/settings/cors", "", ""); r.code != http.StatusUnauthorized {
		t.Fatalf("no key: %d %s", r.code, r.body)
	}
}

// TestLiveSessionOriginIsTheTicketsTenants: a WebSocket from an origin the
// ticket's tenant allows opens; one from another tenant's origin, an
// unknown origin, or with two Origin headers is refused before the
// handshake.
func TestLiveSessionOriginIsTheTicketsTenants(t *testing.T) {
	w := newCORSWorld(t)
	tokA := w.token(t, "a")
	ticket := func() string {
		r := w.do(t, "POST", "/v1/live/tickets", tokA, "")
		var tk struct {
			URL string `json:"url"`
		}
		if err := json.Unmarshal(r.body, &tk); r.code != http.StatusCreated || err != nil {
			t.Fatalf("ticket: %d %s", r.code, r.body)
		}
		return "ws" + strings.TrimPrefix(w.url, "http") + tk.URL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, ticket(), &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {appOrigin}}})
	if err != nil {
		t.Fatalf("a's origin: %v", err)
	}
	_, frame, err := conn.Read(ctx)
	if err != nil || !strings.Contains(string(frame), `"type":"ready"`) {
		t.Fatalf("a's origin: first frame %s, %v", frame, err)
	}
	_ = conn.Close(websocket.StatusNormalClosure, "")
	for _, origin := range [][]string{{bOrigin}, {"https://evil.example"}, {"null"}, {"HTTPS://APP.EXAMPLE.COM"}, {appOrigin, appOrigin}} {
		_, resp, err := websocket.Dial(ctx, ticket(), &websocket.DialOptions{HTTPHeader: http.Header{"Origin": origin}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("origin %q: %v %v", origin, err, resp)
		}
	}
}

// TestInboxPageFrameAncestorsPerTenant: /inbox?tenant=T may be framed by
// exactly T's frame origins, the rest of its policy unchanged; any other
// form of the page is framed by none.
func TestInboxPageFrameAncestorsPerTenant(t *testing.T) {
	w := newCORSWorld(t)
	base, _ := w.send(t, "GET", "/inbox")
	baseCSP := base.Header.Get("Content-Security-Policy")
	if !strings.HasSuffix(baseCSP, "frame-ancestors 'none'") || base.Header.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("/inbox: %v", base.Header)
	}
	resp, _ := w.send(t, "GET", "/inbox?tenant=a")
	csp := resp.Header.Get("Content-Security-Policy")
	if resp.StatusCode != http.StatusOK || csp != strings.TrimSuffix(baseCSP, "'none'")+appOrigin || resp.Header.Get("X-Frame-Options") != "" {
		t.Fatalf("/inbox?tenant=a: %d CSP %q XFO %q", resp.StatusCode, csp, resp.Header.Get("X-Frame-Options"))
	}
	for _, q := range []string{"?tenant=b", "?tenant=nosuch", "?tenant=a&tenant=a", "?tenant=%zz", "?tenant=a%00", "?tenant=" + strings.Repeat("a", 500), "?tenant=a;b"} {
		resp, _ := w.send(t, "GET", "/inbox"+q)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Security-Policy") != baseCSP || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Fatalf("/inbox%s: %d CSP %q XFO %q", q, resp.StatusCode, resp.Header.Get("Content-Security-Policy"), resp.Header.Get("X-Frame-Options"))
		}
	}
	resp, _ = w.send(t, "GET", "/inbox/app.js?tenant=a")
	if !strings.HasSuffix(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Fatalf("/inbox/app.js?tenant=a: %v", resp.Header)
	}
}
