// Package server wires `herald serve`: rules (hot-reloaded), the database
// pool, the broker connection and topology, the plugin host, the relay,
// the publisher, the listeners, the retry poller and the HTTP APIs.
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
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/admin"
	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/delivery"
	"github.com/heraldhq/herald/core/internal/outbox"
	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/secret"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5/pgxpool"
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
		return t
	}
	names := make([]string, 0, len(d.AMQP.Queues))
	for n := range d.AMQP.Queues {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		q := d.AMQP.Queues[n]
		t.Queues = append(t.Queues, broker.Queue{Name: n, Bindings: q.Bindings, Prefetch: q.Prefetch, Concurrency: q.Concurrency, Quorum: q.Quorum})
	}
	return t
}

// Pools are the daemon's connection pools, one per database role.
type Pools struct {
	// Worker serves the pipeline (relay, publisher, listeners, poller):
	// every tenant.
	Worker *pgxpool.Pool
	// API serves the public HTTP API, bound to one tenant per transaction
	// by row-level security.
	API *pgxpool.Pool
	// Admin serves the superadmin API: every tenant, read only.
	Admin *pgxpool.Pool
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
// and the superadmin's must be members of their group roles.
func OpenPools(ctx context.Context, db config.DatabaseConfig) (*Pools, error) {
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
	apiURL := db.APIURL
	if apiURL == "" {
		apiURL = db.URL
	}
	if p.API, err = store.NewPoolWith(ctx, apiURL, store.PoolOptions{MaxConns: db.APIMaxConns, Role: db.APIRole, Name: "herald-api"}); err != nil {
		return fail(fmt.Errorf("database.api_url: %w", err))
	}
	if err := p.API.Ping(ctx); err != nil {
		return fail(fmt.Errorf("database.api_url (role %q): %w%s", db.APIRole, err, tlsHint(err)))
	}
	if err := store.CheckAPIRole(ctx, p.API, "database.api_url/database.api_role"); err != nil {
		return fail(fmt.Errorf("refusing to start: %w", err))
	}
	if p.Admin, err = store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 4, Role: db.AdminRole, Name: "herald-admin"}); err != nil {
		return fail(fmt.Errorf("database.url: %w", err))
	}
	if err := p.Admin.Ping(ctx); err != nil {
		return fail(fmt.Errorf("database.url (role %q): %w%s", db.AdminRole, err, tlsHint(err)))
	}
	if err := store.CheckRole(ctx, p.Admin, store.RoleAdmin, "database.admin_role"); err != nil {
		return fail(err)
	}
	return p, nil
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

// APIHandler is the public HTTP API: the tenants' routes on the API pool
// and the superadmin's under /v1/admin/ on the admin pool.
func APIHandler(ctx context.Context, pools *Pools, ruleset func() *rules.RuleSet, log hclog.Logger) (http.Handler, error) {
	cursorKey, err := store.Secret(ctx, pools.Worker, "cursor")
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	apiSrv := api.New(pools.API, ruleset, log)
	apiSrv.Mount("/v1/admin/", admin.New(pools.Admin, cursorKey, log).Handler())
	return apiSrv.Handler(), nil
}

