package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/httpguard"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/store"
)

// InboxScenario is the notification centre benchmark: a database of its
// own holding Rows notifications of Users users (loaded as the superadmin
// benchmark loads them, plus shared notifications), unread counters that
// match them, an HS256 token key per tenant and a token per user, and the
// real API (server.OpenPools, server.PublicAPI) served in-process on a
// loopback listener. It runs in steps:
//
//  1. one reader alone sends Baseline rounds, unmeasured for the targets:
//     the service time of each endpoint without queueing;
//  2. Readers concurrent readers loop over random users, each round
//     sending GET /v1/inbox/unread-count, GET /v1/inbox/bell and the first
//     page GET /v1/inbox?limit=Limit for one user, Warmup unmeasured and
//     then ReadFor measured;
//  3. Writers concurrent writers mark random unread notifications read
//     (POST /v1/inbox/{id}/read) and act on random shared ones (POST
//     /v1/inbox/{id}/actions), ActionShare of their requests, for WriteFor
//     or MaxWrites requests, whichever comes first;
//  4. the counters are checked against the rows (store.RepairCounters
//     must find no drift), and the actions and reads against what was
//     answered.
type InboxScenario struct {
	// Rows is how many notifications the database holds, shared ones
	// included (default 1,000,000).
	Rows int `json:"rows"`
	// Tenants is how many tenants the users belong to (default 10); the
	// first few have three projects besides "default".
	Tenants int `json:"tenants"`
	// Users is how many users there are in all, Users / Tenants a tenant
	// (default 10,000).
	Users int `json:"users"`
	// Days is the span of created_at, ending now (default 60).
	Days int `json:"days"`
	// SharedEvents is how many events are shared, each to Sharers users of
	// one tenant (default Rows / 500, at least 1; Sharers default 5): a
	// rule with shared = true, all unread and not yet acted on.
	SharedEvents int `json:"shared_events"`
	Sharers      int `json:"sharers"`
	// Baseline is how many rounds the lone reader sends (default 200).
	Baseline int `json:"baseline_rounds"`
	// Readers is how many readers run at once (default 50).
	Readers int `json:"readers"`
	// Warmup is how long the readers run unmeasured first (default 2 s).
	Warmup time.Duration `json:"warmup_ns"`
	// ReadFor is how long the readers are measured (default 20 s).
	ReadFor time.Duration `json:"read_for_ns"`
	// Limit is the page size of the list request (default 20).
	Limit int `json:"limit"`
	// Writers is how many writers run at once (default 20).
	Writers int `json:"writers"`
	// WriteFor bounds the writes by time (default 10 s) and MaxWrites by
	// number (default 50,000).
	WriteFor  time.Duration `json:"write_for_ns"`
	MaxWrites int           `json:"max_writes"`
	// ActionShare is the fraction of writes that are actions (default
	// 0.2); the rest are reads.
	ActionShare float64 `json:"action_share"`
	// APIConns is the API role's pool (database.api_max_conns; default the
	// daemon's, 8).
	APIConns int `json:"api_conns"`
}

// setDefaults fills the fields left zero.
func (sc *InboxScenario) setDefaults() {
	sc.Rows = cmp.Or(sc.Rows, 1_000_000)
	sc.Tenants = cmp.Or(sc.Tenants, 10)
	sc.Users = cmp.Or(sc.Users, 10_000)
	sc.Days = cmp.Or(sc.Days, 60)
	sc.SharedEvents = cmp.Or(sc.SharedEvents, max(1, sc.Rows/500))
	sc.Sharers = cmp.Or(sc.Sharers, 5)
	sc.Baseline = cmp.Or(sc.Baseline, 200)
	sc.Readers = cmp.Or(sc.Readers, 50)
	sc.Limit = cmp.Or(sc.Limit, 20)
	sc.Writers = cmp.Or(sc.Writers, 20)
	sc.MaxWrites = cmp.Or(sc.MaxWrites, 50_000)
	sc.APIConns = cmp.Or(sc.APIConns, config.DefaultDaemon().Database.APIMaxConns)
	if sc.Warmup == 0 {
		sc.Warmup = 2 * time.Second
	}
	if sc.ReadFor == 0 {
		sc.ReadFor = 20 * time.Second
	}
	if sc.WriteFor == 0 {
		sc.WriteFor = 10 * time.Second
	}
	if sc.ActionShare == 0 {
		sc.ActionShare = 0.2
	}
}

