package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/httpguard"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/store"
)

// AdminScenario is the superadmin API benchmark: a database of its own
// holding Rows notifications, the real API (server.OpenPools with the
// default roles, server.PublicAPI) served in-process on a loopback
// listener, and a fixed mix of filtered list requests sent over HTTP with
// a superadmin credential, one at a time.
type AdminScenario struct {
	// Rows is how many notifications the database holds (default
	// 1,000,000).
	Rows int `json:"rows"`
	// Tenants is how many tenants they are spread over (default 20); the
	// first few of them have three projects besides "default".
	Tenants int `json:"tenants"`
	// UsersPerTenant is how many users each tenant's notifications go to
	// (default 2,000).
	UsersPerTenant int `json:"users_per_tenant"`
	// Days is the span of created_at, ending now (default 60).
	Days int `json:"days"`
	// Requests is how many requests of each shape are measured (default
	// 200).
	Requests int `json:"requests_per_shape"`
	// Warmup is how many requests of each shape go first, unmeasured
	// (default 10).
	Warmup int `json:"warmup_per_shape"`
	// StatsRequests is how many stats requests are measured (default
	// Requests / 10, at least 5).
	StatsRequests int `json:"stats_requests"`
	// Limit is the page size of the list requests (default 50).
	Limit int `json:"limit"`
}

// setDefaults fills the fields left zero.
func (sc *AdminScenario) setDefaults() {
	sc.Rows = cmp.Or(sc.Rows, 1_000_000)
	sc.Tenants = cmp.Or(sc.Tenants, 20)
	sc.UsersPerTenant = cmp.Or(sc.UsersPerTenant, 2000)
	sc.Days = cmp.Or(sc.Days, 60)
	sc.Requests = cmp.Or(sc.Requests, 200)
	sc.Warmup = cmp.Or(sc.Warmup, 10)
	sc.StatsRequests = cmp.Or(sc.StatsRequests, max(5, sc.Requests/10))
	sc.Limit = cmp.Or(sc.Limit, 50)
}

// Validate checks the scenario after defaults.
func (sc AdminScenario) Validate() error {
	switch {
	case sc.Rows < 1 || sc.Tenants < 1 || sc.UsersPerTenant < 1 || sc.Requests < 1 || sc.StatsRequests < 1:
		return errors.New("bench: admin: rows, tenants, users per tenant and requests must be at least 1")
	case sc.Days < 2:
		return errors.New("bench: admin: days must be at least 2")
	case sc.Warmup < 0:
		return errors.New("bench: admin: warm-up must not be negative")
	case sc.Limit < 1 || sc.Limit > 200:
		return errors.New("bench: admin: limit must be from 1 to 200")
	case sc.Tenants > 999:
		return errors.New("bench: admin: at most 999 tenants")
	}
	return nil
}

// AdminTarget is the superadmin list's latency target: p99 of a filtered
// page, in milliseconds.
const AdminTarget = 50.0

// AdminResult is what the superadmin benchmark measured.
type AdminResult struct {
	Scenario AdminScenario `json:"scenario"`
	// Load is how long the one INSERT ... SELECT of every row took;
	// Analyze the ANALYZE after it.
	Load    time.Duration `json:"load_ns"`
	Analyze time.Duration `json:"analyze_ns"`
	// TableBytes is the size of notifications with its indexes.
	TableBytes int64 `json:"table_bytes"`
	// Shapes are the list requests, one entry per filter shape.
	Shapes []ShapeResult `json:"shapes"`
	// Overall pools every measured list request of every shape.
	Overall LatencySummary `json:"overall"`
	// Stats is GET /v1/admin/stats over its default range, the last 30
	// days.
	Stats ShapeResult `json:"stats"`
	// Failed counts the requests, measured or not, that were not answered
	// 200.
	Failed int `json:"failed"`
	// Database names the database when Keep kept it.
	Database string `json:"database,omitempty"`
}

// ShapeResult is one shape of request.
type ShapeResult struct {
	Name string `json:"name"`
	// Example is the query string of one of its requests.
	Example string         `json:"example"`
	Latency LatencySummary `json:"latency"`
	// Items is how many notifications the measured requests returned in
	// all; for stats, the total the last answer counted.
	Items int `json:"items"`
	// Failed counts its requests that were not answered 200; Detail has
	// the first answer.
	Failed int    `json:"failed"`
	Detail string `json:"detail,omitempty"`
}

