package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/api/openapitest"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/httpguard"
	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/sdk/producer"
)

// The tests in this file run the daemon's own HTTP servers (NewAPIServer,
// NewAdminServer, as Run builds them) over real loopback connections.
// Nothing waits for a fixed time to pass: a wait has a generous deadline
// and ends as soon as its condition holds, except for the one check that
// a connection over the cap is not served, which can only be shown by
// waiting.

// waitLimit bounds every wait for the server to act.
const waitLimit = 15 * time.Second

// httpConfig is the default HTTP config on ephemeral loopback ports with
// no rate limits.
func httpConfig() httpguard.Config {
	c := config.DefaultDaemon().HTTP
	c.Listen, c.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	c.RateLimit = httpguard.RateLimits{}
	return c
}

// serveAPI starts the public API (w's database) with c and returns its
// address.
func serveAPI(t *testing.T, w *world, c httpguard.Config) string {
	t.Helper()
	d := config.DefaultDaemon()
	d.HTTP = c
	pub, err := server.PublicAPI(context.Background(), d, w.pools, nil, func() *rules.RuleSet { return nil }, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	srv, ln, err := server.NewAPIServer(pub.Handler, c, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	openapitest.Watch(t, "http://"+ln.Addr().String())
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitClosedByServer reads c until the server closes it (EOF or reset)
// and fails if that does not happen within waitLimit. It returns what was
// read.
func waitClosedByServer(t *testing.T, c net.Conn, what string) string {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(waitLimit)); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	var ne net.Error
	switch {
	case err == nil, errors.Is(err, syscall.ECONNRESET):
		return string(b)
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("%s: the server did not close the connection within %s (read %q)", what, waitLimit, b)
	default:
		t.Fatalf("%s: %v", what, err)
	}
	return ""
}

// getOn sends GET path on c (keep-alive) and reads the response.
func getOn(t *testing.T, c net.Conn, br *bufio.Reader, path string) *http.Response {
	t.Helper()
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, c.RemoteAddr()); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(waitLimit)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func assertSecurityHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	if got := h.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("%s: X-Content-Type-Options = %q, want nosniff", what, got)
	}
	if got := h.Get("Cache-Control"); got != "no-store" {
		t.Errorf("%s: Cache-Control = %q, want no-store", what, got)
	}
}

// TestAPIServerClosesSlowAndIdleConnections holds a request whose body
// dribbles in slower than http.read_timeout allows, a keep-alive
// connection left idle past http.idle_timeout and a connection that never
// sends a request, and sees the server close all three.
func TestAPIServerClosesSlowAndIdleConnections(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c := httpConfig()
	c.ReadHeaderTimeout, c.ReadTimeout, c.IdleTimeout = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
	addr := serveAPI(t, w, c)

	slow := dial(t, addr)
	fmt.Fprintf(slow, "POST /v1/events HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{",
		addr, w.keys["a"])
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		// One byte every 100ms: 4096 bytes would take seven minutes.
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := slow.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()

	idle := dial(t, addr)
	br := bufio.NewReader(idle)
	if resp := getOn(t, idle, br, "/healthz"); resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("GET /healthz: %s, close %t; want 200 on a kept-alive connection", resp.Status, resp.Close)
	}

	silent := dial(t, addr)

	got := waitClosedByServer(t, slow, "slow body")
	if got != "" && (!strings.HasPrefix(got, "HTTP/1.1 400 ") || !strings.Contains(got, "read timeout")) {
		t.Errorf("slow body answered %q, want 400 (or nothing)", firstLine(got))
	}
	if rest := waitClosedByServer(t, &bufferedConn{idle, br}, "idle keep-alive"); rest != "" {
		t.Errorf("idle connection got %q", rest)
	}
	if rest := waitClosedByServer(t, silent, "silent connection"); rest != "" && !strings.HasPrefix(rest, "HTTP/1.1 408") {
		t.Errorf("silent connection got %q", firstLine(rest))
	}
}

// TestAPIServerRejectsLargeHeaders sends a header past
// http.max_header_bytes (plus the 4 KiB net/http reads beyond it).
func TestAPIServerRejectsLargeHeaders(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c := httpConfig()
	c.MaxHeaderBytes = 1024
	addr := serveAPI(t, w, c)
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Padding", strings.Repeat("x", 1024+4096+1))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("oversized header: %s, want 431", resp.Status)
	}
	req.Header.Set("X-Padding", strings.Repeat("x", 512))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("header within the limit: %s, want 200", resp.Status)
	}
}

