// Package server wires `herald serve`: rules (hot-reloaded), the database
// pool, the broker connection and topology, the plugin host, the relay,
// the publisher, the listeners, the maintenance stage (lost attempts,
// deferred rows, planner statistics) and the HTTP APIs.
package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/admin"
	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/cors"
	"github.com/heraldhq/herald/core/internal/delivery"
	"github.com/heraldhq/herald/core/internal/digest"
	"github.com/heraldhq/herald/core/internal/httpguard"
	"github.com/heraldhq/herald/core/internal/inbox"
	"github.com/heraldhq/herald/core/internal/live"
	"github.com/heraldhq/herald/core/internal/maintenance"
	"github.com/heraldhq/herald/core/internal/me"
	"github.com/heraldhq/herald/core/internal/metrics"
	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/relay"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/secret"
	"github.com/heraldhq/herald/core/internal/source"
	"github.com/heraldhq/herald/core/internal/statusev"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/webinbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Topology derives the broker topology from the config: the configured
// queues, or one queue per channel of the rules.
func Topology(d config.Daemon, rs *rules.RuleSet) broker.Topology {
	t := broker.Topology{Exchange: d.AMQP.Exchange}
	if len(d.AMQP.Queues) == 0 {
		var names []string
		for _, c := range rs.Channels() {
			names = append(names, c.Name)
		}
		t.Queues = broker.DefaultQueues(names)
		for i := range t.Queues {
			t.Queues[i].Quorum = d.AMQP.QueueType == broker.QueueQuorum
		}
		return t
	}
	names := make([]string, 0, len(d.AMQP.Queues))
	for n := range d.AMQP.Queues {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		q := d.AMQP.Queues[n]
		bq := broker.Queue{Name: n, Bindings: q.Bindings, Prefetch: q.Prefetch, Concurrency: q.Concurrency,
			Quorum: q.Quorum || d.AMQP.QueueType == broker.QueueQuorum}
		if q.Quorum {
			bq.Setting = "amqp.queue." + n + ".quorum"
		}
		t.Queues = append(t.Queues, bq)
	}
	return t
}

// Pools are the daemon's connection pools, one per database role.
type Pools struct {
	// Worker serves the pipeline (relay, publisher, listeners, maintenance):
	// every tenant.
	Worker *pgxpool.Pool
	// API serves the public HTTP API, bound to one tenant per transaction
	// by row-level security.
	API *pgxpool.Pool
	// Admin serves the superadmin API: every tenant, read only.
	Admin *pgxpool.Pool
	// Warnings are what database.allow_owner_login let through: herald
	// serve logs them, herald doctor shows them.
	Warnings []string
}

// Close closes every pool.
func (p *Pools) Close() {
	for _, pool := range []*pgxpool.Pool{p.Worker, p.API, p.Admin} {
		if pool != nil {
			pool.Close()
		}
	}
}