// Run serves until ctx ends or SIGINT/SIGTERM arrives; SIGHUP reloads the
// rules. It returns after an orderly shutdown: listeners finish and record
// in-flight sends, then plugins are stopped. The plugin host registers the
// values of providers' secret fields with redact (nil: a redactor of its
// own), which should be the one log writes through.
func Run(ctx context.Context, d config.Daemon, log hclog.Logger, redact *secret.Redactor) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	if len(d.Rules) == 0 {
		return errors.New("rules: no rules files configured (set rules = [...] or HERALD_RULES)")
	}
	watcher, err := config.NewRulesWatcher(d.Rules, log.Named("rules"))
	if err != nil {
		return err
	}
	current := watcher.Current

	pools, err := OpenPools(ctx, d.Database)
	if err != nil {
		return err
	}
	defer pools.Close()
	pool := pools.Worker

	topo := Topology(d, current())
	amqpTLS, err := d.AMQP.TLSConfig()
	if err != nil {
		return err
	}
	conn := broker.DialTLS(d.AMQP.URL, amqpTLS, topo, log)
	defer conn.Close()

	host, err := pluginhost.New(pluginhost.Config{Dir: d.Plugins.Dir, Logger: log, Channels: current().Channels(), Redactor: redact})
	if err != nil {
		return fmt.Errorf("plugins: %w", err)
	}
	defer host.Close()
	if err := host.Start(ctx); err != nil {
		return fmt.Errorf("plugins: %w", err)
	}
	listener := delivery.NewListener(pool, conn, host, current, log, delivery.ListenerConfig{Lease: d.Retry.Lease})
	watcher.OnChange(func(rs *rules.RuleSet) {
		if err := host.Reconfigure(rs.Channels()); err != nil {
			log.Error("plugin providers not reconfigured for the new rules", "error", err)
		}
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

	pub := delivery.NewPublisher(pool, conn, log, delivery.PublisherConfig{
		BatchSize: d.Publisher.BatchSize, PerMessage: d.Publisher.PerMessage,
		PollInterval: d.Publisher.PollInterval, ReclaimAfter: d.Publisher.ReclaimAfter, Workers: d.Publisher.Workers,
	})
	relayCfg := outbox.Config{
		BatchSize: d.Relay.BatchSize, PollInterval: d.Relay.PollInterval, MaxAttempts: d.Relay.MaxAttempts, Workers: d.Relay.Workers,
	}
	var handoff *delivery.Handoff
	if d.Publisher.Handoff {
		handoff = delivery.NewHandoff(pool, conn, log, delivery.PublisherConfig{PerMessage: d.Publisher.PerMessage}, pub.Kick)
		relayCfg.Handoff = handoff
	}
	relay := outbox.New(pool, current, pub.Kick, log, relayCfg)
	poller := delivery.NewRetryPoller(pool, d.Retry.PollInterval, pub.Kick, log)

	apiHandler, err := APIHandler(ctx, pools, current, log)
	if err != nil {
		return err
	}
	httpSrv := &http.Server{Handler: apiHandler, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", d.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http.listen: %w", err)
	}
	var adminSrv *http.Server
	var adminLn net.Listener
	if d.HTTP.AdminListen != "" {
		mux := http.NewServeMux()
		mux.Handle("/admin/", pluginhost.AdminHandler(host))
		mux.HandleFunc("POST /admin/v1/rules/reload", func(w http.ResponseWriter, r *http.Request) {
			if err := watcher.Reload(); err != nil {
				http.Error(w, err.Error(), http.StatusUnprocessableEntity)
				return
			}
			fmt.Fprintln(w, "rules reloaded")
		})
		if d.HTTP.Pprof {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		adminSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		if adminLn, err = net.Listen("tcp", d.HTTP.AdminListen); err != nil {
			ln.Close()
			return fmt.Errorf("http.admin_listen: %w", err)
		}
	}

	// Pipeline stages stop when work ends; listeners last so that what was
	// claimed is recorded.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	var wg sync.WaitGroup
	run := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(work); err != nil {
				log.Error("component stopped", "component", name, "error", err)
			}
		}()
	}
	run("rules watcher", watcher.Run)
	run("relay", relay.Run)
	if handoff != nil {
		run("handoff", handoff.Run)
	}
	run("publisher", pub.Run)
	run("listener", listener.Run)
	run("retry poller", poller.Run)
	go func() {
		if err := httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "error", err)
		}
	}()
	if adminSrv != nil {
		go func() {
			if err := adminSrv.Serve(adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("admin server", "error", err)
			}
		}()
	}
	log.Info("herald serving", "http", ln.Addr().String(), "admin", d.HTTP.AdminListen, "rules", d.Rules,
		"plugins", d.Plugins.Dir, "queues", topo.QueueNames())

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			log.Info("SIGHUP: reloading rules")
			if err := watcher.Reload(); err != nil {
				log.Error("rules reload refused; the last good rules keep serving", "error", err)
			}
			continue
		case <-ctx.Done():
		}
		break
	}
	log.Info("shutting down")
	shutCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_ = httpSrv.Shutdown(shutCtx)
	if adminSrv != nil {
		_ = adminSrv.Shutdown(shutCtx)
	}
	cancelWork()
	wg.Wait()
	log.Info("stopped")
	return nil
}