// TestAPIServerConnectionCap fills http.max_conns with kept-alive
// connections; the next connection is not served until one of them closes.
func TestAPIServerConnectionCap(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c := httpConfig()
	c.MaxConns = 2
	addr := serveAPI(t, w, c)

	held := make([]net.Conn, 2)
	for i := range held {
		held[i] = dial(t, addr)
		if resp := getOn(t, held[i], bufio.NewReader(held[i]), "/healthz"); resp.StatusCode != http.StatusOK {
			t.Fatalf("held connection %d: %s", i, resp.Status)
		}
	}
	extra := dial(t, addr)
	br := bufio.NewReader(extra)
	fmt.Fprintf(extra, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	// The one wait that must run out: over the cap, nothing is served.
	if err := extra.SetReadDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var ne net.Error
	if _, err := br.Peek(1); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("connection over the cap of 2 was answered (%v)", err)
	}
	held[0].Close()
	if err := extra.SetReadDeadline(time.Now().Add(waitLimit)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("connection over the cap, after one closed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("connection over the cap, after one closed: %s", resp.Status)
	}
}

// call sends one request to the API at addr with the API key (none when
// empty) and returns the response with its body read.
func call(t *testing.T, method, addr, path, key, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// assertTooMany checks a 429: Retry-After in whole seconds, a problem
// document, the security headers.
func assertTooMany(t *testing.T, what string, resp *http.Response, body []byte, detail string) {
	t.Helper()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("%s: %s %s, want 429", what, resp.Status, body)
	}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || secs < 1 {
		t.Errorf("%s: Retry-After = %q, want whole seconds ≥ 1", what, resp.Header.Get("Retry-After"))
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type = %q", what, ct)
	}
	var p producer.Problem
	if err := json.Unmarshal(body, &p); err != nil || p.Status != 429 || p.Title != "too many requests" || !strings.Contains(p.Detail, detail) {
		t.Errorf("%s: problem %+v (%v), want status 429 naming %q", what, p, err, detail)
	}
	assertSecurityHeaders(t, what, resp.Header)
}

// TestAPIRateLimitPerKey spends one key's burst: its next request is 429,
// while another tenant's key is still served.
func TestAPIRateLimitPerKey(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c := httpConfig()
	// One request in 1000 s: no token comes back during the test.
	c.RateLimit = httpguard.RateLimits{PerKey: 0.001, Burst: 2}
	addr := serveAPI(t, w, c)
	for i := range 2 {
		if resp, body := call(t, http.MethodGet, addr, "/v1/events/nope", w.keys["a"], ""); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("request %d of the burst: %s %s", i+1, resp.Status, body)
		}
	}
	resp, body := call(t, http.MethodGet, addr, "/v1/events/nope", w.keys["a"], "")
	assertTooMany(t, "key a over its rate", resp, body, "with this API key")
	if resp, body := call(t, http.MethodGet, addr, "/v1/events/nope", w.keys["b"], ""); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("key b after key a's burst: %s %s, want 404 (its own bucket)", resp.Status, body)
	}
	// Unauthenticated requests are not counted against a key.
	if resp, _ := call(t, http.MethodGet, addr, "/v1/events/nope", "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no key: %s, want 401", resp.Status)
	}
}

// TestAPIRateLimitPerIP counts requests before authentication: after two
// unauthenticated requests even a valid key from the same address is 429.
func TestAPIRateLimitPerIP(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c := httpConfig()
	c.RateLimit = httpguard.RateLimits{PerIP: 0.001, Burst: 2}
	addr := serveAPI(t, w, c)
	for i := range 2 {
		if resp, _ := call(t, http.MethodGet, addr, "/v1/events/nope", "", ""); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("request %d: %s, want 401", i+1, resp.Status)
		}
	}
	resp, body := call(t, http.MethodGet, addr, "/v1/events/nope", w.keys["a"], "")
	assertTooMany(t, "address over its rate", resp, body, "from this client address")
	resp, body = call(t, http.MethodGet, addr, "/healthz", "", "")
	assertTooMany(t, "health check over the address's rate", resp, body, "from this client address")
}