// OpenPools connects the three pools and refuses roles that do not fit
// their part: the API's must be bound by row-level security, the worker's
// and the superadmin's must be members of their group roles, and the API
// and the superadmin pools must log in as roles of their own that cannot
// leave their group (store.CheckLogin), unless db.AllowOwnerLogin, which
// turns that refusal into a line of Pools.Warnings.
func OpenPools(ctx context.Context, db store.Config) (*Pools, error) {
	p := &Pools{}
	var err error
	fail := func(err error) (*Pools, error) {
		p.Close()
		return nil, err
	}
	if p.Worker, err = store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: db.MaxConns, Role: db.WorkerRole}); err != nil {
		return fail(fmt.Errorf("database.url: %w", err))
	}
	if err := p.Worker.Ping(ctx); err != nil {
		return fail(fmt.Errorf("database.url (role %q): %w%s", db.WorkerRole, err, tlsHint(err)))
	}
	if err := store.CheckRole(ctx, p.Worker, store.RoleWorker, "database.worker_role"); err != nil {
		return fail(err)
	}
	apiURL, apiKey := db.APIURL, "database.api_url"
	if apiURL == "" {
		apiURL, apiKey = db.URL, "database.api_url (empty: database.url)"
	}
	if p.API, err = store.NewPoolWith(ctx, apiURL, store.PoolOptions{MaxConns: db.APIMaxConns, Role: db.APIRole, Name: "herald-api"}); err != nil {
		return fail(fmt.Errorf("database.api_url: %w", err))
	}
	if err := p.API.Ping(ctx); err != nil {
		return fail(fmt.Errorf("%s (role %q): %w%s", apiKey, db.APIRole, err, tlsHint(err)))
	}
	if err := store.CheckAPIRole(ctx, p.API, "database.api_url/database.api_role"); err != nil {
		return fail(fmt.Errorf("refusing to start: %w", err))
	}
	if err := p.checkLogin(ctx, p.API, store.RoleAPI, apiKey, db.AllowOwnerLogin); err != nil {
		return fail(err)
	}
	adminURL, adminKey := db.AdminURL, "database.admin_url"
	if adminURL == "" {
		adminURL, adminKey = db.URL, "database.admin_url (empty: database.url)"
	}
	if p.Admin, err = store.NewPoolWith(ctx, adminURL, store.PoolOptions{MaxConns: 4, Role: db.AdminRole, Name: "herald-admin"}); err != nil {
		return fail(fmt.Errorf("database.admin_url: %w", err))
	}
	if err := p.Admin.Ping(ctx); err != nil {
		return fail(fmt.Errorf("%s (role %q): %w%s", adminKey, db.AdminRole, err, tlsHint(err)))
	}
	if err := store.CheckAdminRole(ctx, p.Admin, "database.admin_role"); err != nil {
		return fail(fmt.Errorf("refusing to start: %w", err))
	}
	if err := p.checkLogin(ctx, p.Admin, store.RoleAdmin, adminKey, db.AllowOwnerLogin); err != nil {
		return fail(err)
	}
	return p, nil
}

// checkLogin refuses pool's login role (store.CheckLogin), or, when allow
// (database.allow_owner_login), notes it in p.Warnings.
func (p *Pools) checkLogin(ctx context.Context, pool *pgxpool.Pool, group, key string, allow bool) error {
	err := store.CheckLogin(ctx, pool, group, key)
	if err == nil {
		return nil
	}
	if !allow {
		return fmt.Errorf("refusing to start: %w", err)
	}
	var ins *store.InsecureLoginError
	if !errors.As(err, &ins) {
		return err
	}
	p.Warnings = append(p.Warnings, fmt.Sprintf("database.allow_owner_login is set: %s logs in as role %q, which %s; "+
		"a query SQL injection made could RESET ROLE and reach every tenant", key, ins.Login, ins.What))
	return nil
}

// tlsHint says what to check when err is a refused server certificate.
func tlsHint(err error) string {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
	)
	if errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) {
		return " (the server's TLS certificate was refused: check sslrootcert in the URL, and that the certificate names the URL's host)"
	}
	return ""
}

// Public is the public HTTP API and the live gateway behind it.
type Public struct {
	// Handler serves the tenants' routes on the API pool, the
	// superadmin's under /v1/admin/ on the admin pool, the live
	// gateway under /v1/live and the web inbox page at /inbox.
	Handler http.Handler
	// Live is the live gateway; Run it with the daemon's stages.
	Live *live.Server
	// Verifier checks end users' tokens.
	Verifier *auth.Verifier
	// Actions publishes winning inbox actions to herald.actions; Run it
	// with the daemon's stages.
	Actions *inbox.Publisher
}

// PublicAPI builds the public API. conn is the daemon's broker (the live
// gateway consumes from it once Live runs).
func PublicAPI(ctx context.Context, d config.Daemon, pools *Pools, conn *broker.Conn, ruleset func() *rules.RuleSet, log hclog.Logger) (*Public, error) {
	return publicAPI(ctx, d, pools, conn, ruleset, log, nil, nil)
}

