package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk/producer"
)

// appendConfig adds text to the daemon's config file.
func (e *env) appendConfig(text string) {
	e.t.Helper()
	f, err := os.OpenFile(e.cfgPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.WriteString(f, text); err != nil {
		e.t.Fatal(err)
	}
}

// tokenKey adds an HS256 token key for tenant.
func (e *env) tokenKey(tenant string) store.TokenKey {
	e.t.Helper()
	secret, _ := auth.NewSecret()
	key := store.TokenKey{TenantID: tenant, Kid: "k-" + tenant, Alg: "HS256", Issuer: "https://" + tenant + ".example", Key: secret}
	if err := store.AddTokenKey(context.Background(), e.db.Pool, key); err != nil {
		e.t.Fatal(err)
	}
	return key
}

// fromAddr is an HTTP client whose connections come from the loopback
// address src (127.0.0.x: a distinct client address on Linux).
func fromAddr(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 10 * time.Second}
}

// tryLive asks for a ticket for user (from the default client) and opens
// the WebSocket from client: the open connection, or nil and the refusal's
// status and problem.
func (e *env) tryLive(t *testing.T, key store.TokenKey, user string, client *http.Client) (*websocket.Conn, int, producer.Problem) {
	t.Helper()
	req, _ := http.NewRequest("POST", e.apiURL+"/v1/live/tickets", nil)
	req.Header.Set("Authorization", "Bearer "+e.userToken(t, key, user))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tk struct{ URL string }
	_ = json.NewDecoder(resp.Body).Decode(&tk)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("ticket for %s: %s", user, resp.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, wsResp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.apiURL, "http")+tk.URL, &websocket.DialOptions{HTTPClient: client})
	if err != nil {
		var p producer.Problem
		if wsResp == nil {
			t.Fatalf("live %s: %v", user, err)
		}
		if wsResp.Body != nil {
			_ = json.NewDecoder(wsResp.Body).Decode(&p)
			wsResp.Body.Close()
		}
		return nil, wsResp.StatusCode, p
	}
	if _, msg, err := conn.Read(ctx); err != nil || !strings.Contains(string(msg), `"ready"`) {
		t.Fatalf("ready: %s %v", msg, err)
	}
	// Keep reading (pings, frames) until the test closes it.
	go func() {
		for {
			if _, _, err := conn.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { _ = conn.CloseNow() })
	return conn, 0, producer.Problem{}
}

// status is GET path's status code from client.
func (e *env) status(t *testing.T, client *http.Client, path, token string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", e.apiURL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// metric is the value of the admin /metrics line starting with name (-1:
// none).
func (e *env) metric(t *testing.T, name string) float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", e.admin+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+e.adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			var v float64
			_, _ = fmt.Sscan(rest, &v)
			return v
		}
	}
	return -1
}