// Met reports whether the shape met AdminTarget.
func (s ShapeResult) Met() bool {
	return s.Failed == 0 && s.Latency.Count > 0 && s.Latency.P99 < AdminTarget
}

// adminExtraProjects are the projects the first adminProjectTenants
// tenants have besides "default"; each gets a fifth of their rows.
var adminExtraProjects = []string{"billing", "ops", "growth"}

const adminProjectTenants = 4

func adminTenant(i int) string { return fmt.Sprintf("tenant-%03d", i) }

// RunAdmin runs the superadmin benchmark, in steps: load (a database of
// its own with the tenants, their projects and the notifications,
// analyzed), sample users (the admin key and users that have
// notifications), serve the real API in this process, and measure (each
// request shape, then stats).
func RunAdmin(ctx context.Context, env Env, sc AdminScenario) (res AdminResult, err error) {
	sc.setDefaults()
	res.Scenario = sc
	if err := sc.Validate(); err != nil {
		return res, err
	}
	r := &adminRun{sc: sc, logf: env.Log, res: &res}
	if r.logf == nil {
		r.logf = func(string, ...any) {}
	}
	defer r.close()
	if err := r.load(ctx, env); err != nil {
		return res, err
	}
	if err := r.sampleUsers(ctx); err != nil {
		return res, err
	}
	if err := r.serve(ctx); err != nil {
		return res, err
	}
	if err := r.measure(ctx); err != nil {
		return res, err
	}
	return res, nil
}

// adminRun is one RunAdmin under way: what its steps set up and share,
// and the cleanups that undo them, run in reverse order by close.
type adminRun struct {
	sc   AdminScenario
	logf func(format string, args ...any)
	res  *AdminResult

	// Set up by load.
	dbURL string
	pool  *pgxpool.Pool
	now   time.Time // the notifications are dated up to sc.Days before it

	// Set up by sampleUsers: the admin key and up to 256 (tenant, user)
	// pairs that have notifications.
	key   string
	users [][2]string

	// Set up by serve.
	cl *adminClient

	undo // what the steps set up, undone by close
}