// publicAPI is PublicAPI counting the events it accepts in m (nil: none),
// its /readyz answering ready (nil: Readiness(pools, conn)).
func publicAPI(ctx context.Context, d config.Daemon, pools *Pools, conn *broker.Conn, ruleset func() *rules.RuleSet, log hclog.Logger, m *metrics.Metrics,
	ready func(context.Context) []string) (*Public, error) {
	cursorKey, err := store.Secret(ctx, pools.Worker, "cursor")
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	authCfg := d.Auth
	if authCfg.Audience, err = auth.ResolveAudience(ctx, pools.Worker, d.Auth); err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	verifier := auth.NewVerifier(pools.API, authCfg)
	gw := live.New(LiveConfig(d), pools.API, verifier, conn, log)
	gw.SetMetrics(m)
	apiSrv := api.New(pools.API, ruleset, log)
	if ready == nil {
		ready = Readiness(pools, conn)
	}
	apiSrv.Ready = readyErr(ready)
	apiSrv.Metrics = m
	apiSrv.SetRateLimits(d.HTTP.RateLimit)
	apiSrv.SetCursorKey(cursorKey)
	apiSrv.SetWebhooks(api.WebhookPolicy{AllowLoopback: d.StatusEvents.WebhookAllowLoopback, Retention: d.StatusEvents.Retention})
	apiSrv.SetDirectoryLimits(api.DirectoryLimits{MaxBatchEntries: d.HTTP.DirectoryBatch.MaxEntries, MaxBatchBytes: d.HTTP.DirectoryBatch.MaxBytes})
	apiSrv.Mount("/v1/admin/", admin.New(pools.Admin, cursorKey, log).Handler())
	apiSrv.Mount("/v1/live", gw.Handler())
	apiSrv.Mount("/v1/live/", gw.Handler())
	actions := inbox.NewPublisher(pools.Worker, conn, log)
	box := inbox.New(pools.API, verifier, cursorKey, gw, actions.Kick, log).Handler()
	apiSrv.Mount("/v1/inbox", box)
	apiSrv.Mount("/v1/inbox/", box)
	apiSrv.Mount("GET /v1/actions", apiSrv.Authenticated(inbox.Feed(pools.API, log)))
	apiSrv.Mount("/v1/me/", me.New(pools.API, verifier, ruleset, log).Handler())
	origins := cors.New(pools.API, verifier, log)
	apiSrv.CORS = origins.Handler
	gw.SetOrigins(origins)
	page := webinbox.HandlerFor(authCfg.Audience, origins.FrameOrigins)
	apiSrv.Mount(webinbox.Path, page)
	apiSrv.Mount(webinbox.Path+"/", page)
	return &Public{Handler: apiSrv.Handler(), Live: gw, Verifier: verifier, Actions: actions}, nil
}

// LiveConfig is d's live settings with max_sessions at most three
// quarters of http.max_conns (and at least 1): the last quarter is the
// reserve that serves POST /v1/events, the inbox API and the health
// checks however many sessions are open.
func LiveConfig(d config.Daemon) live.Config {
	c := d.Live
	if d.HTTP.MaxConns > 0 {
		c.MaxSessions = max(1, min(c.MaxSessions, d.HTTP.MaxConns*3/4))
	}
	return c
}