// inboxMaxPhase bounds each measured phase: a user's token lives at most
// the verifier's cap (15 minutes), and each phase gets fresh tokens.
const inboxMaxPhase = 10 * time.Minute

// Validate checks the scenario after defaults.
func (sc InboxScenario) Validate() error {
	switch {
	case sc.Tenants < 1 || sc.Tenants > 999:
		return errors.New("bench: inbox: tenants must be from 1 to 999")
	case sc.Users < sc.Tenants || sc.Users%sc.Tenants != 0:
		return fmt.Errorf("bench: inbox: users must be a multiple of the %d tenants", sc.Tenants)
	case sc.Users/sc.Tenants > 99_999:
		return errors.New("bench: inbox: at most 99,999 users a tenant")
	case sc.Sharers < 1 || sc.Sharers > sc.Users/sc.Tenants:
		return fmt.Errorf("bench: inbox: sharers must be from 1 to the %d users of a tenant", sc.Users/sc.Tenants)
	case sc.SharedEvents < 0 || sc.SharedEvents*sc.Sharers >= sc.Rows:
		return errors.New("bench: inbox: the shared notifications (shared events × sharers) must be fewer than the rows")
	case sc.Days < 2:
		return errors.New("bench: inbox: days must be at least 2")
	case sc.Baseline < 1 || sc.Readers < 1 || sc.Writers < 1 || sc.MaxWrites < 1 || sc.APIConns < 1:
		return errors.New("bench: inbox: baseline rounds, readers, writers, writes and API connections must be at least 1")
	case sc.Warmup < 0 || sc.ReadFor <= 0 || sc.WriteFor <= 0:
		return errors.New("bench: inbox: the read and write durations must be positive")
	case sc.Warmup+sc.ReadFor > inboxMaxPhase || sc.WriteFor > inboxMaxPhase:
		return fmt.Errorf("bench: inbox: each phase lasts at most %s (the users' tokens expire)", inboxMaxPhase)
	case sc.Limit < 1 || sc.Limit > 100:
		return errors.New("bench: inbox: limit must be from 1 to 100")
	case sc.ActionShare < 0 || sc.ActionShare > 1:
		return errors.New("bench: inbox: the action share must be from 0 to 1")
	}
	return nil
}

// The inbox targets: p99 of the unread count, and of the bell and the
// first page, in milliseconds, under the scenario's readers; and the reads
// per second they reach together.
const (
	InboxCountTarget = 5.0
	InboxPageTarget  = 25.0
	InboxReadsTarget = 2000.0
)

// EndpointResult is one endpoint of the inbox benchmark.
type EndpointResult struct {
	// Name is its short name: unread-count, bell, list, read or action.
	Name string `json:"name"`
	// Request is its method and path, as sent.
	Request string         `json:"request"`
	Latency LatencySummary `json:"latency"`
	// PerSec is its answered requests per second of the phase.
	PerSec float64 `json:"per_sec"`
	// Items is how many notifications its answers held in all; for the
	// unread count, the sum of the counts answered.
	Items int64 `json:"items"`
	// Conflicts counts actions answered 409: another sharer acted first.
	Conflicts int `json:"conflicts,omitempty"`
	// Failed counts requests not answered as expected (200; or 409 for an
	// action); Detail has the first such answer.
	Failed int    `json:"failed"`
	Detail string `json:"detail,omitempty"`
}

// Met reports whether the endpoint's p99 is under target milliseconds,
// with every request answered.
func (e EndpointResult) Met(target float64) bool {
	return e.Failed == 0 && e.Latency.Count > 0 && e.Latency.P99 < target
}