// load makes the run's database with its tenants (the first few with
// extra projects) and loads, analyzes and sizes the notifications.
func (r *adminRun) load(ctx context.Context, env Env) error {
	sc, res := r.sc, r.res
	name := fmt.Sprintf("herald_bench_admin_%d_%d", time.Now().Unix(), os.Getpid())
	dbURL, pool, dropDB, err := heraldDatabase(ctx, env.AdminDatabaseURL, name, 4, 0)
	if err != nil {
		return err
	}
	r.dbURL, r.pool = dbURL, pool
	if env.Keep {
		res.Database = name
	} else {
		r.onClose(func() { _ = dropDB() })
	}
	r.onClose(pool.Close)

	for t := range sc.Tenants {
		if err := store.EnsureTenant(ctx, pool, adminTenant(t), "Admin benchmark "+strconv.Itoa(t)); err != nil {
			return err
		}
		if t < adminProjectTenants {
			for _, p := range adminExtraProjects {
				if err := store.EnsureProject(ctx, pool, adminTenant(t), p, p); err != nil {
					return err
				}
			}
		}
	}
	r.logf("admin: inserting %s notifications (%d tenants × %d users, %d days)", num(float64(sc.Rows)), sc.Tenants, sc.UsersPerTenant, sc.Days)
	r.now = time.Now().UTC()
	start := time.Now()
	if err := loadNotifications(ctx, pool, sc, r.now); err != nil {
		return err
	}
	res.Load = time.Since(start)
	start = time.Now()
	if _, err := pool.Exec(ctx, `ANALYZE notifications, tenants, projects`); err != nil {
		return fmt.Errorf("bench: admin: analyze: %w", err)
	}
	res.Analyze = time.Since(start)
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(relid)), 0)::bigint FROM pg_partition_tree('notifications') WHERE isleaf`).Scan(&res.TableBytes); err != nil {
		return fmt.Errorf("bench: admin: table size: %w", err)
	}
	r.logf("admin: loaded in %s, analyzed in %s; %s with indexes", res.Load.Round(100*time.Millisecond),
		res.Analyze.Round(100*time.Millisecond), mib(res.TableBytes))
	return nil
}

// sampleUsers creates the superadmin key and picks users that have
// notifications, in no particular order: rows are in time order, so they
// are ordered by a hash of their event ids.
func (r *adminRun) sampleUsers(ctx context.Context) error {
	var err error
	if _, r.key, err = store.CreateAdmin(ctx, r.pool, "bench"); err != nil {
		return err
	}
	rows, err := r.pool.Query(ctx, `SELECT tenant_id, user_id FROM notifications ORDER BY md5(event_id) LIMIT 256`)
	if err != nil {
		return fmt.Errorf("bench: admin: sample users: %w", err)
	}
	for rows.Next() {
		var u [2]string
		if err := rows.Scan(&u[0], &u[1]); err != nil {
			rows.Close()
			return err
		}
		r.users = append(r.users, u)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(r.users) == 0 {
		return errors.New("bench: admin: no notifications loaded")
	}
	return nil
}

// serve serves the real API in this process on a loopback port, with a
// client holding the admin key.
func (r *adminRun) serve(ctx context.Context) error {
	dbCfg := config.DefaultDaemon().Database
	dbCfg.URL, dbCfg.MaxConns, dbCfg.APIMaxConns = r.dbURL, 2, 2
	// A throw-away database on the benchmark's cluster: the pools log in
	// as its owner, which costs what a login of their own would.
	dbCfg.AllowOwnerLogin = true
	pools, err := server.OpenPools(ctx, dbCfg)
	if err != nil {
		return err
	}
	r.onClose(pools.Close)
	d := config.DefaultDaemon()
	d.HTTP.RateLimit = httpguard.RateLimits{} // the benchmark is the only client
	pub, err := server.PublicAPI(ctx, d, pools, nil, func() *rules.RuleSet { return nil }, hclog.NewNullLogger())
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: pub.Handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	r.onClose(func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = srv.Shutdown(c)
	})
	r.cl = &adminClient{base: "http://" + ln.Addr().String(), key: r.key, http: &http.Client{Timeout: 30 * time.Second}}
	return nil
}

// measure runs every request shape, then the stats requests.
func (r *adminRun) measure(ctx context.Context) error {
	sc, res := r.sc, r.res
	overall := &Latencies{}
	for _, shape := range adminShapes(sc, r.now, r.users) {
		r.logf("admin: %s: %d requests after %d unmeasured", shape.name, sc.Requests, sc.Warmup)
		sr, err := r.cl.runShape(ctx, shape, sc, overall)
		if err != nil {
			return err
		}
		res.Failed += sr.Failed
		res.Shapes = append(res.Shapes, sr)
	}
	res.Overall = summarize(overall)
	r.logf("admin: stats: %d requests", sc.StatsRequests)
	var err error
	if res.Stats, err = r.cl.runStats(ctx, sc); err != nil {
		return err
	}
	res.Failed += res.Stats.Failed
	return nil
}

// adminBatch is how many notifications share a created_at: the relay
// writes a batch of events' notifications in one transaction, and
// created_at defaults to its start, so rows come in runs of equal
// created_at that only notification_id orders.
const adminBatch = 100

// ensureNotificationMonths creates the monthly partitions of notifications
// (migration 0019) for rows dated up to days before now.
func ensureNotificationMonths(ctx context.Context, pool *pgxpool.Pool, days int, now time.Time) error {
	if _, err := pool.Exec(ctx, `SELECT herald_ensure_partitions('notifications', $1, $2)`,
		now.AddDate(0, 0, -days-1), now); err != nil {
		return fmt.Errorf("bench: partitions of notifications: %w", err)
	}
	return nil
}

// loadNotifications inserts sc.Rows notifications with one INSERT ...
// SELECT: in created_at order, as the relay writes them, spread evenly
// over sc.Days days before now in runs of adminBatch rows with the same
// created_at, with time-ordered (version 7) ids as the relay makes them. Tenants and users are uniform; severities info,
// warning and critical at 80, 15 and 5 %; 10 % archived, 60 % read and not
// archived, 30 % unread. The first few tenants split their rows 40 % to
// "default" and 20 % to each of three more projects. The random numbers
// are seeded, so every run loads the same rows.
func loadNotifications(ctx context.Context, pool *pgxpool.Pool, sc AdminScenario, now time.Time) error {
	tenants := make([]string, sc.Tenants)
	for t := range tenants {
		tenants[t] = adminTenant(t)
	}
	projects := append([]string{store.DefaultProject, store.DefaultProject}, adminExtraProjects...)
	span := (time.Duration(sc.Days) * 24 * time.Hour).Seconds()
	if err := ensureNotificationMonths(ctx, pool, sc.Days, now); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT setseed(0.42)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO notifications (notification_id, tenant_id, project_id, event_id, user_id,
				event_type, title, body, severity, read_at, archived_at, created_at)
			SELECT (lpad(to_hex((extract(epoch FROM at) * 1000)::bigint), 12, '0') || '7' || substr(h, 1, 3)
					|| '8' || substr(h, 4, 15))::uuid,
				($2::text[])[1 + t],
				CASE WHEN t < $6 THEN ($7::text[])[1 + floor(rp * cardinality($7::text[]))::int] ELSE 'default' END,
				'admin-bench-' || i,
				'user-' || lpad(u::text, 5, '0'),
				'ADMIN_BENCH_' || i % 8,
				'Notification ' || i,
				'Something happened that user-' || lpad(u::text, 5, '0') || ' of ' || ($2::text[])[1 + t]
					|| ' should know about (notification ' || i || ')',
				CASE WHEN rs < 0.80 THEN 'info' WHEN rs < 0.95 THEN 'warning' ELSE 'critical' END,
				CASE WHEN rst < 0.70 THEN at + (1 + rst * 600) * interval '1 minute' END,
				CASE WHEN rst < 0.10 THEN at + (1 + rst * 100) * interval '1 hour' END,
				at
			FROM (SELECT i, md5(i::text) AS h, floor(random() * cardinality($2::text[]))::int AS t,
					floor(random() * $3)::int AS u, random() AS rs, random() AS rst, random() AS rp,
					$4::timestamptz - ($1 - (i - i % $8)) * ($5::float8 / $1) * interval '1 second' AS at
				FROM generate_series(1, $1::int) AS i
				OFFSET 0) g`,
			sc.Rows, tenants, sc.UsersPerTenant, now, span, min(adminProjectTenants, sc.Tenants), projects, adminBatch)
		return err
	})
	if err != nil {
		return fmt.Errorf("bench: admin: insert notifications: %w", err)
	}
	return nil
}