// AdminHandler is the admin API's routes: the plugin host's under /admin/,
// POST /admin/v1/rules/reload (reload), and /debug/pprof/ when pprof is
// set; any other path is a 404 problem document. NewAdminServer puts them
// behind the admin guard.
func AdminHandler(host *pluginhost.Host, reload func() error, pprofOn bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/admin/", pluginhost.AdminHandler(host))
	mux.HandleFunc("POST /admin/v1/rules/reload", func(w http.ResponseWriter, r *http.Request) {
		if err := reload(); err != nil {
			api.Problem(w, http.StatusUnprocessableEntity, "rules refused", err.Error()+"; the last good rules keep serving", "")
			return
		}
		api.WriteJSON(w, http.StatusOK, map[string]string{"status": "reloaded"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		api.Problem(w, http.StatusNotFound, "not found", "no route for "+r.Method+" "+r.URL.Path+" on the admin listener", "")
	})
	if pprofOn {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// CountersRepairHandler serves POST /admin/v1/counters/repair[?tenant=T]
// on the admin listener: it recomputes the unread counters from the
// notifications (as the pipeline's role, every tenant) and answers the
// drift it fixed.
func CountersRepairHandler(pool *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := r.URL.Query().Get("tenant")
		if tenant != "" {
			if err := store.ValidID("tenant", tenant); err != nil {
				api.Problem(w, http.StatusBadRequest, "invalid tenant", err.Error(), "tenant")
				return
			}
		}
		var drift []store.Drift
		err := pgx.BeginFunc(r.Context(), pool, func(tx pgx.Tx) error {
			var err error
			drift, err = store.RepairCounters(r.Context(), tx, tenant)
			return err
		})
		if err != nil {
			api.Problem(w, http.StatusInternalServerError, "repair failed", err.Error(), "")
			return
		}
		if drift == nil {
			drift = []store.Drift{}
		}
		api.WriteJSON(w, http.StatusOK, map[string]any{"fixed": len(drift), "drift": drift})
	})
}

// NewAPIServer listens on http.listen and returns the public API's server
// for h: bounded by c's timeouts, header size and connection caps (in all
// and per client address, idle connections closed early under pressure:
// httpguard.Listener), every response with the security headers.
func NewAPIServer(h http.Handler, c httpguard.Config, log hclog.Logger) (*http.Server, *httpguard.Listener, error) {
	ln, err := httpguard.Listen(c.Listen, c.Limits(false))
	if err != nil {
		return nil, nil, fmt.Errorf("http.listen: %w", err)
	}
	return ln.Track(httpguard.NewServer(httpguard.Headers(h), c.Limits(false), log.Named("http"))), ln, nil
}

// NewAdminServer listens on http.admin_listen and returns the admin API's
// server for h: bounded like the public one (with the admin write
// timeout), behind an AdminGuard for the bound address and token (nil:
// none), every response with the security headers.
func NewAdminServer(h http.Handler, c httpguard.Config, token []byte, log hclog.Logger) (*http.Server, net.Listener, error) {
	ln, err := httpguard.Listen(c.AdminListen, c.Limits(true))
	if err != nil {
		return nil, nil, fmt.Errorf("http.admin_listen: %w", err)
	}
	guard, err := httpguard.NewAdminGuard(ln.Addr(), c.AdminListen, token)
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("http.admin_listen: %w", err)
	}
	return ln.Track(httpguard.NewServer(httpguard.Headers(guard.Wrap(h)), c.Limits(true), log.Named("admin-http"))), ln, nil
}

// AdminToken reads http.admin_token_file; with none configured it returns
// nil, and warns when there is an admin listener (loopback only: Validate
// refuses a token-less admin API anywhere else).
func AdminToken(c httpguard.Config, log hclog.Logger) ([]byte, error) {
	if c.AdminListen == "" {
		return nil, nil
	}
	if c.AdminTokenFile == "" {
		log.Warn("the admin API has no token: any process on this machine can call it (plugin and rules reloads, pprof); set http.admin_token_file",
			"admin_listen", c.AdminListen)
		return nil, nil
	}
	tok, err := httpguard.ReadTokenFile(c.AdminTokenFile)
	if err != nil {
		return nil, fmt.Errorf("http.admin_token_file: %w", err)
	}
	return tok, nil
}

// PluginHostConfig is the plugin host's config: the daemon's plugins
// settings (pc), its logger and the channels of the rules.
func PluginHostConfig(pc pluginhost.Config, log hclog.Logger, channels []channel.Config) pluginhost.Config {
	pc.Logger, pc.Channels = log, channels
	return pc
}

// Run serves until ctx ends or SIGINT/SIGTERM arrives; SIGHUP reloads the
// rules. Every stage runs under one Supervisor: a stage that fails stops
// the daemon and Run returns its error. A stop is orderly, phase by phase
// (see Phase), within supervisor.shutdown_grace: the HTTP listeners close,
// the relay stops claiming, handoffs finish or are left due, listeners
// finish and record their in-flight sends, then the plugins are stopped
// and the liveness lock dropped. Past the grace period Run returns a
// *GraceError naming what still ran, without waiting for it. The plugin
// host registers the values of providers' secret fields with redact (nil:
// a redactor of its own), which should be the one log writes through.
func Run(ctx context.Context, d config.Daemon, log hclog.Logger, redact *secret.Redactor) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := d.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	for _, w := range d.Warnings {
		log.Warn("config: " + w)
	}
	if ml := ApplyMemoryLimit(d.Runtime, os.Getenv); ml.From != "" {
		log.Info("soft memory limit", "mib", ml.Bytes>>20, "from", ml.From)
	}
	adminToken, err := AdminToken(d.HTTP, log)
	if err != nil {
		return err
	}
	if len(d.Rules) == 0 {
		return errors.New("rules: no rules files configured (set rules = [...] or HERALD_RULES)")
	}
	watcher, err := rulesfile.NewWatcher(d.Rules, log.Named("rules"))
	if err != nil {
		return err
	}
	current := watcher.Current

	stopTracing, err := initTracing(ctx, d, log)
	if err != nil {
		return err
	}
	defer stopTracing()

	// After a shutdown that ran out of grace, stages may still use what
	// the deferred closes would wait for (a pool waits for its
	// connections): the process exits without them.
	abandoned := false
	pools, err := OpenPools(ctx, d.Database)
	if err != nil {
		return err
	}
	for _, w := range pools.Warnings {
		log.Warn(w)
	}
	if off, err := store.AutovacuumOff(ctx, pools.Worker); err == nil && off {
		log.Warn(store.AutovacuumWarning)
	}
	defer func() {
		if !abandoned {
			pools.Close()
		}
	}()
	pool := pools.Worker
	// One registry for the daemon, served on the admin listener; nothing
	// goes to the process-wide default one.
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)

	topo := Topology(d, current())
	amqpTLS, err := d.AMQP.TLSConfig()
	if err != nil {
		return err
	}
	conn := broker.DialNodes(d.AMQP.BrokerURLs(), amqpTLS, topo, log)
	defer func() {
		if !abandoned {
			conn.Close()
		}
	}()

	hostCfg := PluginHostConfig(d.Plugins, log, current().Channels())
	hostCfg.Redactor = redact
	hostCfg.Metrics = m
	host, err := pluginhost.New(hostCfg)
	if err != nil {
		return fmt.Errorf("plugins: %w", err)
	}
	defer func() {
		if !abandoned {
			_ = host.Close()
		}
	}()
	if err := host.Start(ctx); err != nil {
		return fmt.Errorf("plugins: %w", err)
	}
	// From here on the rules in force carry what the plugins declare
	// about their channels (class, user types).
	inForce := NewRulesInForce(watcher.Current, host.Declared)
	host.OnDeclared(inForce.Refresh)
	current = inForce.Current
	RegisterStateCollectors(reg, pool, host, conn)
	listener := delivery.NewListener(pool, conn, host, current, log, delivery.ListenerConfig{Lease: d.Retry.Lease, Metrics: m})
	watcher.OnChange(func(rs *rules.RuleSet) {
		if err := host.Reconfigure(rs.Channels()); err != nil {
			log.Error("plugin providers not reconfigured for the new rules", "error", err)
		}
		inForce.Refresh()
		// Channels the new rules add get their queue now (default
		// topology) or must match a configured binding.
		want := Topology(d, rs)
		added, err := conn.AddQueues(ctx, want.Queues)
		if err != nil {
			log.Error("declaring the queues of new channels failed; retried on the next connection", "error", err)
		}
		for _, q := range added {
			log.Info("queue added for a new channel", "queue", q.Name, "bindings", q.Bindings)
			listener.AddQueue(q)
		}
		topo := conn.Topology()
		for _, c := range rs.Channels() {
			if !topo.Routable(broker.RoutingKey("x", c.Name)) {
				log.Warn("no configured queue is bound for a channel of the new rules; its deliveries will fail as unroutable", "channel", c.Name)
			}
		}
	})

	// The daemon's liveness lock: peers take over its handoffs the moment
	// its session ends. It is dropped last, once every stage stopped.
	live, err := delivery.NewLiveness(ctx, pool.Config().ConnConfig, log)
	if err != nil {
		return err
	}
	live.LostTimeout = d.Supervisor.LivenessTimeout
	defer func() {
		if !abandoned {
			live.Close()
		}
	}()
	pubCfg := d.Publisher
	pubCfg.Metrics = m
	pub := delivery.NewPublisher(pool, conn, log, pubCfg)
	relayCfg := d.Relay
	relayCfg.Metrics = m
	var handoff *delivery.Handoff
	if d.Publisher.Handoff {
		handoff = delivery.NewHandoff(pool, conn, live, log, pubCfg, pub.Kick)
		relayCfg.Handoff = handoff
	}
	rl := relay.New(pool, current, pub.Kick, log, relayCfg)
	maint := maintenance.New(pool, d.Retry.PollInterval, pub.Kick, log)
	digestCfg := d.Digest
	digestCfg.Metrics = m
	digests := digest.New(pool, current, pub.Kick, log, digestCfg)

	// The sources' stage (services' own outboxes); a source that cannot
	// be reached degrades, it does not make the daemon unready.
	sources, err := source.NewStage(pool, d.Sources, log, source.NewMetrics(reg))
	if err != nil {
		return err
	}
	defer sources.Close()

	ready := Readiness(pools, conn, ProviderReadiness(host.Status))
	public, err := publicAPI(ctx, d, pools, conn, current, log, m, ready)
	if err != nil {
		return err
	}
	digests.Notifier = public.Live
	httpSrv, ln, err := NewAPIServer(public.Handler, d.HTTP, log)
	if err != nil {
		return err
	}
	ln.SetMetrics(m)
	var adminSrv *http.Server
	var adminLn net.Listener
	if d.HTTP.AdminListen != "" {
		mux := http.NewServeMux()
		mux.Handle("/", AdminHandler(host, watcher.Reload, d.HTTP.Pprof))
		mux.Handle("POST /admin/v1/counters/repair", CountersRepairHandler(pools.Worker))
		mux.Handle(AdminExplainPattern, ExplainHandler(pools.Worker, current))
		mux.Handle("GET "+AdminReadyPath, ReadyHandler(ready, watcher.Status, sources.Status))
		mux.Handle("GET "+MetricsPath, MetricsHandler(reg))
		adminSrv, adminLn, err = NewAdminServer(mux, d.HTTP, adminToken, log)
		if err != nil {
			ln.Close()
			return err
		}
	}

	// The monthly partitions ahead (and retention's drops) are the
	// daemon's own work: no cron.
	keeper := &PartitionKeeper{Pool: pool, Log: log.Named("partitions"), Every: time.Hour}
	if r, ok := RetentionFromConfig(d.Retention); ok {
		keeper.Retention = &r
	}
	// One supervisor runs every stage; the phases are the shutdown order.
	sup := NewSupervisor(log, d.Supervisor.ShutdownGrace)
	grace := d.Supervisor.ShutdownGrace
	sup.Add(PhaseIntake, "http", ServeStage(httpSrv, ln, grace))
	if adminSrv != nil {
		sup.Add(PhaseIntake, "admin http", ServeStage(adminSrv, adminLn, grace))
	}
	sup.Add(PhaseIntake, "rules watcher", watcher.Run)
	sup.Add(PhaseIntake, "live gateway", public.Live.Run)
	sup.Add(PhaseIntake, "action publisher", public.Actions.Run)
	sup.Add(PhaseIntake, "partition keeper", keeper.Run)
	sup.Add(PhaseIntake, "sources", sources.Run)
	sup.Add(PhaseRelay, "relay", rl.Run)
	if handoff != nil {
		sup.Add(PhasePublish, "handoff", handoff.Run)
	}
	sup.Add(PhasePublish, "publisher", pub.Run)
	sup.Add(PhasePublish, "status events (broker, webhooks)", statusev.New(pool, conn, d.StatusEvents, statusev.NewMetrics(reg), log).Run)
	sup.Add(PhasePublish, "maintenance (lost attempts, deferred rows, escalations, analyze)", maint.Run)
	sup.Add(PhasePublish, "digest flusher", digests.Run)
	sup.Add(PhaseDeliver, "listener", listener.Run)
	sup.Add(PhasePlugins, "plugin host", WaitThen(host.Close))
	// The broker connection reconnects inside; it closes once nothing
	// acks or publishes on it any more.
	sup.Add(PhasePlugins, "broker", WaitThen(func() error { conn.Close(); return nil }))
	sup.Add(PhasePlugins, "liveness", live.Run)
	adminAddr := ""
	if adminLn != nil {
		adminAddr = adminLn.Addr().String()
	}
	log.Info("herald serving", "http", ln.Addr().String(), "admin", adminAddr, "admin_token", adminToken != nil, "rules", d.Rules,
		"plugins", d.Plugins.Dir, "queues", topo.QueueNames())

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer func() { signal.Stop(hup); close(hup) }()
	go func() {
		for range hup {
			log.Info("SIGHUP: reloading rules")
			if err := watcher.Reload(); err != nil {
				log.Error("rules reload refused; the last good rules keep serving", "error", err)
			}
		}
	}()
	// A second SIGTERM or SIGINT during the shutdown stops waiting.
	running := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-running:
			return
		}
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(again)
		select {
		case <-again:
			sup.Hurry()
		case <-running:
		}
	}()
	err = sup.Run(ctx)
	close(running)
	var ge *GraceError
	abandoned = errors.As(err, &ge)
	if err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}