// InboxCheck is the verdict on the state the writes left.
type InboxCheck struct {
	// Counters is how many counter rows there are; Drift how many of them
	// store.RepairCounters found not matching the rows.
	Counters int `json:"counters"`
	Drift    int `json:"drift"`
	// Won is how many actions were answered 200; Actions how many action
	// rows there are.
	Won     int `json:"won"`
	Actions int `json:"actions"`
	// UnreadHandled counts notifications still unread although their
	// shared notification was acted on.
	UnreadHandled int `json:"unread_handled"`
	// UnreadAnswered counts notifications answered 200 to read that are
	// unread.
	UnreadAnswered int `json:"unread_answered"`
	// OK is true when all of the above are exactly right.
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// InboxResult is what the inbox benchmark measured.
type InboxResult struct {
	Scenario InboxScenario `json:"scenario"`
	// SharedRows is how many of the rows are shared notifications.
	SharedRows int `json:"shared_rows"`
	// Load is how long the notifications took to insert, Counters the
	// counters, and Vacuum the VACUUM (ANALYZE) after them.
	Load     time.Duration `json:"load_ns"`
	Counters time.Duration `json:"counters_ns"`
	Vacuum   time.Duration `json:"vacuum_ns"`
	// TableBytes is the size of notifications with its indexes.
	TableBytes int64 `json:"table_bytes"`
	// Baseline is the lone reader's endpoints.
	Baseline []EndpointResult `json:"baseline"`
	// Reads are the concurrent readers' endpoints; ReadsPerSec all their
	// answered requests per second; ReadCPU the CPU the benchmark process
	// (the API and its clients) used meanwhile, in cores.
	Reads       []EndpointResult `json:"reads"`
	ReadsPerSec float64          `json:"reads_per_sec"`
	ReadCPU     float64          `json:"read_cpu_cores"`
	// Writes are the writers' endpoints; WritesPerSec all their answered
	// requests per second over WriteTime, how long they wrote.
	Writes       []EndpointResult `json:"writes"`
	WritesPerSec float64          `json:"writes_per_sec"`
	WriteTime    time.Duration    `json:"write_ns"`
	Check        InboxCheck       `json:"check"`
	// Failed counts every request, of any phase, not answered as expected.
	Failed int `json:"failed"`
	// Database names the database when Keep kept it.
	Database string `json:"database,omitempty"`
}

// Read returns the concurrent readers' endpoint of that name.
func (r *InboxResult) Read(name string) (EndpointResult, bool) {
	for _, e := range r.Reads {
		if e.Name == name {
			return e, true
		}
	}
	return EndpointResult{}, false
}

// inboxUser is a user with a token.
type inboxUser struct{ tenant, user string }

func inboxUserID(u int) string { return "user-" + fmt.Sprintf("%05d", u) }

// RunInbox runs the notification centre benchmark, in the steps
// InboxScenario lists: a database of its own with the tenants, their token
// keys and the notifications loaded; the API served in this process; then
// the lone reader, the concurrent readers, the writers and the check.
func RunInbox(ctx context.Context, env Env, sc InboxScenario) (res InboxResult, err error) {
	sc.setDefaults()
	res.Scenario = sc
	if err := sc.Validate(); err != nil {
		return res, err
	}
	logf := env.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	name := fmt.Sprintf("herald_bench_inbox_%d_%d", time.Now().Unix(), os.Getpid())
	dbURL, pool, dropDB, err := heraldDatabase(ctx, env.AdminDatabaseURL, name, 4, 0)
	if err != nil {
		return res, err
	}
	if env.Keep {
		res.Database = name
	} else {
		defer func() { _ = dropDB() }()
	}
	defer pool.Close()

	keys, err := inboxTenants(ctx, pool, sc)
	if err != nil {
		return res, err
	}
	if err := loadInbox(ctx, pool, sc, &res, logf); err != nil {
		return res, err
	}
	users := make([]inboxUser, 0, sc.Users)
	for t := range sc.Tenants {
		for u := range sc.Users / sc.Tenants {
			users = append(users, inboxUser{adminTenant(t), inboxUserID(u)})
		}
	}
	api, err := serveInbox(ctx, sc, dbURL, keys, users)
	if err != nil {
		return res, err
	}
	defer api.close()

	// 1. One reader alone.
	if res.Baseline, err = api.baseline(ctx, sc, logf); err != nil {
		return res, err
	}
	// 2. The concurrent readers.
	if err := api.readers(ctx, sc, &res, logf); err != nil {
		return res, err
	}
	// 3. The writers, on notifications sampled beforehand.
	won, readIDs, err := api.writers(ctx, pool, sc, &res, logf)
	if err != nil {
		return res, err
	}
	// 4. The state the writes left.
	res.Check, err = checkInbox(ctx, pool, won, readIDs)
	if err != nil {
		return res, err
	}
	for _, e := range append(append(res.Baseline[:len(res.Baseline):len(res.Baseline)], res.Reads...), res.Writes...) {
		res.Failed += e.Failed
	}
	return res, nil
}

// inboxTenants creates the scenario's tenants, the extra projects of the
// first few, and an HS256 token key each.
func inboxTenants(ctx context.Context, pool *pgxpool.Pool, sc InboxScenario) (map[string]store.TokenKey, error) {
	keys := map[string]store.TokenKey{}
	for t := range sc.Tenants {
		tenant := adminTenant(t)
		if err := store.EnsureTenant(ctx, pool, tenant, "Inbox benchmark "+strconv.Itoa(t)); err != nil {
			return nil, err
		}
		if t < adminProjectTenants {
			for _, p := range adminExtraProjects {
				if err := store.EnsureProject(ctx, pool, tenant, p, p); err != nil {
					return nil, err
				}
			}
		}
		secret, err := auth.NewSecret()
		if err != nil {
			return nil, err
		}
		k := store.TokenKey{TenantID: tenant, Kid: "inbox-bench", Alg: "HS256", Issuer: "https://inbox-bench.example", Key: secret}
		if err := store.AddTokenKey(ctx, pool, k); err != nil {
			return nil, err
		}
		keys[tenant] = k
	}
	return keys, nil
}

// loadInbox inserts the notifications, shared ones included, fills the
// counters, vacuums and records how long each took and the table's size.
func loadInbox(ctx context.Context, pool *pgxpool.Pool, sc InboxScenario, res *InboxResult, logf func(string, ...any)) error {
	res.SharedRows = sc.SharedEvents * sc.Sharers
	logf("inbox: inserting %s notifications (%s shared: %s events × %d sharers) of %s users in %d tenants, %d days",
		num(float64(sc.Rows)), num(float64(res.SharedRows)), num(float64(sc.SharedEvents)), sc.Sharers, num(float64(sc.Users)), sc.Tenants, sc.Days)
	now := time.Now().UTC()
	start := time.Now()
	if err := loadNotifications(ctx, pool, AdminScenario{Rows: sc.Rows - res.SharedRows, Tenants: sc.Tenants,
		UsersPerTenant: sc.Users / sc.Tenants, Days: sc.Days}, now); err != nil {
		return err
	}
	if err := loadShared(ctx, pool, sc, now); err != nil {
		return err
	}
	res.Load = time.Since(start)
	start = time.Now()
	if err := fillCounters(ctx, pool); err != nil {
		return err
	}
	res.Counters = time.Since(start)
	// VACUUM as well as ANALYZE: the rows are as the daemon's tables are
	// in steady state (hint bits set, visibility map current), and
	// autovacuum does not start on the fresh million rows mid-measurement.
	start = time.Now()
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) notifications, notification_counters, notification_actions`); err != nil {
		return fmt.Errorf("bench: inbox: vacuum: %w", err)
	}
	res.Vacuum = time.Since(start)
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(relid)), 0)::bigint FROM pg_partition_tree('notifications') WHERE isleaf`).Scan(&res.TableBytes); err != nil {
		return fmt.Errorf("bench: inbox: table size: %w", err)
	}
	logf("inbox: loaded in %s, counters in %s, VACUUM (ANALYZE) in %s; %s with indexes", res.Load.Round(100*time.Millisecond),
		res.Counters.Round(100*time.Millisecond), res.Vacuum.Round(100*time.Millisecond), mib(res.TableBytes))
	return nil
}