// adminShape is one kind of list request.
type adminShape struct {
	name string
	// query gives the filters of its i-th request.
	query func(i int) url.Values
	// pages, when above 0, makes each request of the shape a page reached
	// by next_cursor: each round fetches the first page unmeasured and
	// follows next_cursor for up to pages pages, measuring each.
	pages int
}

// adminShapes is the fixed mix of list requests. Requests of a shape vary
// their tenant, user or day, so that they do not all read the same rows.
func adminShapes(sc AdminScenario, now time.Time, users [][2]string) []adminShape {
	tenant := func(i int) string { return adminTenant(i % sc.Tenants) }
	// Tenants with projects besides "default", and those projects.
	var projects [][2]string
	for t := range min(adminProjectTenants, sc.Tenants) {
		for _, p := range adminExtraProjects {
			projects = append(projects, [2]string{adminTenant(t), p})
		}
	}
	day := now.Truncate(24 * time.Hour)
	q := func(kv ...string) url.Values {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	return []adminShape{
		{name: "no filter", query: func(int) url.Values { return q() }},
		{name: "tenant", query: func(i int) url.Values { return q("tenant", tenant(i)) }},
		{name: "tenant+user", query: func(i int) url.Values {
			u := users[i%len(users)]
			return q("tenant", u[0], "user", u[1])
		}},
		{name: "tenant+severity=critical", query: func(i int) url.Values { return q("tenant", tenant(i), "severity", "critical") }},
		{name: "status=unread", query: func(int) url.Values { return q("status", "unread") }},
		{name: "severity=critical+status=unread", query: func(int) url.Values { return q("severity", "critical", "status", "unread") }},
		{name: "tenant+one day", query: func(i int) url.Values {
			// A whole day from 1 to Days-1 days ago.
			from := day.AddDate(0, 0, -1-i%(sc.Days-1))
			return q("tenant", tenant(i), "from", from.Format(time.RFC3339), "to", from.AddDate(0, 0, 1).Format(time.RFC3339))
		}},
		{name: "tenant+project", query: func(i int) url.Values {
			p := projects[i%len(projects)]
			return q("tenant", p[0], "project", p[1])
		}},
		{name: "tenant+severity=critical, pages 2-6", pages: 5, query: func(i int) url.Values {
			return q("tenant", tenant(i), "severity", "critical")
		}},
	}
}

// adminClient sends the benchmark's requests.
type adminClient struct {
	base, key string
	http      *http.Client
}

// get sends one GET and returns how long it took until its body was read,
// the body and its status.
func (c *adminClient) get(ctx context.Context, path string, q url.Values) (time.Duration, []byte, int, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("bench: admin: GET %s: %w", path, err)
	}
	body, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	_ = resp.Body.Close()
	if err != nil {
		return 0, nil, 0, fmt.Errorf("bench: admin: GET %s: %w", path, err)
	}
	return took, body, resp.StatusCode, nil
}

