package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/admin"
	"github.com/heraldhq/herald/core/internal/api/openapitest"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/httpguard"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk/producer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// world is one database with tenants a and b, their keys, and the API
// served over real HTTP with the daemon's own pools.
type world struct {
	db    *testenv.DB
	pools *server.Pools
	url   string
	keys  map[string]string // tenant -> API key
	admin string            // superadmin credential
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{db: testenv.Postgres(t), keys: map[string]string{}}
	for _, ten := range []string{"a", "b"} {
		if err := store.EnsureTenant(ctx, w.db.Pool, ten, ten); err != nil {
			t.Fatal(err)
		}
		k, err := store.CreateAPIKey(ctx, w.db.Pool, ten, "test", "")
		if err != nil {
			t.Fatal(err)
		}
		w.keys[ten] = k
	}
	var err error
	if _, w.admin, err = store.CreateAdmin(ctx, w.db.Pool, "ops"); err != nil {
		t.Fatal(err)
	}
	cfg := config.DefaultDaemon().Database
	cfg.URL, cfg.APIURL, cfg.AdminURL, cfg.MaxConns, cfg.APIMaxConns = w.db.URL, w.db.APIURL, w.db.AdminURL, 4, 4
	w.pools, err = server.OpenPools(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.pools.Close)
	d := config.DefaultDaemon()
	d.HTTP.RateLimit = httpguard.RateLimits{} // the tests send bursts; rate limits have tests of their own
	pub, err := server.PublicAPI(ctx, d, w.pools, nil, func() *rules.RuleSet { return nil }, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(pub.Handler)
	t.Cleanup(srv.Close)
	w.url = srv.URL
	openapitest.Watch(t, srv.URL)
	return w
}

type reply struct {
	code int
	body []byte
}

func (r reply) problem(t *testing.T) producer.Problem {
	t.Helper()
	var p producer.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("not a problem document: %s", r.body)
	}
	return p
}

func (w *world) do(t *testing.T, method, path, key, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, w.url+path, strings.NewReader(body))
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
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, b}
}

func (w *world) post(t *testing.T, tenant string, ev map[string]any) reply {
	t.Helper()
	b, _ := json.Marshal(ev)
	return w.do(t, "POST", "/v1/events", w.keys[tenant], string(b))
}