// inboxAPI is the real public API served in this process on a loopback
// listener, with the daemon's pools, and a client of it.
type inboxAPI struct {
	d     config.Daemon
	cl    *inboxClient
	keys  map[string]store.TokenKey
	users []inboxUser
	// close shuts the API down and closes its pools.
	close func()
}

// serveInbox serves the public API on the database at dbURL.
func serveInbox(ctx context.Context, sc InboxScenario, dbURL string, keys map[string]store.TokenKey, users []inboxUser) (*inboxAPI, error) {
	d := config.DefaultDaemon()
	d.Database.URL, d.Database.APIMaxConns = dbURL, sc.APIConns
	// A throw-away database on the benchmark's cluster: the pools log in
	// as its owner, which costs what a login of their own would.
	d.Database.AllowOwnerLogin = true
	d.HTTP.RateLimit = httpguard.RateLimits{} // the benchmark is the only client
	pools, err := server.OpenPools(ctx, d.Database)
	if err != nil {
		return nil, err
	}
	// The tokens carry the deployment's own audience, as a backend's would.
	if d.Auth.Audience, err = auth.ResolveAudience(ctx, pools.Worker, d.Auth); err != nil {
		pools.Close()
		return nil, err
	}
	pub, err := server.PublicAPI(ctx, d, pools, nil, func() *rules.RuleSet { return nil }, hclog.NewNullLogger())
	if err != nil {
		pools.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pools.Close()
		return nil, err
	}
	srv := &http.Server{Handler: pub.Handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	conns := sc.Readers + sc.Writers
	cl := &inboxClient{base: "http://" + ln.Addr().String(), http: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute, DisableCompression: true}}}
	return &inboxAPI{d: d, cl: cl, keys: keys, users: users, close: func() {
		cl.http.CloseIdleConnections()
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = srv.Shutdown(c)
		pools.Close()
	}}, nil
}