// TestAPISecurityHeaders checks nosniff and no-store on successes and
// errors of the public API, the superadmin API under it included.
func TestAPISecurityHeaders(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	addr := serveAPI(t, w, httpConfig())
	// In order: the event is created before it is read.
	tests := []struct {
		name                    string
		method, path, key, body string
		want                    int
	}{
		{"event created", http.MethodPost, "/v1/events", "a", `{"event_id":"e1","type":"T","payload":{}}`, http.StatusCreated},
		{"event read", http.MethodGet, "/v1/events/e1", "a", "", http.StatusOK},
		{"health", http.MethodGet, "/healthz", "", "", http.StatusOK},
		{"ready", http.MethodGet, "/readyz", "", "", http.StatusOK},
		{"unknown route", http.MethodGet, "/nope", "", "", http.StatusNotFound},
		{"no key", http.MethodGet, "/v1/events/e1", "", "", http.StatusUnauthorized},
		{"another tenant's event", http.MethodGet, "/v1/events/e1", "b", "", http.StatusNotFound},
		{"malformed body", http.MethodPost, "/v1/events", "b", `{`, http.StatusBadRequest},
		{"superadmin", http.MethodGet, "/v1/admin/stats", "admin", "", http.StatusOK},
		{"superadmin, no key", http.MethodGet, "/v1/admin/stats", "", "", http.StatusUnauthorized},
	}
	for _, tc := range tests {
		key := w.keys[tc.key]
		if tc.key == "admin" {
			key = w.admin
		}
		resp, body := call(t, tc.method, addr, tc.path, key, tc.body)
		name := tc.name
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %s %s, want %d", name, resp.Status, body, tc.want)
		}
		assertSecurityHeaders(t, name, resp.Header)
	}
}

// adminEnv is a running admin server on loopback.
type adminEnv struct {
	addr    string
	reloads atomic.Int32
}

// serveAdmin starts the admin API (no plugins, pprof on) with token (nil:
// none) and returns it.
func serveAdmin(t *testing.T, token []byte) *adminEnv {
	t.Helper()
	host, err := pluginhost.New(pluginhost.Config{Dir: t.TempDir(), WatchInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Close() })
	e := &adminEnv{}
	h := server.AdminHandler(host, func() error { e.reloads.Add(1); return nil }, true)
	srv, ln, err := server.NewAdminServer(h, httpConfig(), token, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	e.addr = ln.Addr().String()
	openapitest.Watch(t, "http://"+e.addr)
	return e
}

// adminReq is one admin API request.
type adminReq struct {
	method, path string
	token        string            // Authorization: Bearer token, when set
	host         string            // the Host header (default: the listener's address)
	header       map[string]string // more headers
}

func (e *adminEnv) do(t *testing.T, r adminReq) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(r.method, "http://"+e.addr+r.path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.host != "" {
		req.Host = r.host
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

const adminToken = "admin-token-0123456789abcdef"

// TestAdminServerGuard checks the admin listener with a token: without it
// or with a wrong one 401, with it 200; a foreign Host 421 and a browser
// page's Origin 403 even with the token; pprof and the rules reload behind
// the same token; the security headers on every answer.
func TestAdminServerGuard(t *testing.T) {
	t.Parallel()
	e := serveAdmin(t, []byte(adminToken))
	_, port, _ := net.SplitHostPort(e.addr)
	tests := map[string]struct {
		req  adminReq
		want int
	}{
		"no token":            {adminReq{method: "GET", path: pluginhost.AdminPluginsPath}, http.StatusUnauthorized},
		"wrong token":         {adminReq{method: "GET", path: pluginhost.AdminPluginsPath, token: adminToken + "x"}, http.StatusUnauthorized},
		"token prefix":        {adminReq{method: "GET", path: pluginhost.AdminPluginsPath, token: adminToken[:20]}, http.StatusUnauthorized},
		"basic auth":          {adminReq{method: "GET", path: pluginhost.AdminPluginsPath, header: map[string]string{"Authorization": "Basic " + adminToken}}, http.StatusUnauthorized},
		"right token":         {adminReq{method: "GET", path: pluginhost.AdminPluginsPath, token: adminToken}, http.StatusOK},
		"localhost":           {adminReq{method: "GET", path: pluginhost.AdminPluginsPath, token: adminToken, host: "localhost:" + port}, http.StatusOK},
		"foreign host":        {adminReq{method: "GET", path: pluginhost.AdminPluginsPath, token: adminToken, host: "rebind.example:" + port}, http.StatusMisdirectedRequest},
		"other port":          {adminReq{method: "GET", path: pluginhost.AdminPluginsPath, token: adminToken, host: "127.0.0.1:1"}, http.StatusMisdirectedRequest},
		"origin":              {adminReq{method: "GET", path: pluginhost.AdminPluginsPath, token: adminToken, header: map[string]string{"Origin": "http://127.0.0.1:" + port}}, http.StatusForbidden},
		"cross-site fetch":    {adminReq{method: "GET", path: pluginhost.AdminPluginsPath, token: adminToken, header: map[string]string{"Sec-Fetch-Site": "cross-site"}}, http.StatusForbidden},
		"pprof, no token":     {adminReq{method: "GET", path: "/debug/pprof/cmdline"}, http.StatusUnauthorized},
		"pprof, token":        {adminReq{method: "GET", path: "/debug/pprof/cmdline", token: adminToken}, http.StatusOK},
		"pprof index, origin": {adminReq{method: "GET", path: "/debug/pprof/", token: adminToken, header: map[string]string{"Origin": "null"}}, http.StatusForbidden},
		"reload, no token":    {adminReq{method: "POST", path: "/admin/v1/rules/reload"}, http.StatusUnauthorized},
		"unknown plugin":      {adminReq{method: "POST", path: "/admin/v1/plugins/nope/reload", token: adminToken}, http.StatusNotFound},
	}
	for name, tc := range tests {
		resp, body := e.do(t, tc.req)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %s %s, want %d", name, resp.Status, body, tc.want)
		}
		assertSecurityHeaders(t, name, resp.Header)
		if tc.want == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", name)
		}
		if tc.want != http.StatusOK && (resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, `"detail"`)) {
			t.Errorf("%s: body %q (%s) is not a problem document", name, body, resp.Header.Get("Content-Type"))
		}
	}
	if n := e.reloads.Load(); n != 0 {
		t.Fatalf("rules reloaded %d times by refused requests", n)
	}
	if resp, body := e.do(t, adminReq{method: "POST", path: "/admin/v1/rules/reload", token: adminToken}); resp.StatusCode != http.StatusOK || e.reloads.Load() != 1 {
		t.Fatalf("reload with the token: %s %s, %d reloads", resp.Status, body, e.reloads.Load())
	}
}