// snapshot is what tenant a owns, to check that b's requests left it alone.
func (w *world) snapshot(t *testing.T, tenant string) string {
	t.Helper()
	var s string
	err := w.db.Pool.QueryRow(context.Background(), `SELECT
		(SELECT coalesce(string_agg(event_id || '/' || project_id || '/' || event_type || '/' || payload::text, ',' ORDER BY event_id), '') FROM event_outbox WHERE tenant_id = $1) || '|' ||
		(SELECT coalesce(string_agg(user_id || '=' || unread, ',' ORDER BY user_id), '') FROM notification_counters WHERE tenant_id = $1) || '|' ||
		(SELECT count(*) FROM api_keys WHERE tenant_id = $1 AND revoked_at IS NULL)`, tenant).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEveryEndpointHidesOtherTenants sends tenant b's key with tenant a's
// ids to every route: reads answer 404 (never 403, which would tell that
// the id exists), writes touch only b's own rows, and a's data is
// unchanged.
func TestEveryEndpointHidesOtherTenants(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	for _, id := range []string{"a-secret", "a-private"} {
		if r := w.post(t, "a", map[string]any{"event_id": id, "type": "T", "payload": map[string]any{"x": 1}}); r.code != 201 {
			t.Fatalf("seed: %d %s", r.code, r.body)
		}
	}
	if _, err := w.db.Pool.Exec(ctx, `INSERT INTO notification_counters (tenant_id, user_id, unread) VALUES ('a', 'alice', 3)`); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		method, path, body string
		key                string
		want               int
	}{
		"GET /v1/events/{event_id} of a":           {method: "GET", path: "/v1/events/a-private", key: w.keys["b"], want: 404},
		"GET /v1/events/{event_id} unknown":        {method: "GET", path: "/v1/events/nobody-has-this", key: w.keys["b"], want: 404},
		"POST /v1/events reusing a's event_id":     {method: "POST", path: "/v1/events", key: w.keys["b"], body: `{"event_id":"a-secret","type":"OTHER","payload":{"y":2}}`, want: 201},
		"POST /v1/events into a's project":         {method: "POST", path: "/v1/events", key: w.keys["b"], body: `{"event_id":"p","type":"T","project_id":"a-only"}`, want: 422},
		"GET /v1/admin/notifications with b's key": {method: "GET", path: "/v1/admin/notifications?tenant=a", key: w.keys["b"], want: 401},
		"GET /v1/admin/stats with b's key":         {method: "GET", path: "/v1/admin/stats?tenant=a", key: w.keys["b"], want: 401},
		"GET /v1/apikeys":                          {method: "GET", path: "/v1/apikeys", key: w.keys["b"], want: 200},
		"POST /v1/apikeys":                         {method: "POST", path: "/v1/apikeys", key: w.keys["b"], body: `{"project_id":"a-only"}`, want: 422},
		"POST /v1/apikeys/{key_id}/revoke of a's":  {method: "POST", path: "/v1/apikeys/" + store.APIKeyID(w.keys["a"]) + "/revoke", key: w.keys["b"], want: 404},
		"POST /v1/apikeys/{key_id}/rotate of a's":  {method: "POST", path: "/v1/apikeys/" + store.APIKeyID(w.keys["a"]) + "/rotate", key: w.keys["b"], want: 404},
	}
	if err := store.EnsureProject(ctx, w.db.Pool, "a", "a-only", ""); err != nil {
		t.Fatal(err)
	}
	before := w.snapshot(t, "a")
	covered := map[string]bool{}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := w.do(t, tc.method, tc.path, tc.key, tc.body)
			if r.code != tc.want {
				t.Fatalf("%s %s: got %d %s, want %d", tc.method, tc.path, r.code, r.body, tc.want)
			}
			if r.code == 403 {
				t.Fatalf("403 tells that the id exists")
			}
		})
		covered[tc.method+" "+routeOf(tc.path)] = true
	}
	for _, route := range []string{"GET /v1/events/{event_id}", "POST /v1/events", "GET /v1/admin/notifications", "GET /v1/admin/stats",
		"GET /v1/apikeys", "POST /v1/apikeys", "POST /v1/apikeys/{key_id}/revoke", "POST /v1/apikeys/{key_id}/rotate"} {
		if !covered[route] {
			t.Errorf("route %s has no cross-tenant case", route)
		}
	}
	// The unknown-id and other-tenant 404s are the same document.
	p1 := w.do(t, "GET", "/v1/events/a-private", w.keys["b"], "").problem(t)
	p2 := w.do(t, "GET", "/v1/events/nobody-has-this", w.keys["b"], "").problem(t)
	if p1.Title != p2.Title || strings.ReplaceAll(p1.Detail, "a-private", "X") != strings.ReplaceAll(p2.Detail, "nobody-has-this", "X") {
		t.Errorf("a's id and an unknown id answer differently: %+v vs %+v", p1, p2)
	}
	if after := w.snapshot(t, "a"); after != before {
		t.Fatalf("tenant a changed under b's requests:\nbefore %s\nafter  %s", before, after)
	}
	// b's event with the same id is b's own.
	var st producer.EventStatus
	r := w.do(t, "GET", "/v1/events/a-secret", w.keys["a"], "")
	if err := json.Unmarshal(r.body, &st); err != nil || st.Type != "T" {
		t.Fatalf("a's event: %d %s", r.code, r.body)
	}
	r = w.do(t, "GET", "/v1/events/a-secret", w.keys["b"], "")
	if err := json.Unmarshal(r.body, &st); err != nil || r.code != 200 || st.Type != "OTHER" {
		t.Fatalf("b's event: %d %s", r.code, r.body)
	}
}

func routeOf(path string) string {
	path, _, _ = strings.Cut(path, "?")
	switch {
	case strings.HasPrefix(path, "/v1/events/"):
		return "/v1/events/{event_id}"
	case strings.HasPrefix(path, "/v1/apikeys/"):
		return "/v1/apikeys/{key_id}/" + path[strings.LastIndex(path, "/")+1:]
	}
	return path
}