// tokens issues a fresh token for every user: each phase gets its own, so
// that none expires within a phase.
func (a *inboxAPI) tokens() (map[inboxUser]string, error) {
	out := make(map[inboxUser]string, len(a.users))
	at := time.Now()
	for _, u := range a.users {
		tok, err := auth.Issue(a.keys[u.tenant], a.d.Auth.Audience, auth.User{UserID: u.user, UserType: "STAFF"}, a.d.Auth.MaxTokenLifetime, at)
		if err != nil {
			return nil, err
		}
		out[u] = tok
	}
	return out, nil
}

// baseline has one reader alone send sc.Baseline rounds: the service time
// of each read endpoint without queueing.
func (a *inboxAPI) baseline(ctx context.Context, sc InboxScenario, logf func(string, ...any)) ([]EndpointResult, error) {
	toks, err := a.tokens()
	if err != nil {
		return nil, err
	}
	logf("inbox: one reader alone: %d rounds", sc.Baseline)
	base := newReadEndpoints(sc.Limit)
	rng := rand.New(rand.NewPCG(7, 0))
	for range sc.Baseline {
		u := a.users[rng.IntN(len(a.users))]
		for _, e := range base {
			if err := a.cl.read(ctx, e, toks[u], true); err != nil {
				return nil, err
			}
		}
	}
	var out []EndpointResult
	for _, e := range base {
		out = append(out, e.result(0))
	}
	return out, nil
}

