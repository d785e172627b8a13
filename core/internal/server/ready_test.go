package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/api/openapitest"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// getReady GETs url (with the admin token when not empty) and returns the
// status code and body.
func getReady(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
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
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestReadinessFollowsBroker runs the public API and the admin API (as Run
// wires them) over a broker reached through a proxy the test breaks:
// /readyz is 200 {"status":"ready"}, goes 503 {"status":"not ready"} with
// nothing else while the broker is unreachable and comes back when it
// returns; /admin/v1/ready gives the reason, behind the admin token.
func TestReadinessFollowsBroker(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	u, err := url.Parse(testenv.RabbitMQ(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr
	conn := broker.Dial(u.String(), broker.Topology{Exchange: "herald.test"}, hclog.NewNullLogger())
	t.Cleanup(conn.Close)

	d := config.DefaultDaemon()
	d.HTTP = httpConfig()
	pub, err := server.PublicAPI(context.Background(), d, w.pools, conn, func() *rules.RuleSet { return nil }, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	srv, ln, err := server.NewAPIServer(pub.Handler, d.HTTP, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	readyz := "http://" + ln.Addr().String() + "/readyz"
	openapitest.Watch(t, "http://"+ln.Addr().String())

	mux := http.NewServeMux()
	mux.Handle("GET "+server.AdminReadyPath, server.ReadyHandler(server.Readiness(w.pools, conn), nil))
	asrv, aln, err := server.NewAdminServer(mux, d.HTTP, []byte(adminToken), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = asrv.Serve(aln) }()
	t.Cleanup(func() { _ = asrv.Close() })
	adminReady := "http://" + aln.Addr().String() + server.AdminReadyPath
	openapitest.Watch(t, "http://"+aln.Addr().String())

	wantAdmin := func(code int, reasons ...string) func() bool {
		return func() bool {
			c, body := getReady(t, adminReady, adminToken)
			var st server.ReadyStatus
			if err := json.Unmarshal([]byte(body), &st); err != nil {
				t.Fatalf("admin ready body %q: %v", body, err)
			}
			return c == code && cmp.Equal(st.Reasons, append([]string{}, reasons...))
		}
	}
	wantPublic := func(code int, body string) func() bool {
		return func() bool {
			c, b := getReady(t, readyz, "")
			return c == code && b == body
		}
	}
	testenv.Eventually(t, 20*time.Second, wantPublic(200, `{"status":"ready"}`), "/readyz ready once the broker is connected")
	testenv.Eventually(t, 5*time.Second, wantAdmin(200), "/admin/v1/ready ready with no reasons")
	if c, _ := getReady(t, adminReady, ""); c != http.StatusUnauthorized {
		t.Errorf("/admin/v1/ready without the token: %d, want 401", c)
	}

	proxy.Break()
	testenv.Eventually(t, 20*time.Second, wantPublic(503, `{"status":"not ready"}`), "/readyz not ready, and nothing else, without the broker")
	testenv.Eventually(t, 5*time.Second, wantAdmin(503, "broker: unreachable"), "/admin/v1/ready says the broker is unreachable")

	proxy.Restore()
	testenv.Eventually(t, 30*time.Second, wantPublic(200, `{"status":"ready"}`), "/readyz ready again once the broker is back")
	testenv.Eventually(t, 5*time.Second, wantAdmin(200), "/admin/v1/ready ready again")
}

// TestReadyzHidesDatabaseError points the API at a database that does not
// answer: /readyz says 503 {"status":"not ready"} and nothing of the
// database's URL (role, database name, host), and the readiness reason is
// the bare "database: unreachable".
func TestReadyzHidesDatabaseError(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://secretrole:secretpw@127.0.0.1:1/secretdb?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	check := server.Readiness(&server.Pools{Worker: pool, API: pool, Admin: pool}, nil)
	if got := check(context.Background()); !cmp.Equal(got, []string{"database: unreachable"}) {
		t.Errorf("readiness = %q, want [database: unreachable]", got)
	}
	for name, ready := range map[string]func(context.Context) error{"default": nil, "daemon's": func(ctx context.Context) error {
		if rs := check(ctx); len(rs) > 0 {
			return &readyError{rs}
		}
		return nil
	}} {
		a := api.New(pool, func() *rules.RuleSet { return nil }, hclog.NewNullLogger())
		a.Ready = ready
		ts := httptest.NewServer(a.Handler())
		openapitest.Watch(t, ts.URL)
		code, body := getReady(t, ts.URL+"/readyz", "")
		ts.Close()
		if code != http.StatusServiceUnavailable || body != `{"status":"not ready"}` {
			t.Errorf("%s /readyz without a database = %d %s, want 503 {\"status\":\"not ready\"}", name, code, body)
		}
	}
	rec := httptest.NewRecorder()
	server.ReadyHandler(check, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, server.AdminReadyPath, nil))
	if body := rec.Body.String(); rec.Code != http.StatusServiceUnavailable || strings.Contains(body, "secret") || strings.Contains(body, "127.0.0.1") ||
		!strings.Contains(body, "database: unreachable") {
		t.Errorf("admin ready without a database = %d %s", rec.Code, body)
	}
}

type readyError struct{ reasons []string }

func (e *readyError) Error() string { return strings.Join(e.reasons, "; ") + " secretrole secretdb" }

// TestAdminReadyShowsStaleRules: a rejected rules reload keeps the daemon
// ready on the last good rules, and the admin readiness says the rules are
// stale and why; a good reload makes them current again.
func TestAdminReadyShowsStaleRules(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.hcl")
	good := "channel \"WEBSOCKET\" {\n  providers = [{ plugin = \"websocket\" }]\n}\nevent \"A\" {\n  audience {\n    user_type = \"ADMIN\"\n  }\n  mandatory = [\"WEBSOCKET\"]\n}\n"
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	watcher, err := rulesfile.NewWatcher([]string{path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := server.ReadyHandler(func(context.Context) []string { return []string{} }, watcher.Status)
	get := func() (int, server.ReadyStatus) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, server.AdminReadyPath, nil))
		var st server.ReadyStatus
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatalf("body %q: %v", rec.Body.String(), err)
		}
		return rec.Code, st
	}
	if code, st := get(); code != http.StatusOK || st.Rules == nil || st.Rules.State != "current" {
		t.Fatalf("fresh: %d %+v", code, st.Rules)
	}
	if err := os.WriteFile(path, []byte("# truncated by a bad deploy\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := watcher.Reload(); err == nil {
		t.Fatal("reload of an emptied file: no error")
	}
	code, st := get()
	if code != http.StatusOK || st.Status != "ready" || st.Rules == nil || st.Rules.State != "stale" || st.Rules.RejectedAt == nil ||
		len(st.Rules.Problems) != 1 || !strings.Contains(st.Rules.Problems[0], "empty rules file") {
		t.Errorf("after a rejected reload: %d %+v", code, st.Rules)
	}
	if got := watcher.Current().EventTypes(); !cmp.Equal(got, []string{"A"}) {
		t.Errorf("rules in force after a rejected reload: %v, want [A]", got)
	}
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := watcher.Reload(); err != nil {
		t.Fatal(err)
	}
	if code, st := get(); code != http.StatusOK || st.Rules.State != "current" || len(st.Rules.Problems) != 0 {
		t.Errorf("after a good reload: %d %+v", code, st.Rules)
	}
}

// TestProviderReadiness: a channel is ready while one of its providers
// serves; throttled still serves; a channel whose providers all restart,
// are refused, start, stop or have their breaker open is a reason naming
// each provider's state.
func TestProviderReadiness(t *testing.T) {
	t.Parallel()
	p := func(channel, provider string, st pluginhost.State) pluginhost.ProviderStatus {
		return pluginhost.ProviderStatus{Name: "sink", Channel: channel, Provider: provider, State: st}
	}
	tests := map[string]struct {
		status []pluginhost.ProviderStatus
		want   []string
	}{
		"no channels": {},
		"every channel served": {status: []pluginhost.ProviderStatus{
			p("EMAIL", "primary", pluginhost.StateServing), p("SMS", "twilio", pluginhost.StateServing)}},
		"failover keeps a channel up": {status: []pluginhost.ProviderStatus{
			p("EMAIL", "primary", pluginhost.StateCircuitOpen), p("EMAIL", "backup", pluginhost.StateServing)}},
		"every provider of a channel down": {status: []pluginhost.ProviderStatus{
			p("SMS", "twilio", pluginhost.StateServing),
			p("EMAIL", "primary", pluginhost.StateRestarting), p("EMAIL", "backup", pluginhost.StateCircuitOpen)},
			want: []string{"channel EMAIL: no provider up (primary restarting, backup circuit_open)"}},
		// A quiet daemon sends no probe: an open circuit whose cooldown
		// passed and whose health checks pass counts as up.
		"open circuit ready for its probe": {status: []pluginhost.ProviderStatus{
			{Name: "websocket", Channel: "IN_APP", Provider: "websocket", State: pluginhost.StateCircuitOpen, ProbeReady: true}}},
		"several channels down, sorted": {status: []pluginhost.ProviderStatus{
			p("SMS", "twilio", pluginhost.StateRefused), p("EMAIL", "primary", pluginhost.StateStarting),
			p("PUSH", "fcm", pluginhost.StateStopped)},
			want: []string{"channel EMAIL: no provider up (primary starting)", "channel PUSH: no provider up (fcm stopped)",
				"channel SMS: no provider up (twilio refused)"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := server.ProviderReadiness(func() []pluginhost.ProviderStatus { return tc.status })(context.Background())
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
		})
	}
	// Readiness joins them after the database's and the broker's.
	check := server.Readiness(nil, nil, server.ProviderReadiness(func() []pluginhost.ProviderStatus {
		return []pluginhost.ProviderStatus{p("EMAIL", "primary", pluginhost.StateRefused)}
	}))
	if got := check(context.Background()); !cmp.Equal(got, []string{"channel EMAIL: no provider up (primary refused)"}) {
		t.Errorf("Readiness with a refused channel = %q", got)
	}
}
