// Package source is the source stage of `herald serve`: it moves the
// events a service wrote into the outbox of its own database (herald_outbox,
// installed by `herald outbox install`, sql/outbox) into Herald's
// event_outbox, exactly once.
//
// The two databases share no transaction, so a batch is two transactions,
// the source's held open around Herald's:
//
//  1. In the source: claim up to batch_size rows, oldest first, FOR UPDATE
//     SKIP LOCKED (a second daemon claims other rows, or none).
//  2. In Herald: insert them through herald_enqueue, whose unique key
//     (tenant_id, event_id) makes an insert that was already made a
//     'repeat'; commit.
//  3. In the source: delete the rows forwarded (new or repeat), mark the
//     ones refused (refused_at, refusal); commit.
//
// A crash, a lost connection or a stop between 2 and 3 leaves the rows in
// the source unmarked; they are claimed again and come back from Herald as
// repeats, which step 3 deletes. Between 1 and 2 nothing was written. So
// every row reaches event_outbox once, and the source table keeps only
// what waits and what was refused.
//
// A row for a tenant the source is not configured for, for a project the
// tenant lacks, or whose event_id the tenant holds for another event is
// refused: it stays in herald_outbox with refused_at and refusal set, is
// counted and logged, and the rows around it flow. A source that cannot be
// reached is retried with a growing pause; it stops neither the daemon
// nor the other sources.
package source

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldhq/herald/core/internal/secret"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/sql/outbox"
)

// Status is what a source's last pass found, for readiness and doctor.
type Status struct {
	// Name is the source block's label.
	Name string `json:"name"`
	// State is "up" (its last pass worked), "down" (it failed: Reason
	// says why) or "starting" (no pass yet).
	State string `json:"state"`
	// Reason is why it is down, in fixed words that name no host, role or
	// credential: "unreachable" or "outbox not installed or older than
	// this herald".
	Reason string `json:"reason,omitempty"`
	// Error is the last failure, without the URL's password, for the log
	// and herald doctor; not served.
	Error string `json:"-"`
	// Backlog is the rows waiting to be forwarded at the last pass.
	Backlog int64 `json:"backlog"`
	// Refused is the rows refused and kept in herald_outbox.
	Refused int64 `json:"refused"`
	// OldestSeconds is the age of the oldest waiting row.
	OldestSeconds float64 `json:"oldest_seconds"`
}

// Metrics are the source stage's Prometheus series, each labelled by
// source.
type Metrics struct {
	forwarded *prometheus.CounterVec
	refused   *prometheus.CounterVec
	backlog   *prometheus.GaugeVec
	oldest    *prometheus.GaugeVec
	up        *prometheus.GaugeVec
	lag       *prometheus.HistogramVec
}

// NewMetrics registers the source series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_source_forwarded_total",
			Help: "Rows of a source's herald_outbox written to Herald's event_outbox and deleted from the source (a repeat of an event Herald holds counts once more here, not in event_outbox)."},
			[]string{"source"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_source_refused_total",
			Help: "Rows of a source Herald refused and left in herald_outbox with refused_at set, by reason: tenant (not in the source's tenants), project (the tenant has no such project), conflict (the event_id is taken by another event), contract (the event breaks Herald's event contract)."},
			[]string{"source", "reason"}),
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "herald_source_backlog",
			Help: "Rows waiting in a source's herald_outbox at the stage's last pass (refused rows not counted)."}, []string{"source"}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "herald_source_oldest_seconds",
			Help: "Age of the oldest row waiting in a source's herald_outbox at the stage's last pass (0 when none waits)."}, []string{"source"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "herald_source_up",
			Help: "1 when the stage's last pass over a source worked, 0 when it failed (unreachable, no outbox installed, refused login)."}, []string{"source"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "herald_source_lag_seconds",
			Help:    "From a row's insert in the source (its created_at) to the commit of its forward, by source.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}}, []string{"source"}),
	}
	reg.MustRegister(m.forwarded, m.refused, m.backlog, m.oldest, m.up, m.lag)
	return m
}

// Stage forwards every configured source; Run it under the supervisor.
type Stage struct {
	herald  *pgxpool.Pool
	log     hclog.Logger
	metrics *Metrics
	fwds    []*Forwarder
}

// NewStage returns the stage of sources (by name), writing into Herald
// through herald (the worker pool). Nothing connects before Run.
func NewStage(herald *pgxpool.Pool, sources map[string]Config, log hclog.Logger, m *Metrics) (*Stage, error) {
	s := &Stage{herald: herald, log: log, metrics: m}
	names := make([]string, 0, len(sources))
	for n := range sources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f, err := NewForwarder(n, sources[n], herald, log.Named("source").With("source", n), m)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.fwds = append(s.fwds, f)
	}
	return s, nil
}