// TestTwoTenantsHammeringSeeOnlyTheirOwn runs both tenants' requests at
// once over a small API pool, so connections go back and forth between
// tenants, and checks that no answer ever holds the other tenant's rows.
func TestTwoTenantsHammeringSeeOnlyTheirOwn(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	const perTenant = 60
	var wg sync.WaitGroup
	errs := make(chan error, 4*perTenant)
	for _, ten := range []string{"a", "b"} {
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < perTenant; i += 3 {
					id := fmt.Sprintf("ev-%d", i)
					body, _ := json.Marshal(map[string]any{"event_id": id, "type": "T_" + ten, "payload": map[string]any{"owner": ten}})
					req, _ := http.NewRequest("POST", w.url+"/v1/events", bytes.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+w.keys[ten])
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						errs <- err
						return
					}
					var st producer.EventStatus
					_ = json.NewDecoder(resp.Body).Decode(&st)
					resp.Body.Close()
					if resp.StatusCode != 201 || st.Type != "T_"+ten {
						errs <- fmt.Errorf("tenant %s posting %s: %d, type %q", ten, id, resp.StatusCode, st.Type)
					}
					req, _ = http.NewRequest("GET", w.url+"/v1/events/"+id, nil)
					req.Header.Set("Authorization", "Bearer "+w.keys[ten])
					resp, err = http.DefaultClient.Do(req)
					if err != nil {
						errs <- err
						return
					}
					st = producer.EventStatus{}
					_ = json.NewDecoder(resp.Body).Decode(&st)
					resp.Body.Close()
					if resp.StatusCode != 200 || st.Type != "T_"+ten {
						errs <- fmt.Errorf("tenant %s reading %s: %d, type %q (the other tenant's row?)", ten, id, resp.StatusCode, st.Type)
					}
				}
			}()
		}
		// Beside the HTTP traffic, raw queries with no tenant filter on
		// the same pool.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perTenant; i++ {
				err := store.InTenant(ctx, w.pools.API, ten, "", func(tx pgx.Tx) error {
					rows, err := tx.Query(ctx, `SELECT DISTINCT tenant_id FROM event_outbox`)
					if err != nil {
						return err
					}
					seen, err := pgx.CollectRows(rows, pgx.RowTo[string])
					if err != nil {
						return err
					}
					for _, s := range seen {
						if s != ten {
							return fmt.Errorf("tenant %s's transaction saw tenant %s's events", ten, s)
						}
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
				// Outside a tenant transaction, the same connections see nothing.
				var n int
				if err := w.pools.API.QueryRow(ctx, `SELECT count(*) FROM event_outbox`).Scan(&n); err != nil || n != 0 {
					errs <- fmt.Errorf("no tenant set: %d rows visible (%v)", n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, ten := range []string{"a", "b"} {
		var n int
		if err := w.db.Pool.QueryRow(ctx, `SELECT count(*) FROM event_outbox WHERE tenant_id = $1 AND event_type = $2`, ten, "T_"+ten).Scan(&n); err != nil || n != perTenant {
			t.Errorf("tenant %s has %d of its %d events (%v)", ten, n, perTenant, err)
		}
	}
}

func TestRevokedKeyIsRefusedAtOnce(t *testing.T) {
	w := newWorld(t)
	if r := w.do(t, "GET", "/v1/events/x", w.keys["a"], ""); r.code != 404 {
		t.Fatalf("before revocation: %d %s", r.code, r.body)
	}
	if err := store.RevokeAPIKey(context.Background(), w.db.Pool, "a", store.APIKeyID(w.keys["a"])); err != nil {
		t.Fatal(err)
	}
	r := w.do(t, "GET", "/v1/events/x", w.keys["a"], "")
	if r.code != 401 || !strings.Contains(r.problem(t).Detail, "revoked") {
		t.Fatalf("the first request after revocation: %d %s", r.code, r.body)
	}
	if r := w.do(t, "GET", "/v1/events/x", "hk_not_a_key_of_anyone_000000", ""); r.code != 401 {
		t.Fatalf("unknown key: %d", r.code)
	}
	if r := w.do(t, "GET", "/v1/events/x", "", ""); r.code != 401 {
		t.Fatalf("no key: %d", r.code)
	}
}

func TestProjectsScopeKeysAndEvents(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	if err := store.EnsureProject(ctx, w.db.Pool, "a", "shop", "Shop"); err != nil {
		t.Fatal(err)
	}
	shopKey, err := store.CreateProjectAPIKey(ctx, w.db.Pool, "a", "shop", "shop key", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateProjectAPIKey(ctx, w.db.Pool, "a", "nope", "", ""); err == nil {
		t.Fatal("a key for an unknown project was created")
	}
	// The tenant-wide key posts to default and to shop.
	for ev, proj := range map[string]string{"d1": "", "s1": "shop"} {
		r := w.post(t, "a", map[string]any{"event_id": ev, "type": "T", "project_id": proj})
		var st producer.EventStatus
		_ = json.Unmarshal(r.body, &st)
		want := proj
		if want == "" {
			want = "default"
		}
		if r.code != 201 || st.ProjectID != want {
			t.Fatalf("post %s: %d %s", ev, r.code, r.body)
		}
	}
	// The shop key posts to shop by default, reads shop only.
	r := w.do(t, "POST", "/v1/events", shopKey, `{"event_id":"s2","type":"T"}`)
	if r.code != 201 || !strings.Contains(string(r.body), `"project_id":"shop"`) {
		t.Fatalf("shop key post: %d %s", r.code, r.body)
	}
	if r := w.do(t, "POST", "/v1/events", shopKey, `{"event_id":"s3","type":"T","project_id":"default"}`); r.code != 403 || r.problem(t).Field != "project_id" {
		t.Fatalf("shop key posting to default: %d %s", r.code, r.body)
	}
	if r := w.do(t, "GET", "/v1/events/d1", shopKey, ""); r.code != 404 {
		t.Fatalf("shop key reading default's event: %d %s", r.code, r.body)
	}
	if r := w.do(t, "GET", "/v1/events/s1", shopKey, ""); r.code != 200 {
		t.Fatalf("shop key reading shop's event: %d %s", r.code, r.body)
	}
	// Reusing an event_id of another project is a conflict, not a leak.
	if r := w.do(t, "POST", "/v1/events", shopKey, `{"event_id":"d1","type":"T"}`); r.code != 409 {
		t.Fatalf("shop key reusing default's event_id: %d %s", r.code, r.body)
	}
	// Unknown and malformed projects: clear 4xx naming the field.
	for body, want := range map[string]int{
		`{"event_id":"x1","type":"T","project_id":"nope"}`:                             422,
		`{"event_id":"x2","type":"T","project_id":7}`:                                  400,
		`{"event_id":"x3","type":"T","project_id":"` + strings.Repeat("p", 300) + `"}`: 400,
	} {
		r := w.do(t, "POST", "/v1/events", w.keys["a"], body)
		if r.code != want || r.problem(t).Field != "project_id" {
			t.Errorf("%s: got %d %s, want %d naming project_id", body[:40], r.code, r.body, want)
		}
	}
}

// seedNotifications writes n notifications spread over tenants a and b,
// projects, users, severities and states, one minute apart.
func seedNotifications(t *testing.T, w *world, n int) {
	t.Helper()
	_, err := w.db.Pool.Exec(context.Background(), `INSERT INTO notifications
			(tenant_id, project_id, event_id, user_id, event_type, title, severity, read_at, archived_at, created_at)
		SELECT CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END, 'default', 'ev-' || i, 'u' || (i % 5), 'T', 'title ' || i,
			(ARRAY['info', 'warning', 'critical'])[1 + i % 3],
			CASE WHEN i % 4 = 1 THEN now() END, CASE WHEN i % 7 = 3 THEN now() END,
			timestamptz '2026-11-01 00:00:00+00' + make_interval(mins => i)
		FROM generate_series(1, $1) i`, n)
	if err != nil {
		t.Fatal(err)
	}
}

func TestSuperadminListsAcrossTenantsWithFiltersAndCursor(t *testing.T) {
	w := newWorld(t)
	seedNotifications(t, w, 500)
	get := func(q string) (admin.Page, reply) {
		r := w.do(t, "GET", "/v1/admin/notifications?"+q, w.admin, "")
		var p admin.Page
		if r.code == 200 {
			if err := json.Unmarshal(r.body, &p); err != nil {
				t.Fatal(err)
			}
		}
		return p, r
	}
	// Walk every page of a filtered view and compare with SQL.
	cases := map[string]struct {
		query string
		where string
	}{
		"everything":         {"limit=37", "true"},
		"tenant":             {"tenant=a&limit=50", "tenant_id = 'a'"},
		"tenant user":        {"tenant=b&user=u3&limit=7", "tenant_id = 'b' AND user_id = 'u3'"},
		"severity unread":    {"severity=critical&status=unread", "severity = 'critical' AND read_at IS NULL AND archived_at IS NULL"},
		"archived":           {"status=archived&limit=200", "archived_at IS NOT NULL"},
		"read in a range":    {"status=read&from=2026-11-01T02:00:00Z&to=2026-11-01T05:00:00Z", "read_at IS NOT NULL AND archived_at IS NULL AND created_at >= '2026-11-01T02:00:00Z' AND created_at < '2026-11-01T05:00:00Z'"},
		"project and tenant": {"tenant=a&project=default&limit=100", "tenant_id = 'a' AND project_id = 'default'"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var want []string
			rows, err := w.db.Pool.Query(context.Background(), "SELECT notification_id::text FROM notifications WHERE "+tc.where+" ORDER BY created_at DESC, notification_id DESC")
			if err != nil {
				t.Fatal(err)
			}
			want, err = pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			q := tc.query
			for pages := 0; ; pages++ {
				if pages > 100 {
					t.Fatal("no end of pages")
				}
				p, r := get(q)
				if r.code != 200 {
					t.Fatalf("%s: %d %s", q, r.code, r.body)
				}
				for _, n := range p.Items {
					got = append(got, n.NotificationID)
				}
				if p.NextCursor == "" {
					break
				}
				q = tc.query + "&cursor=" + url.QueryEscape(p.NextCursor)
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("pages hold %d ids, SQL %d; they differ", len(got), len(want))
			}
		})
	}
	// A cursor is bound to its filters and its signature.
	p, _ := get("tenant=a&limit=5")
	for name, q := range map[string]string{
		"other filters": "tenant=b&limit=5&cursor=" + url.QueryEscape(p.NextCursor),
		"tampered":      "tenant=a&limit=5&cursor=" + url.QueryEscape(p.NextCursor[:10]+"x"+p.NextCursor[11:]),
	} {
		if _, r := get(q); r.code != 400 || r.problem(t).Field != "cursor" {
			t.Errorf("%s: %d %s", name, r.code, r.body)
		}
	}
	// Bad filters name the parameter; unknown tenants and projects are 404.
	for q, want := range map[string]struct {
		code  int
		field string
	}{
		"status=gone":          {400, "status"},
		"from=yesterday":       {400, "from"},
		"limit=0":              {400, "limit"},
		"limit=201":            {400, "limit"},
		"user=u1":              {400, "user"},
		"tenant=a&user=%ff%fe": {400, "user"},
		"tenant=a%00b":         {400, "tenant"},
		"colour=red":           {400, "colour"},
		"tenant=a&tenant=b":    {400, "tenant"},
		"from=2026-11-02T00:00:00Z&to=2026-11-01T00:00:00Z": {400, "from"},
		"tenant=nobody":            {404, "tenant"},
		"tenant=a&project=nothing": {404, "project"},
	} {
		_, r := get(q)
		if r.code != want.code || r.problem(t).Field != want.field {
			t.Errorf("%s: got %d %s, want %d naming %s", q, r.code, r.body, want.code, want.field)
		}
	}
}

func TestSuperadminStatsAndReadOnlyCredential(t *testing.T) {
	w := newWorld(t)
	seedNotifications(t, w, 300)
	r := w.do(t, "GET", "/v1/admin/stats?from=2026-11-01T00:00:00Z&to=2026-11-02T00:00:00Z", w.admin, "")
	if r.code != 200 {
		t.Fatalf("stats: %d %s", r.code, r.body)
	}
	var st admin.Stats
	if err := json.Unmarshal(r.body, &st); err != nil {
		t.Fatal(err)
	}
	rows, err := w.db.Pool.Query(context.Background(), `SELECT tenant_id, severity,
			CASE WHEN archived_at IS NOT NULL THEN 'archived' WHEN read_at IS NOT NULL THEN 'read' ELSE 'unread' END, count(*)
		FROM notifications WHERE created_at >= '2026-11-01' AND created_at < '2026-11-02' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (admin.StatsRow, error) {
		var x admin.StatsRow
		return x, r.Scan(&x.TenantID, &x.Severity, &x.Status, &x.Count)
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(st.Rows) != fmt.Sprint(want) || st.Total != 300 || len(want) < 12 {
		t.Fatalf("stats:\n got %v (total %d)\nwant %v", st.Rows, st.Total, want)
	}
	r = w.do(t, "GET", "/v1/admin/stats?tenant=a&from=2026-11-01T00:00:00Z&to=2026-11-02T00:00:00Z", w.admin, "")
	_ = json.Unmarshal(r.body, &st)
	if r.code != 200 || st.Total != 150 {
		t.Fatalf("stats of tenant a: %d total %d", r.code, st.Total)
	}

	// The superadmin credential reads but never writes.
	r = w.do(t, "POST", "/v1/events", w.admin, `{"event_id":"x","type":"T"}`)
	if r.code != 403 {
		t.Fatalf("superadmin posting an event: %d %s", r.code, r.body)
	}
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
		if r := w.do(t, m, "/v1/admin/notifications", w.admin, "{}"); r.code != 405 {
			t.Errorf("%s /v1/admin/notifications: %d", m, r.code)
		}
	}
	// And its database role cannot write either.
	err = pgx.BeginFunc(context.Background(), w.pools.Admin, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), `INSERT INTO event_outbox (tenant_id, event_id, event_type) VALUES ('a', 'adm', 'T')`)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("herald_admin inserting an event: %v", err)
	}
	// Tenant keys and unknown or revoked credentials are refused.
	for name, key := range map[string]string{"tenant key": w.keys["a"], "none": "", "unknown": "hsa_0000"} {
		if r := w.do(t, "GET", "/v1/admin/stats", key, ""); r.code != 401 {
			t.Errorf("%s: %d", name, r.code)
		}
	}
	var id string
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT admin_id FROM superadmins`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := store.RevokeAdmin(context.Background(), w.db.Pool, id); err != nil {
		t.Fatal(err)
	}
	if r := w.do(t, "GET", "/v1/admin/stats", w.admin, ""); r.code != 401 {
		t.Fatalf("revoked superadmin: %d", r.code)
	}
}

func TestOpenPoolsRefusesAnAPIRoleThatBypassesRLS(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	cfg := config.DefaultDaemon().Database
	cfg.URL, cfg.APIURL, cfg.AdminURL, cfg.MaxConns, cfg.APIMaxConns = db.URL, db.APIURL, db.AdminURL, 2, 2
	// The role checks come before the login check: these log in as the
	// owner (an empty api_url is url) and pick a role that crosses tenants.
	cases := map[string]func(c *store.Config){
		"owner as API":  func(c *store.Config) { c.APIURL, c.APIRole = "", "" },
		"worker as API": func(c *store.Config) { c.APIURL, c.APIRole = "", store.RoleWorker },
		"superuser as API": func(c *store.Config) {
			c.APIURL, c.APIRole = testenv.SuperuserURL(t, db), ""
		},
	}
	for name, mut := range cases {
		t.Run(name, func(t *testing.T) {
			c := cfg
			mut(&c)
			p, err := server.OpenPools(ctx, c)
			if err == nil {
				p.Close()
				t.Fatal("started with an API role that crosses tenants")
			}
			if !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "database.api_role") {
				t.Fatalf("unclear refusal: %v", err)
			}
		})
	}
	// The superadmin pool never runs as the tables' owner (an empty
	// admin_role is url's login), a superuser or a role that may write.
	admin := map[string]func(c *store.Config){
		"owner as admin":     func(c *store.Config) { c.AdminURL, c.AdminRole = "", "" },
		"owner by name":      func(c *store.Config) { c.AdminURL, c.AdminRole = "", ownerOf(t, db.URL) },
		"worker as admin":    func(c *store.Config) { c.AdminURL, c.AdminRole = "", store.RoleWorker },
		"API as admin":       func(c *store.Config) { c.AdminURL, c.AdminRole = "", store.RoleAPI },
		"superuser as admin": func(c *store.Config) { c.URL, c.AdminURL, c.AdminRole = testenv.SuperuserURL(t, db), "", "" },
	}
	for name, mut := range admin {
		t.Run(name, func(t *testing.T) {
			c := cfg
			mut(&c)
			p, err := server.OpenPools(ctx, c)
			if err == nil {
				p.Close()
				t.Fatal("started the superadmin API as a role that may write")
			}
			if !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "database.admin_role") {
				t.Fatalf("unclear refusal: %v", err)
			}
		})
	}
	// The defaults run neither pool as the login role of url, and neither
	// logs in as it: each has a login of its own.
	p, err := server.OpenPools(ctx, cfg)
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	defer p.Close()
	if len(p.Warnings) != 0 {
		t.Errorf("warnings with dedicated logins: %q", p.Warnings)
	}
	owner := ownerOf(t, db.URL)
	for name, pool := range map[string]*pgxpool.Pool{"api": p.API, "admin": p.Admin} {
		ri, err := store.InspectRole(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		if ri.Current == ri.Login || ri.OwnsTables || ri.Superuser {
			t.Errorf("the %s pool runs as %q (login %q, owner %v)", name, ri.Current, ri.Login, ri.OwnsTables)
		}
		if ri.Login == owner || ri.LoginOwnsTables || ri.LoginSuperuser || ri.LoginBypassRLS {
			t.Errorf("the %s pool logs in as %q (the owner %q: %v, superuser %v, BYPASSRLS %v)", name, ri.Login, owner, ri.LoginOwnsTables, ri.LoginSuperuser, ri.LoginBypassRLS)
		}
	}
	// A pool that would log in as the owner (or as a login that may SET
	// ROLE to another of Herald's groups) is refused by default, naming the
	// setting and the opt-out; with the opt-out it opens, with a warning.
	logins := map[string]struct {
		mut func(c *store.Config)
		key string
	}{
		"API as the owner":              {func(c *store.Config) { c.APIURL = "" }, "database.api_url (empty: database.url)"},
		"admin as the owner":            {func(c *store.Config) { c.AdminURL = "" }, "database.admin_url (empty: database.url)"},
		"API as the owner, by URL":      {func(c *store.Config) { c.APIURL = db.URL }, "database.api_url"},
		"admin as the API's login":      {func(c *store.Config) { c.AdminURL = db.APIURL; c.AdminRole = store.RoleAdmin }, ""},
		"API as the superadmin's login": {func(c *store.Config) { c.APIURL = db.AdminURL }, ""},
	}
	for name, tc := range logins {
		t.Run(name, func(t *testing.T) {
			c := cfg
			tc.mut(&c)
			p, err := server.OpenPools(ctx, c)
			if err == nil {
				p.Close()
				t.Fatal("opened")
			}
			if tc.key == "" {
				return // the login may not SET ROLE to the other group: the connection itself fails
			}
			for _, want := range []string{"refusing to start", tc.key + " logs in as role \"" + owner + "\"", "owns Herald's tables",
				"only a member of", "database.allow_owner_login = true"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal does not say %q: %v", want, err)
				}
			}
			c.AllowOwnerLogin = true
			p, err = server.OpenPools(ctx, c)
			if err != nil {
				t.Fatalf("allow_owner_login: %v", err)
			}
			p.Close()
			if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "database.allow_owner_login is set: "+tc.key) {
				t.Fatalf("allow_owner_login warnings: %q", p.Warnings)
			}
		})
	}
	// A worker role that is not a member of herald_worker is refused too.
	c := cfg
	c.WorkerRole = store.RoleAPI
	if p, err := server.OpenPools(ctx, c); err == nil || !strings.Contains(err.Error(), "database.worker_role") {
		if p != nil {
			p.Close()
		}
		t.Fatalf("worker role herald_api: %v", err)
	}

}

// ownerOf is the login role of url.
func ownerOf(t *testing.T, url string) string {
	t.Helper()
	c, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return c.User
}

// TestAPILoginCannotLeaveItsTenant plays a query SQL injection made on a
// connection of the API pool: it resets the role to the login and tries
// to read across tenants, become another group, turn row-level security
// off and write what herald_api may not. The dedicated login can do none
// of it; the owner's login (database.allow_owner_login) can, which is why
// it is refused by default.
func TestAPILoginCannotLeaveItsTenant(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	conn, err := w.pools.API.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var login string
	if err := conn.QueryRow(ctx, `SELECT session_user::text`).Scan(&login); err != nil {
		t.Fatal(err)
	}
	if login != testenv.TestAPILogin || login == ownerOf(t, w.db.URL) {
		t.Fatalf("the API pool logs in as %q", login)
	}
	if _, err := conn.Exec(ctx, `RESET ROLE`); err != nil {
		t.Fatal(err)
	}
	// Back to the API role before the connection returns to the pool.
	defer func() { _, _ = conn.Exec(ctx, `SET ROLE `+store.RoleAPI) }()
	for _, table := range []string{"tenants", "api_keys", "notifications", "recipients"} {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("the login, with no tenant set, sees %d rows of %s", n, table)
		}
	}
	for _, q := range []string{
		`SET ROLE herald_worker`,
		`SET ROLE herald_admin`,
		`SET ROLE ` + pgx.Identifier{ownerOf(t, w.db.URL)}.Sanitize(),
		`ALTER TABLE tenants DISABLE ROW LEVEL SECURITY`,
		`SELECT count(*) FROM herald_secrets`,
		`INSERT INTO tenants (tenant_id, name) VALUES ('evil', 'evil')`,
		`UPDATE herald_secrets SET secret = 'x'`,
		`DELETE FROM superadmins`,
	} {
		if _, err := conn.Exec(ctx, q); err == nil {
			t.Errorf("the API's login may %s", q)
		}
	}
	// row_security = off makes a query that policies would filter fail,
	// rather than bypass them.
	if _, err := conn.Exec(ctx, `SET row_security = off`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT count(*) FROM tenants`); err == nil {
		t.Error("the API's login read tenants with row_security = off")
	}
	if _, err := conn.Exec(ctx, `RESET row_security`); err != nil {
		t.Fatal(err)
	}
	// With tenant a set it writes a's rows only, as herald_api may.
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := store.SetTenant(ctx, tx, "a", ""); err != nil {
			return err
		}
		var seen int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM tenants`).Scan(&seen); err != nil {
			return err
		}
		if seen != 1 {
			t.Errorf("with tenant a set the login sees %d tenants", seen)
		}
		_, err := tx.Exec(ctx, `INSERT INTO projects (tenant_id, project_id, name) VALUES ('b', 'p', 'p')`)
		return err
	})
	if err == nil {
		t.Error("with tenant a set the login wrote a project of b")
	}

	// The owner's login, which allow_owner_login keeps, reads every tenant
	// after RESET ROLE and SET ROLE herald_worker.
	cfg := config.DefaultDaemon().Database
	cfg.URL, cfg.AdminURL, cfg.MaxConns, cfg.APIMaxConns, cfg.AllowOwnerLogin = w.db.URL, w.db.AdminURL, 2, 2, true
	p, err := server.OpenPools(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var all int
	oc, err := p.API.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Release()
	if _, err := oc.Exec(ctx, `RESET ROLE; SET ROLE herald_worker`); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = oc.Exec(ctx, `SET ROLE `+store.RoleAPI) }()
	if err := oc.QueryRow(ctx, `SELECT count(*) FROM tenants`).Scan(&all); err != nil || all < 2 {
		t.Fatalf("the owner's login after RESET ROLE: %d tenants, %v (want every tenant: the risk allow_owner_login takes)", all, err)
	}
}