// TestAdminServerWithoutToken is the quick start's loopback listener with
// no token file: requests need no token, but the Host and Origin checks
// still hold.
func TestAdminServerWithoutToken(t *testing.T) {
	t.Parallel()
	e := serveAdmin(t, nil)
	if resp, body := e.do(t, adminReq{method: "GET", path: pluginhost.AdminPluginsPath}); resp.StatusCode != http.StatusOK {
		t.Fatalf("no token configured: %s %s", resp.Status, body)
	}
	if resp, _ := e.do(t, adminReq{method: "POST", path: "/admin/v1/rules/reload", host: "rebind.example"}); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("foreign Host: %s, want 421", resp.Status)
	}
	if resp, _ := e.do(t, adminReq{method: "POST", path: "/admin/v1/rules/reload", header: map[string]string{"Origin": "https://evil.example"}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("Origin: %s, want 403", resp.Status)
	}
	if n := e.reloads.Load(); n != 0 {
		t.Fatalf("refused requests reloaded the rules %d times", n)
	}
}

// TestRunRefusesUnsafeAdminAPI starts server.Run with an admin listener
// off loopback and no token file, then with a token file others can read:
// both are refused before anything is opened, naming the keys.
func TestRunRefusesUnsafeAdminAPI(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tokenFile, []byte(adminToken), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tokenFile, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		listen, tokenFile string
		want              []string
	}{
		"every interface, no token": {"0.0.0.0:0", "", []string{"http.admin_listen", "http.admin_token_file", "not a loopback address"}},
		"LAN address, no token":     {"192.0.2.1:8081", "", []string{"http.admin_listen", "http.admin_token_file"}},
		"token readable by others":  {"127.0.0.1:0", tokenFile, []string{"http.admin_token_file", "chmod 600"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := config.DefaultDaemon()
			d.Rules = []string{filepath.Join(t.TempDir(), "rules.hcl")}
			d.Database.URL = "postgres://nobody@127.0.0.1:1/none" // never reached
			d.HTTP.AdminListen, d.HTTP.AdminTokenFile = tc.listen, tc.tokenFile
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			err := server.Run(ctx, d, hclog.NewNullLogger(), nil)
			if err == nil {
				t.Fatal("Run started")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// bufferedConn reads through br (which may hold bytes already read from
// the connection).
type bufferedConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.br.Read(p) }

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\r\n")
	return line
}