// Run forwards every source until ctx ends (with none, it waits for the
// end: the supervisor takes a stage that returns early for a failed one);
// a source's failures are its own (retried inside), so Run returns nil
// once they all stopped.
func (s *Stage) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, f := range s.fwds {
		wg.Go(func() { f.Run(ctx) })
	}
	<-ctx.Done()
	wg.Wait()
	return nil
}

// Close closes the sources' pools.
func (s *Stage) Close() {
	for _, f := range s.fwds {
		f.Close()
	}
}

// Status returns every source's status, by name.
func (s *Stage) Status() []Status {
	out := make([]Status, 0, len(s.fwds))
	for _, f := range s.fwds {
		out = append(out, f.Status())
	}
	return out
}

// Forwarder forwards one source.
type Forwarder struct {
	name    string
	cfg     Config
	src     *pgxpool.Pool
	herald  *pgxpool.Pool
	log     hclog.Logger
	metrics *Metrics
	kick    chan struct{}
	tenants map[string]bool

	mu     sync.Mutex
	status Status
}

// NewForwarder returns the forwarder of source name. Its pool connects
// lazily: an unreachable source is a status, not an error here.
func NewForwarder(name string, cfg Config, herald *pgxpool.Pool, log hclog.Logger, m *Metrics) (*Forwarder, error) {
	cfg = cfg.Defaults()
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("source %s: url: %w", name, redactErr(err, cfg.URL))
	}
	// One connection listens, one forwards, one answers status queries.
	pc.MaxConns = 3
	pc.ConnConfig.RuntimeParams["application_name"] = "herald source " + name
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", name, redactErr(err, cfg.URL))
	}
	f := &Forwarder{name: name, cfg: cfg, src: pool, herald: herald, log: log, metrics: m, kick: make(chan struct{}, 1),
		tenants: map[string]bool{}, status: Status{Name: name, State: "starting"}}
	for _, t := range cfg.Tenants {
		f.tenants[t] = true
	}
	if m != nil {
		m.up.WithLabelValues(name).Set(0)
		m.backlog.WithLabelValues(name).Set(0)
		m.oldest.WithLabelValues(name).Set(0)
		m.forwarded.WithLabelValues(name)
		for _, r := range []string{"tenant", "project", "conflict", "contract"} {
			m.refused.WithLabelValues(name, r)
		}
	}
	return f, nil
}

// redactErr replaces the URL, should err quote it, by the URL without its
// password (pgx's connection errors name the user and database, never
// the password).
func redactErr(err error, url string) error {
	if url != "" && strings.Contains(err.Error(), url) {
		return errors.New(strings.ReplaceAll(err.Error(), url, secret.RedactURL(url)))
	}
	return err
}

// Close closes the source's pool.
func (f *Forwarder) Close() { f.src.Close() }

// Status returns the source's status after its last pass.
func (f *Forwarder) Status() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status
}