// TestLiveTenantCapKeepsOtherTenantsServed: tenant acme (its own cap: 8
// sessions) opens sessions up to and past its cap, each for another user
// id (as a tenant minting tokens would): the ninth and later are refused
// with 429 "too many sessions" before the handshake, while tenant globex's
// live sessions, POST /v1/events, /v1/inbox and /healthz keep working.
// Then globex fills the daemon's own cap (three quarters of http.max_conns
// = 30): the next session is refused, and the reserve still serves both
// tenants' API calls and the health checks. The counts are metrics.
func TestLiveTenantCapKeepsOtherTenantsServed(t *testing.T) {
	e := newEnv(t, "sent")
	ctx := context.Background()
	const other = "globex"
	if err := store.EnsureTenant(ctx, e.db.Pool, other, "Globex"); err != nil {
		t.Fatal(err)
	}
	otherAPIKey, err := store.CreateAPIKey(ctx, e.db.Pool, other, "test", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.ImportDirectory(ctx, e.db.Pool, other, &staff); err != nil {
		t.Fatal(err)
	}
	keyA, keyB := e.tokenKey(e.tenant), e.tokenKey(other)
	e.appendConfig(`
live {
  max_sessions_per_ip = 0
  tenant "acme" {
    max_sessions = 8
  }
}
`)
	e.daemonEnv = append(e.daemonEnv, "HERALD_HTTP_MAX_CONNS=40", "HERALD_HTTP_MAX_CONNS_PER_IP=0")
	e.start()
	producerB := &producer.Client{BaseURL: e.apiURL, APIKey: otherAPIKey}
	// B serves: a live session, an event, its inbox, the health checks.
	bServed := func(step string) {
		t.Helper()
		if _, _, err := producerB.Emit(ctx, reservation(testenv.RandomName("b-"))); err != nil {
			t.Fatalf("%s: globex POST /v1/events: %v", step, err)
		}
		if code := e.status(t, http.DefaultClient, "/v1/inbox", e.userToken(t, keyB, "staff1")); code != http.StatusOK {
			t.Fatalf("%s: globex /v1/inbox: %d", step, code)
		}
		for _, p := range []string{"/healthz", "/readyz"} {
			if code := e.status(t, http.DefaultClient, p, ""); code != http.StatusOK {
				t.Fatalf("%s: %s: %d", step, p, code)
			}
		}
	}
	var sessionsA []*websocket.Conn
	for i := range 8 {
		c, code, p := e.tryLive(t, keyA, fmt.Sprintf("a-user-%d", i), http.DefaultClient)
		if c == nil {
			t.Fatalf("acme session %d refused: %d %+v", i, code, p)
		}
		sessionsA = append(sessionsA, c)
	}
	for i := 8; i < 13; i++ {
		c, code, p := e.tryLive(t, keyA, fmt.Sprintf("a-user-%d", i), http.DefaultClient)
		if c != nil || code != http.StatusTooManyRequests || p.Title != "too many sessions" || !strings.Contains(p.Detail, "at most 8 open sessions for this tenant") {
			t.Fatalf("acme session %d past its cap: %v %d %+v, want 429 too many sessions", i, c != nil, code, p)
		}
	}
	for i := range 3 {
		if c, code, p := e.tryLive(t, keyB, fmt.Sprintf("b-user-%d", i), http.DefaultClient); c == nil {
			t.Fatalf("globex session %d refused while acme is at its cap: %d %+v", i, code, p)
		}
	}
	bServed("acme at its cap")
	if v := e.metric(t, `herald_live_sessions{tenant="acme"}`); v != 8 {
		t.Errorf("herald_live_sessions{tenant=acme} = %g, want 8", v)
	}
	if v := e.metric(t, `herald_live_sessions_refused_total{reason="tenant"}`); v != 5 {
		t.Errorf("refused (tenant) = %g, want 5", v)
	}
	// A closed session frees its slot.
	_ = sessionsA[0].Close(websocket.StatusNormalClosure, "")
	testenv.Eventually(t, 10*time.Second, func() bool {
		return e.metric(t, `herald_live_sessions{tenant="acme"}`) == 7
	}, "acme's closed session uncounted")
	if c, code, p := e.tryLive(t, keyA, "a-user-again", http.DefaultClient); c == nil {
		t.Fatalf("acme under its cap again: %d %+v", code, p)
	}
	// globex fills the daemon: 30 sessions in all (acme's 8 + 22).
	for i := 3; i < 22; i++ {
		if c, code, p := e.tryLive(t, keyB, fmt.Sprintf("b-user-%d", i), http.DefaultClient); c == nil {
			t.Fatalf("globex session %d refused under the daemon's cap: %d %+v", i, code, p)
		}
	}
	if c, code, p := e.tryLive(t, keyB, "b-user-over", http.DefaultClient); c != nil || code != http.StatusTooManyRequests ||
		!strings.Contains(p.Detail, "as many sessions as it may") {
		t.Fatalf("session past the daemon's cap: %v %d %+v", c != nil, code, p)
	}
	if v := e.metric(t, `herald_live_sessions_refused_total{reason="daemon"}`); v != 1 {
		t.Errorf("refused (daemon) = %g, want 1", v)
	}
	// The reserve: 10 of the 40 connections serve everyone else.
	bServed("daemon at its session cap")
	if _, _, err := e.client().Emit(ctx, reservation("a-at-cap")); err != nil {
		t.Fatalf("acme POST /v1/events at the cap: %v", err)
	}
	if code := e.status(t, fromAddr("127.0.0.2"), "/healthz", ""); code != http.StatusOK {
		t.Fatalf("/healthz from another address: %d", code)
	}
}

// TestLivePerAddressAndConnectionCaps: one client address holds at most
// live.max_sessions_per_ip sessions (the next is refused 429 while another
// address opens its own), and at most http.max_conns_per_ip connections:
// past it an idle keep-alive flood from one address is answered 429 with
// Connection: close, and other addresses' /healthz and POST /v1/events are
// served.
func TestLivePerAddressAndConnectionCaps(t *testing.T) {
	e := newEnv(t, "sent")
	key := e.tokenKey(e.tenant)
	e.appendConfig(`
live { max_sessions_per_ip = 5 }
`)
	e.daemonEnv = append(e.daemonEnv, "HERALD_HTTP_MAX_CONNS=200", "HERALD_HTTP_MAX_CONNS_PER_IP=20")
	e.start()
	from2 := fromAddr("127.0.0.2")
	for i := range 5 {
		if c, code, p := e.tryLive(t, key, fmt.Sprintf("u%d", i), from2); c == nil {
			t.Fatalf("session %d from 127.0.0.2: %d %+v", i, code, p)
		}
	}
	c, code, p := e.tryLive(t, key, "u5", from2)
	if c != nil || code != http.StatusTooManyRequests || !strings.Contains(p.Detail, "at most 5 open sessions from one client address") {
		t.Fatalf("sixth session from 127.0.0.2: %v %d %+v", c != nil, code, p)
	}
	if c, code, p := e.tryLive(t, key, "u5", fromAddr("127.0.0.3")); c == nil {
		t.Fatalf("session from 127.0.0.3: %d %+v", code, p)
	}
	if v := e.metric(t, `herald_live_sessions_refused_total{reason="address"}`); v != 1 {
		t.Errorf("refused (address) = %g, want 1", v)
	}

	// 30 idle keep-alive connections from 127.0.0.4, one request each.
	addr := strings.TrimPrefix(e.apiURL, "http://")
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.4")}, Timeout: 5 * time.Second}
	ok, refused := 0, 0
	for i := range 30 {
		nc, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nc.Close() })
		_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(nc, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			refused++
			if !resp.Close {
				t.Errorf("connection %d: 429 without Connection: close", i)
			}
		default:
			t.Fatalf("connection %d: %s", i, resp.Status)
		}
	}
	if ok != 20 || refused != 10 {
		t.Fatalf("from one address: %d served, %d refused; want 20 and 10", ok, refused)
	}
	if v := e.metric(t, `herald_http_connections_refused_total{reason="address"}`); v != 10 {
		t.Errorf("connections refused (address) = %g, want 10", v)
	}
	if code := e.status(t, fromAddr("127.0.0.5"), "/healthz", ""); code != http.StatusOK {
		t.Fatalf("/healthz from another address: %d", code)
	}
	if _, _, err := e.client().Emit(context.Background(), reservation("during-flood")); err != nil {
		t.Fatalf("POST /v1/events during the flood: %v", err)
	}
}