// readers runs sc.Readers concurrent readers over random users, Warmup
// unmeasured and then ReadFor measured, and records their endpoints, rate
// and CPU in res.
func (a *inboxAPI) readers(ctx context.Context, sc InboxScenario, res *InboxResult, logf func(string, ...any)) error {
	toks, err := a.tokens()
	if err != nil {
		return err
	}
	logf("inbox: %d readers: %s unmeasured, then %s measured", sc.Readers, sc.Warmup, sc.ReadFor)
	reads := newReadEndpoints(sc.Limit)
	begin := time.Now()
	measureFrom, end := begin.Add(sc.Warmup), begin.Add(sc.Warmup+sc.ReadFor)
	var cpuFrom atomic.Int64
	cpuTimer := time.AfterFunc(sc.Warmup, func() { cpuFrom.Store(int64(selfCPU())) })
	var wg sync.WaitGroup
	errs := make(chan error, sc.Readers)
	for r := range sc.Readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for {
				at := time.Now()
				if !at.Before(end) || ctx.Err() != nil {
					return
				}
				u := a.users[rng.IntN(len(a.users))]
				for _, e := range reads {
					if err := a.cl.read(ctx, e, toks[u], !at.Before(measureFrom)); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	cpuTimer.Stop()
	res.ReadCPU = (selfCPU() - time.Duration(cpuFrom.Load())).Seconds() / sc.ReadFor.Seconds()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	answered := 0
	for _, e := range reads {
		r := e.result(sc.ReadFor)
		res.Reads = append(res.Reads, r)
		answered += r.Latency.Count
	}
	res.ReadsPerSec = float64(answered) / sc.ReadFor.Seconds()
	logf("inbox: %s reads/s", num(res.ReadsPerSec))
	return nil
}

// writers runs sc.Writers concurrent writers that mark unread
// notifications read and act on shared ones, both sampled beforehand, for
// WriteFor or MaxWrites requests, and records their endpoints and rate in
// res. It returns how many actions were answered 200 and the ids of the
// notifications answered 200 to read.
func (a *inboxAPI) writers(ctx context.Context, pool *pgxpool.Pool, sc InboxScenario, res *InboxResult, logf func(string, ...any)) (int, []string, error) {
	unread, err := sampleNotes(ctx, pool, `read_at IS NULL AND archived_at IS NULL`, sc.MaxWrites)
	if err != nil {
		return 0, nil, err
	}
	shared, err := sampleNotes(ctx, pool, `share_key IS NOT NULL`, res.SharedRows)
	if err != nil {
		return 0, nil, err
	}
	toks, err := a.tokens()
	if err != nil {
		return 0, nil, err
	}
	logf("inbox: %d writers: up to %s or %s writes, %.0f %% actions", sc.Writers, sc.WriteFor, num(float64(sc.MaxWrites)), sc.ActionShare*100)
	readOp := &endpoint{name: "read", request: "POST /v1/inbox/{id}/read", lat: &Latencies{}}
	actOp := &endpoint{name: "action", request: "POST /v1/inbox/{id}/actions", lat: &Latencies{}}
	var nextRead, nextAct, writes atomic.Int64
	var readIDs []string
	var readMu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, sc.Writers)
	begin := time.Now()
	end := begin.Add(sc.WriteFor)
	for w := range sc.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for time.Now().Before(end) && ctx.Err() == nil && writes.Add(1) <= int64(sc.MaxWrites) {
				if len(shared) > 0 && rng.Float64() < sc.ActionShare {
					n := shared[int(nextAct.Add(1)-1)%len(shared)]
					if err := a.cl.act(ctx, actOp, toks[n.inboxUser], n.id); err != nil {
						errs <- err
						return
					}
					continue
				}
				i := int(nextRead.Add(1) - 1)
				if i >= len(unread) {
					return
				}
				n := unread[i]
				ok, err := a.cl.markRead(ctx, readOp, toks[n.inboxUser], n.id)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					readMu.Lock()
					readIDs = append(readIDs, n.id)
					readMu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	res.WriteTime = time.Since(begin)
	close(errs)
	if err := <-errs; err != nil {
		return 0, nil, err
	}
	answered := 0
	for _, e := range []*endpoint{readOp, actOp} {
		r := e.result(res.WriteTime)
		res.Writes = append(res.Writes, r)
		answered += r.Latency.Count
	}
	res.WritesPerSec = float64(answered) / res.WriteTime.Seconds()
	logf("inbox: %s writes/s over %s", num(res.WritesPerSec), res.WriteTime.Round(100*time.Millisecond))
	return int(actOp.won.Load()), readIDs, nil
}

// loadShared inserts the shared notifications: sc.SharedEvents events of
// random tenants at random times over sc.Days, each to sc.Sharers users of
// its tenant spread evenly from a random one, with the event id as share
// key as the relay writes them (a rule with shared = true), unread.
func loadShared(ctx context.Context, pool *pgxpool.Pool, sc InboxScenario, now time.Time) error {
	if sc.SharedEvents == 0 {
		return nil
	}
	tenants := make([]string, sc.Tenants)
	for t := range tenants {
		tenants[t] = adminTenant(t)
	}
	perTenant := sc.Users / sc.Tenants
	span := (time.Duration(sc.Days) * 24 * time.Hour).Seconds()
	if err := ensureNotificationMonths(ctx, pool, sc.Days, now); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT setseed(0.24)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO notifications (notification_id, tenant_id, project_id, event_id, user_id,
				event_type, title, body, severity, share_key, created_at)
			SELECT (lpad(to_hex((extract(epoch FROM at) * 1000)::bigint), 12, '0') || '7' || substr(h, 1, 3)
					|| '8' || substr(h, 4, 15))::uuid,
				($2::text[])[1 + t], 'default', 'inbox-bench-shared-' || e,
				'user-' || lpad(((u + k * $4::int) % $3::int)::text, 5, '0'),
				'RESERVATION', 'Reservation ' || e, 'A reservation every manager of ' || ($2::text[])[1 + t]
					|| ' may confirm (shared event ' || e || ')',
				'warning', 'inbox-bench-shared-' || e, at
			FROM (SELECT e, floor(random() * cardinality($2::text[]))::int AS t, floor(random() * $3::int)::int AS u,
					$6::timestamptz - random() * $7::float8 * interval '1 second' AS at
				FROM generate_series(1, $1::int) AS e
				OFFSET 0) g,
				generate_series(0, $5::int - 1) AS k,
				md5('shared-' || e || '-' || k) AS h`,
			sc.SharedEvents, tenants, perTenant, max(1, perTenant/sc.Sharers), sc.Sharers, now, span)
		return err
	})
	if err != nil {
		return fmt.Errorf("bench: inbox: insert shared notifications: %w", err)
	}
	return nil
}

// fillCounters writes the unread counters of every user and project from
// the rows, as the relay's inserts would have left them.
func fillCounters(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `INSERT INTO notification_counters (tenant_id, user_id, project_id, unread)
		SELECT tenant_id, user_id, project_id, count(*) FILTER (WHERE read_at IS NULL AND archived_at IS NULL)
		FROM notifications GROUP BY tenant_id, user_id, project_id`)
	if err != nil {
		return fmt.Errorf("bench: inbox: counters: %w", err)
	}
	return nil
}

// sampledNote is a notification and the user it belongs to.
type sampledNote struct {
	inboxUser
	id string
}

// sampleNotes returns up to n notifications matching where, in an order
// that is random but the same every run.
func sampleNotes(ctx context.Context, pool *pgxpool.Pool, where string, n int) ([]sampledNote, error) {
	rows, err := pool.Query(ctx, `SELECT tenant_id, user_id, notification_id::text FROM notifications
		WHERE `+where+` ORDER BY md5(notification_id::text) LIMIT $1`, n)
	if err != nil {
		return nil, fmt.Errorf("bench: inbox: sample notifications: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sampledNote, error) {
		var s sampledNote
		err := r.Scan(&s.tenant, &s.user, &s.id)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("bench: inbox: sample notifications: %w", err)
	}
	return out, nil
}

// checkInbox checks the state the writes left: no counter drifted from
// its rows (store.RepairCounters, rolled back), one action row per action
// answered 200, every sharer of an acted-on notification has it read, and
// every notification answered 200 to read is read.
func checkInbox(ctx context.Context, pool *pgxpool.Pool, won int, readIDs []string) (InboxCheck, error) {
	c := InboxCheck{Won: won}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return c, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	drift, err := store.RepairCounters(ctx, tx, "")
	if err != nil {
		return c, err
	}
	c.Drift = len(drift)
	err = tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM notification_counters), (SELECT count(*) FROM notification_actions),
			(SELECT count(*) FROM notifications n JOIN notification_actions a ON a.tenant_id = n.tenant_id AND a.share_key = n.share_key
				WHERE n.read_at IS NULL),
			(SELECT count(*) FROM notifications WHERE notification_id = ANY($1::uuid[]) AND read_at IS NULL)`, readIDs).
		Scan(&c.Counters, &c.Actions, &c.UnreadHandled, &c.UnreadAnswered)
	if err != nil {
		return c, fmt.Errorf("bench: inbox: check: %w", err)
	}
	c.OK = c.Drift == 0 && c.Actions == c.Won && c.UnreadHandled == 0 && c.UnreadAnswered == 0
	var problems []string
	if c.Drift > 0 {
		d := drift[0]
		problems = append(problems, fmt.Sprintf("%d of %s counters drifted from their rows (e.g. %s/%s/%s says %d, the rows %d)",
			c.Drift, num(float64(c.Counters)), d.TenantID, d.UserID, d.ProjectID, d.Was, d.Is))
	}
	if c.Actions != c.Won {
		problems = append(problems, fmt.Sprintf("%d actions answered 200 but %d action rows", c.Won, c.Actions))
	}
	if c.UnreadHandled > 0 {
		problems = append(problems, fmt.Sprintf("%d notifications unread although acted on", c.UnreadHandled))
	}
	if c.UnreadAnswered > 0 {
		problems = append(problems, fmt.Sprintf("%d notifications answered read are unread", c.UnreadAnswered))
	}
	if c.OK {
		c.Detail = fmt.Sprintf("exactly right: store.RepairCounters found no drift in %s counters; %s actions won, %s action rows; "+
			"every sharer of an acted-on notification and every one of the %s answered read has it read",
			num(float64(c.Counters)), num(float64(c.Won)), num(float64(c.Actions)), num(float64(len(readIDs))))
	} else {
		c.Detail = "NOT exactly right: " + strings.Join(problems, "; ")
	}
	return c, nil
}

// endpoint gathers one endpoint's measurements; safe for concurrent use.
type endpoint struct {
	name, request, path string
	lat                 *Latencies
	items               atomic.Int64
	failed, conflicts   atomic.Int64
	won                 atomic.Int64
	mu                  sync.Mutex
	detail              string
}

func newReadEndpoints(limit int) []*endpoint {
	list := "/v1/inbox?limit=" + strconv.Itoa(limit)
	return []*endpoint{
		{name: "unread-count", request: "GET /v1/inbox/unread-count", path: "/v1/inbox/unread-count", lat: &Latencies{}},
		{name: "bell", request: "GET /v1/inbox/bell", path: "/v1/inbox/bell", lat: &Latencies{}},
		{name: "list", request: "GET " + list, path: list, lat: &Latencies{}},
	}
}

// fail counts a request not answered as expected.
func (e *endpoint) fail(status int, body []byte) {
	e.failed.Add(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.detail == "" {
		e.detail = fmt.Sprintf("%d %s", status, abbreviate(strings.TrimSpace(string(body)), 200))
	}
}

// result summarizes the endpoint over a phase of length over (0: no rate).
func (e *endpoint) result(over time.Duration) EndpointResult {
	r := EndpointResult{Name: e.name, Request: e.request, Latency: summarize(e.lat), Items: e.items.Load(),
		Conflicts: int(e.conflicts.Load()), Failed: int(e.failed.Load()), Detail: e.detail}
	if over > 0 {
		r.PerSec = float64(r.Latency.Count) / over.Seconds()
	}
	return r
}

// inboxClient sends the benchmark's requests as end users.
type inboxClient struct {
	base string
	http *http.Client
}

// do sends one request and returns how long it took until its body was
// read. Transport errors are errors unless ctx ended.
func (c *inboxClient) do(ctx context.Context, method, path, token string, body []byte) (time.Duration, int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("bench: inbox: %s %s: %w", method, path, err)
	}
	out, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	_ = resp.Body.Close()
	if err != nil {
		return 0, 0, nil, fmt.Errorf("bench: inbox: %s %s: %w", method, path, err)
	}
	return took, resp.StatusCode, out, nil
}

// inboxAnswer is what the benchmark reads of the read endpoints' answers.
type inboxAnswer struct {
	Unread int64             `json:"unread"`
	Items  []json.RawMessage `json:"items"`
}

// read sends one GET of e, recording it when measure is set.
func (c *inboxClient) read(ctx context.Context, e *endpoint, token string, measure bool) error {
	took, status, body, err := c.do(ctx, http.MethodGet, e.path, token, nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if status != http.StatusOK {
		e.fail(status, body)
		return nil
	}
	if !measure {
		return nil
	}
	var a inboxAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return fmt.Errorf("bench: inbox: %s answer: %w", e.request, err)
	}
	e.lat.Add(took)
	if e.name == "unread-count" {
		e.items.Add(a.Unread)
	} else {
		e.items.Add(int64(len(a.Items)))
	}
	return nil
}

// markRead marks a notification read and reports whether it was answered
// 200.
func (c *inboxClient) markRead(ctx context.Context, e *endpoint, token, id string) (bool, error) {
	took, status, body, err := c.do(ctx, http.MethodPost, "/v1/inbox/"+id+"/read", token, nil)
	if err != nil {
		if ctx.Err() != nil {
			return false, nil
		}
		return false, err
	}
	if status != http.StatusOK {
		e.fail(status, body)
		return false, nil
	}
	e.lat.Add(took)
	e.items.Add(1)
	return true, nil
}

// actionBody is the action every writer takes.
var actionBody = []byte(`{"type":"CONFIRMED","data":{"by":"inbox-bench"}}`)

// act takes an action on a shared notification: 200 is a win, 409 a
// sharer that acted first.
func (c *inboxClient) act(ctx context.Context, e *endpoint, token, id string) error {
	took, status, body, err := c.do(ctx, http.MethodPost, "/v1/inbox/"+id+"/actions", token, actionBody)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	switch status {
	case http.StatusOK:
		e.won.Add(1)
		e.items.Add(1)
	case http.StatusConflict:
		e.conflicts.Add(1)
	default:
		e.fail(status, body)
		return nil
	}
	e.lat.Add(took)
	return nil
}