// listPage is what the benchmark reads of a list answer.
type listPage struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor string            `json:"next_cursor"`
}

// list fetches one page. A request the API did not answer with 200 is
// counted in sr and returns ok false; only transport errors are errors.
func (c *adminClient) list(ctx context.Context, q url.Values, sr *ShapeResult) (took time.Duration, page listPage, ok bool, err error) {
	took, body, status, err := c.get(ctx, "/v1/admin/notifications", q)
	if err != nil {
		return 0, page, false, err
	}
	if status != http.StatusOK {
		sr.Failed++
		if sr.Detail == "" {
			sr.Detail = fmt.Sprintf("%d %s", status, strings.TrimSpace(string(body)))
		}
		return took, page, false, nil
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return 0, page, false, fmt.Errorf("bench: admin: list answer: %w", err)
	}
	return took, page, true, nil
}

// runShape sends a shape's warm-up and measured requests, one at a time.
func (c *adminClient) runShape(ctx context.Context, shape adminShape, sc AdminScenario, overall *Latencies) (ShapeResult, error) {
	sr := ShapeResult{Name: shape.name}
	lat := &Latencies{}
	limit := strconv.Itoa(sc.Limit)
	if shape.pages == 0 {
		for i := range sc.Warmup + sc.Requests {
			q := shape.query(i)
			q.Set("limit", limit)
			if sr.Example == "" {
				sr.Example = q.Encode()
			}
			took, page, ok, err := c.list(ctx, q, &sr)
			if err != nil {
				return sr, err
			}
			if i < sc.Warmup || !ok {
				continue
			}
			lat.Add(took)
			overall.Add(took)
			sr.Items += len(page.Items)
		}
		sr.Latency = summarize(lat)
		return sr, nil
	}
	// Cursor pages: rounds of a first page and up to shape.pages pages
	// after it, until Warmup+Requests pages followed a cursor. A round
	// whose filters have a single page gives none; after many such rounds
	// in a row the data is too small for the shape, and it stops short.
	followed, barren := 0, 0
	for round := 0; followed < sc.Warmup+sc.Requests && barren < 100; round++ {
		q := shape.query(round)
		q.Set("limit", limit)
		_, page, ok, err := c.list(ctx, q, &sr)
		if err != nil {
			return sr, err
		}
		tried := 0
		for p := 0; ok && page.NextCursor != "" && p < shape.pages && followed < sc.Warmup+sc.Requests; p++ {
			q.Set("cursor", page.NextCursor)
			if sr.Example == "" {
				sr.Example = q.Encode()
			}
			var took time.Duration
			took, page, ok, err = c.list(ctx, q, &sr)
			if err != nil {
				return sr, err
			}
			followed++
			tried++
			if followed <= sc.Warmup || !ok {
				continue
			}
			lat.Add(took)
			overall.Add(took)
			sr.Items += len(page.Items)
		}
		if tried == 0 {
			barren++
		} else {
			barren = 0
		}
	}
	sr.Latency = summarize(lat)
	if sr.Latency.Count < sc.Requests && sr.Detail == "" {
		sr.Detail = fmt.Sprintf("only %d pages reached by cursor: too few rows for the shape", sr.Latency.Count)
	}
	return sr, nil
}

// runStats measures the stats endpoint over its default range.
func (c *adminClient) runStats(ctx context.Context, sc AdminScenario) (ShapeResult, error) {
	sr := ShapeResult{Name: "stats, last 30 days", Example: "(from and to left to their defaults)"}
	lat := &Latencies{}
	for i := range min(sc.Warmup, 2) + sc.StatsRequests {
		took, body, status, err := c.get(ctx, "/v1/admin/stats", nil)
		if err != nil {
			return sr, err
		}
		if status != http.StatusOK {
			sr.Failed++
			if sr.Detail == "" {
				sr.Detail = fmt.Sprintf("%d %s", status, strings.TrimSpace(string(body)))
			}
			continue
		}
		if i < min(sc.Warmup, 2) {
			continue
		}
		var st struct {
			Total int `json:"total"`
		}
		if err := json.Unmarshal(body, &st); err != nil {
			return sr, fmt.Errorf("bench: admin: stats answer: %w", err)
		}
		lat.Add(took)
		sr.Items = st.Total
	}
	sr.Latency = summarize(lat)
	return sr, nil
}