// Kick wakes the forwarder.
func (f *Forwarder) Kick() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Run forwards until ctx ends, woken by NOTIFY herald_outbox and every
// poll_interval. Failures are logged, shown in Status and the metrics,
// and retried after a pause that grows to 30 seconds.
func (f *Forwarder) Run(ctx context.Context) {
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		store.Listen(ctx, f.src, "herald_outbox", f.log, f.Kick)
	}()
	defer func() { <-listened }()
	pause := time.Duration(0)
	for ctx.Err() == nil {
		err := f.drain(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			pause = min(max(2*pause, 250*time.Millisecond), 30*time.Second)
			f.fail(err)
			sleep(ctx, pause)
			continue
		}
		pause = 0
		t := time.NewTimer(f.cfg.PollInterval)
		select {
		case <-ctx.Done():
		case <-f.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// fail records a failed pass.
func (f *Forwarder) fail(err error) {
	err = redactErr(err, f.cfg.URL)
	f.mu.Lock()
	was := f.status.State
	f.status.State, f.status.Error, f.status.Reason = "down", err.Error(), "unreachable"
	if strings.Contains(err.Error(), "run herald outbox install") {
		f.status.Reason = "outbox not installed or older than this herald"
	}
	f.mu.Unlock()
	if f.metrics != nil {
		f.metrics.up.WithLabelValues(f.name).Set(0)
	}
	if was != "down" {
		f.log.Error("source unreachable or refused; retrying (the other sources and the pipeline go on)", "error", err)
	} else {
		f.log.Debug("source still failing", "error", err)
	}
}

// drain forwards batches until one comes back short, then records the
// backlog.
func (f *Forwarder) drain(ctx context.Context) error {
	for {
		n, err := f.ForwardOnce(ctx)
		if err != nil {
			return err
		}
		if n < f.cfg.BatchSize {
			break
		}
	}
	st, err := inspect(ctx, f.src)
	if err != nil {
		return err
	}
	st.Name, st.State = f.name, "up"
	f.mu.Lock()
	was := f.status.State
	f.status = st
	f.mu.Unlock()
	if was == "down" {
		f.log.Info("source reachable again")
	}
	if f.metrics != nil {
		f.metrics.up.WithLabelValues(f.name).Set(1)
		f.metrics.backlog.WithLabelValues(f.name).Set(float64(st.Backlog))
		f.metrics.oldest.WithLabelValues(f.name).Set(st.OldestSeconds)
	}
	return nil
}

// inspect reads the outbox's version, backlog and refusals; an outbox
// missing or older than this Herald's is an error that names the fix.
func inspect(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (Status, error) {
	var st Status
	var version int
	err := q.QueryRow(ctx, `SELECT (SELECT version FROM public.herald_outbox_version),
			count(*) FILTER (WHERE refused_at IS NULL), count(*) FILTER (WHERE refused_at IS NOT NULL),
			coalesce(extract(epoch FROM clock_timestamp() - min(created_at) FILTER (WHERE refused_at IS NULL)), 0)::float8
		FROM public.herald_outbox`).Scan(&version, &st.Backlog, &st.Refused, &st.OldestSeconds)
	if err != nil {
		return st, notInstalled(err)
	}
	if version < outbox.Version {
		return st, fmt.Errorf("herald_outbox_version: version %d is installed, this Herald needs %d: run herald outbox install", version, outbox.Version)
	}
	return st, nil
}

// Check connects to the source of cfg once and returns what its outbox
// holds (herald doctor); an error says why it cannot be forwarded.
func Check(ctx context.Context, name string, cfg Config) (Status, error) {
	st := Status{Name: name, State: "down"}
	conn, err := pgx.Connect(ctx, cfg.URL)
	if err != nil {
		return st, redactErr(err, cfg.URL)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	got, err := inspect(ctx, conn)
	if err != nil {
		return st, err
	}
	got.Name, got.State = name, "up"
	return got, nil
}

// notInstalled names the fix when the outbox's tables are missing.
func notInstalled(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" {
		return fmt.Errorf("%s: the outbox is not installed in this database: run herald outbox install --database-url URL", pe.Message)
	}
	return err
}

// row is one claimed row of herald_outbox.
type row struct {
	id                            int64
	tenant, project, eventID, typ string
	aggType, aggID, payload       string
	availableAt                   time.Time
	traceparent, tracestate       *string
	age                           float64
	outcome, refusal, reason      string
}

// ForwardOnce forwards one batch (see the package comment) and returns
// how many rows it claimed.
func (f *Forwarder) ForwardOnce(ctx context.Context) (int, error) {
	start := time.Now()
	stx, err := f.src.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = stx.Rollback(context.WithoutCancel(ctx)) }()
	rs, err := stx.Query(ctx, `SELECT id, tenant_id, project_id, event_id, event_type, aggregate_type, aggregate_id, payload::text,
			available_at, traceparent, tracestate, extract(epoch FROM clock_timestamp() - created_at)::float8
		FROM public.herald_outbox WHERE refused_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, f.cfg.BatchSize)
	if err != nil {
		return 0, notInstalled(err)
	}
	var rows []*row
	for rs.Next() {
		r := &row{}
		if err := rs.Scan(&r.id, &r.tenant, &r.project, &r.eventID, &r.typ, &r.aggType, &r.aggID, &r.payload, &r.availableAt,
			&r.traceparent, &r.tracestate, &r.age); err != nil {
			rs.Close()
			return 0, err
		}
		rows = append(rows, r)
	}
	if err := rs.Err(); err != nil {
		return 0, notInstalled(err)
	}
	if len(rows) == 0 {
		return 0, nil
	}
	allowed := make([]*row, 0, len(rows))
	for _, r := range rows {
		if !f.tenants[r.tenant] {
			r.reason = "tenant"
			r.refusal = fmt.Sprintf("tenant_id: the source %q may not write events for tenant %q (its tenants: %s)", f.name, r.tenant,
				strings.Join(f.cfg.Tenants, ", "))
			continue
		}
		allowed = append(allowed, r)
	}
	if err := f.enqueue(ctx, allowed); err != nil {
		return 0, fmt.Errorf("herald database: %w", err)
	}
	var done, refusedIDs []int64
	var refusals []string
	for _, r := range rows {
		if r.refusal != "" {
			refusedIDs = append(refusedIDs, r.id)
			refusals = append(refusals, r.refusal)
			continue
		}
		done = append(done, r.id)
	}
	if len(done) > 0 {
		if _, err := stx.Exec(ctx, `DELETE FROM public.herald_outbox WHERE id = ANY($1)`, done); err != nil {
			return 0, err
		}
	}
	if len(refusedIDs) > 0 {
		if _, err := stx.Exec(ctx, `UPDATE public.herald_outbox o SET refused_at = now(), refusal = r.refusal
				FROM unnest($1::bigint[], $2::text[]) AS r(id, refusal) WHERE o.id = r.id`, refusedIDs, refusals); err != nil {
			return 0, err
		}
	}
	if err := stx.Commit(ctx); err != nil {
		return 0, err
	}
	took := time.Since(start).Seconds()
	for _, r := range rows {
		if r.refusal != "" {
			f.log.Warn("source row refused; it stays in herald_outbox with refused_at set", "tenant", r.tenant, "event_id", r.eventID,
				"refusal", r.refusal)
			if f.metrics != nil {
				f.metrics.refused.WithLabelValues(f.name, r.reason).Inc()
			}
			continue
		}
		if f.metrics != nil {
			f.metrics.forwarded.WithLabelValues(f.name).Inc()
			f.metrics.lag.WithLabelValues(f.name).Observe(r.age + took)
		}
	}
	return len(rows), nil
}

// enqueue writes rows into Herald in one transaction, setting each row's
// outcome or refusal. The projects are checked first (herald_enqueue
// trusts Herald's own login with them); an event the contract refuses
// (the two databases' check functions differ) sends the batch through
// savepoints one row at a time, so that only that row is refused.
func (f *Forwarder) enqueue(ctx context.Context, rows []*row) error {
	if len(rows) == 0 {
		return nil
	}
	err := f.enqueueTx(ctx, rows, false)
	if errors.Is(err, errRetryOneByOne) {
		for _, r := range rows {
			r.outcome, r.refusal, r.reason = "", "", ""
		}
		err = f.enqueueTx(ctx, rows, true)
	}
	return err
}

func (f *Forwarder) enqueueTx(ctx context.Context, rows []*row, oneByOne bool) error {
	return pgx.BeginFunc(ctx, f.herald, func(tx pgx.Tx) error {
		var tenants []string
		for _, r := range rows {
			if !slices.Contains(tenants, r.tenant) {
				tenants = append(tenants, r.tenant)
			}
		}
		have := map[[2]string]bool{}
		prs, err := tx.Query(ctx, `SELECT tenant_id, project_id FROM projects WHERE tenant_id = ANY($1)`, tenants)
		if err != nil {
			return err
		}
		for prs.Next() {
			var k [2]string
			if err := prs.Scan(&k[0], &k[1]); err != nil {
				prs.Close()
				return err
			}
			have[k] = true
		}
		if err := prs.Err(); err != nil {
			return err
		}
		var todo []*row
		for _, r := range rows {
			if !have[[2]string{r.tenant, r.project}] {
				r.reason = "project"
				r.refusal = fmt.Sprintf("project_id: tenant %q has no project %q (create it with: herald projects create --tenant %s %s)",
					r.tenant, r.project, r.tenant, r.project)
				continue
			}
			todo = append(todo, r)
		}
		if err := enqueueBatch(ctx, tx, todo, oneByOne); err != nil {
			var pe *pgconn.PgError
			if oneByOne || !errors.As(err, &pe) || (!strings.HasPrefix(pe.Code, "22") && !strings.HasPrefix(pe.Code, "23")) {
				return err
			}
			// The batch's transaction is aborted: start it again, one
			// savepoint per row.
			return errRetryOneByOne
		}
		return nil
	})
}

var errRetryOneByOne = errors.New("retry one by one")

const enqueueSQL = `SELECT outcome FROM herald_enqueue($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10)`

// enqueueBatch calls herald_enqueue for every row, in one round trip, or
// one savepoint each when oneByOne.
func enqueueBatch(ctx context.Context, tx pgx.Tx, rows []*row, oneByOne bool) error {
	if !oneByOne {
		b := &pgx.Batch{}
		for _, r := range rows {
			b.Queue(enqueueSQL, r.tenant, r.eventID, r.typ, r.payload, r.aggType, r.aggID, r.project, r.availableAt,
				r.traceparent, r.tracestate).QueryRow(func(q pgx.Row) error { return q.Scan(&r.outcome) })
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
	} else {
		for _, r := range rows {
			err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
				return sp.QueryRow(ctx, enqueueSQL, r.tenant, r.eventID, r.typ, r.payload, r.aggType, r.aggID, r.project, r.availableAt,
					r.traceparent, r.tracestate).Scan(&r.outcome)
			})
			var pe *pgconn.PgError
			if errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23")) {
				r.reason, r.refusal = "contract", pe.Message
				continue
			}
			if err != nil {
				return err
			}
		}
	}
	for _, r := range rows {
		if r.outcome == "conflict" {
			r.reason = "conflict"
			r.refusal = fmt.Sprintf("event_id: tenant %q already has an event %q with another type, project or payload", r.tenant, r.eventID)
		}
	}
	return nil
}
