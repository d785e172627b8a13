// Package statusev drains status_events (migration 0080: every final
// delivery outcome, inbox read and action, recorded by triggers in the
// transaction that made it) to the broker and to tenants' webhooks.
//
// The broker: every event is published, persistent and confirmed, to the
// topic exchange Config.Exchange with routing key "<tenant>.<kind>"
// (acme.delivery.sent, acme.notification.read; a dot in a tenant id is
// written %2E), message id the event's stable id. One cursor (migration
// 0138) says how far the broker has confirmed: a daemon takes the cursor's
// row lock (the others skip the round), publishes the events past it from
// transactions that have all ended, and moves it on the broker's confirm
// in the same transaction, so two daemons never publish one event twice
// and a crash before the move publishes it again, with the same id.
//
// Webhooks: each tenant with events owed to its webhook gets one worker,
// which leases a batch of its tenant's events, POSTs them one by one
// (Standard Webhooks headers and signature) with a per-request timeout,
// and records each outcome; a failure puts the rest of the batch off with
// it (exponential backoff, capped, then given up after MaxAttempts). A
// tenant's slow or failing endpoint holds up its own worker only.
//
// Delivery is at least once: a consumer deduplicates on the event id.
package statusev

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/config/field"
	"github.com/heraldhq/herald/core/internal/inbox"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/webhook"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Config tunes the stage of `herald serve` that publishes delivery-status
// events and POSTs them to tenants' webhooks.
type Config struct {
	// Exchange is the durable topic exchange every status event is
	// published to, routing key "<tenant>.<kind>".
	Exchange string `koanf:"exchange"`
	// Retention is the replay window: events are kept this long after
	// they happened (once published and off the webhook's queue), and
	// POST /v1/webhooks/replay reaches back at most this far.
	Retention time.Duration `koanf:"retention"`
	// PollInterval is how often the stage looks for new events when
	// nothing wakes it.
	PollInterval time.Duration `koanf:"poll_interval"`
	// WebhookTimeout bounds one POST to a webhook, connection included.
	WebhookTimeout time.Duration `koanf:"webhook_timeout"`
	// WebhookMaxAttempts is how many times an event is POSTed before it
	// is given up (webhook_last_error keeps why; a replay sends it again).
	WebhookMaxAttempts int `koanf:"webhook_max_attempts"`
	// WebhookBackoffInitial is the wait after a webhook's first failure;
	// it doubles with each further one.
	WebhookBackoffInitial time.Duration `koanf:"webhook_backoff_initial"`
	// WebhookBackoffMax caps the wait between two attempts.
	WebhookBackoffMax time.Duration `koanf:"webhook_backoff_max"`
	// WebhookTenants caps how many tenants' webhooks are POSTed to at
	// once (one worker each; a tenant's events go out one at a time).
	WebhookTenants int `koanf:"webhook_tenants"`
	// WebhookAllowLoopback lets tenants set http:// webhooks on a
	// loopback host (localhost, 127.0.0.0/8, ::1), and lets the daemon
	// dial loopback addresses for them: for development and tests only.
	// Private and reserved addresses are refused whatever it says.
	WebhookAllowLoopback bool `koanf:"webhook_allow_loopback"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Exchange: "herald.status", Retention: 72 * time.Hour, PollInterval: time.Second,
		WebhookTimeout: 10 * time.Second, WebhookMaxAttempts: 15, WebhookBackoffInitial: 5 * time.Second,
		WebhookBackoffMax: time.Hour, WebhookTenants: 64}
}

// Validate checks the settings; it returns field.Errors naming the keys.
func (c Config) Validate() error {
	var errs field.Errors
	errs.NotEmpty("exchange", c.Exchange)
	errs.PositiveDuration("retention", c.Retention)
	errs.PositiveDuration("poll_interval", c.PollInterval)
	errs.PositiveDuration("webhook_timeout", c.WebhookTimeout)
	errs.Positive("webhook_max_attempts", c.WebhookMaxAttempts)
	errs.PositiveDuration("webhook_backoff_initial", c.WebhookBackoffInitial)
	errs.PositiveDuration("webhook_backoff_max", c.WebhookBackoffMax)
	errs.Positive("webhook_tenants", c.WebhookTenants)
	if c.WebhookBackoffMax > 0 && c.WebhookBackoffMax < c.WebhookBackoffInitial {
		errs.Add("webhook_backoff_max", "must be at least webhook_backoff_initial (%s)", c.WebhookBackoffInitial)
	}
	return errs.Err()
}

// WebhookRetry is the retry policy of webhook POSTs: WebhookMaxAttempts
// tries, WebhookBackoffInitial doubling up to WebhookBackoffMax, ±10 %
// jitter.
func (c Config) WebhookRetry() channel.RetryPolicy {
	return channel.RetryPolicy{MaxAttempts: c.WebhookMaxAttempts, Initial: c.WebhookBackoffInitial,
		Max: c.WebhookBackoffMax, Multiplier: 2, Jitter: 0.1}
}

// Message is an event as the broker and the webhook carry it (the body
// of both): Standard Webhooks' type, timestamp and data, with the stable
// id and the tenant.
type Message struct {
	// ID is the event's stable id: the AMQP message id and the
	// webhook-id header; every copy of one event carries the same.
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	TenantID string          `json:"tenant_id"`
	Time     time.Time       `json:"timestamp"`
	Data     json.RawMessage `json:"data"`
}

// RoutingKey is the routing key of a tenant's event of kind on the status
// exchange: "<tenant>.<kind>", the tenant one word (inbox.RoutingWord).
func RoutingKey(tenant, kind string) string { return inbox.RoutingWord(tenant) + "." + kind }

// Stage drains status_events; Run it under the supervisor.
type Stage struct {
	pool    *pgxpool.Pool
	conn    *broker.Conn
	cfg     Config
	log     hclog.Logger
	metrics *Metrics
	client  *http.Client
	// batch is how many events a webhook worker leases at once.
	batch int
}

// New returns the stage. pool is the pipeline's (every tenant).
func New(pool *pgxpool.Pool, conn *broker.Conn, cfg Config, m *Metrics, log hclog.Logger) *Stage {
	dialer := &net.Dialer{Timeout: cfg.WebhookTimeout, Control: webhook.DialControl(cfg.WebhookAllowLoopback)}
	tr := &http.Transport{DialContext: dialer.DialContext, Proxy: nil, ForceAttemptHTTP2: true,
		TLSHandshakeTimeout: cfg.WebhookTimeout, ResponseHeaderTimeout: cfg.WebhookTimeout, MaxIdleConnsPerHost: 2,
		IdleConnTimeout: 90 * time.Second, MaxResponseHeaderBytes: 16 << 10}
	client := &http.Client{Transport: tr, Timeout: cfg.WebhookTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &Stage{pool: pool, conn: conn, cfg: cfg, log: log.Named("status-events"), metrics: m, client: client,
		batch: 10}
}

// Run publishes, POSTs and sweeps until ctx ends.
func (s *Stage) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); s.runBroker(ctx) }()
	go func() { defer wg.Done(); s.runWebhooks(ctx) }()
	go func() { defer wg.Done(); s.runSweep(ctx) }()
	wg.Wait()
	return nil
}

// --- the broker ---

func (s *Stage) runBroker(ctx context.Context) {
	s.conn.Drain(ctx, s.cfg.Exchange, "status event", s.log, s.cfg.PollInterval, nil, s.publishRound)
}

type row struct {
	seq      int64
	id, kind string
	tenant   string
	at       time.Time
	data     []byte
	attempts int
}

func (r row) message() Message {
	return Message{ID: r.id, Type: r.kind, TenantID: r.tenant, Time: r.at.UTC(), Data: r.data}
}

func scanRow(r pgx.CollectableRow) (row, error) {
	var x row
	err := r.Scan(&x.seq, &x.id, &x.tenant, &x.kind, &x.at, &x.data, &x.attempts)
	return x, err
}

// published is true of a status event the broker has confirmed: one at
// or before the publisher's cursor (migration 0138), or one recorded
// before the cursor existed and published then (txid NULL).
const published = `(e.txid IS NULL OR (e.txid, e.seq) <= (SELECT c.txid, c.seq FROM status_event_cursor c))`

// unpublished is true of a status event the broker has not confirmed.
const unpublished = `(e.txid, e.seq) > (SELECT c.txid, c.seq FROM status_event_cursor c)`

// publishRound publishes one batch, pipelined, and moves the cursor past
// the confirmed ones in the claim's transaction. It returns how many were
// confirmed, or -1 when the broker nacked any.
//
// The batch is the next events in (txid, seq) order past the cursor,
// written by transactions older than every one still running: those have
// all ended, so no event can appear behind the cursor later (migration
// 0138). The cursor's row lock makes one daemon publish at a time; the
// others skip the round. The cursor moves past the confirmed prefix of
// the batch: an event nacked and the ones after it are published again
// (with their ids) in the next round.
func (s *Stage) publishRound(ctx context.Context, ch *amqp.Channel) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var curTxid string
		var curSeq int64
		err := tx.QueryRow(ctx, `SELECT txid::text, seq FROM status_event_cursor FOR UPDATE SKIP LOCKED`).Scan(&curTxid, &curSeq)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // another daemon is publishing
		}
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT seq, event_id::text, tenant_id, kind, occurred_at, data, webhook_attempts
			FROM status_events
			WHERE (txid, seq) > ($1::text::xid8, $2::bigint) AND txid < pg_snapshot_xmin(pg_current_snapshot())
			ORDER BY txid, seq LIMIT 500`, curTxid, curSeq)
		if err != nil {
			return err
		}
		evs, err := pgx.CollectRows(rows, scanRow)
		if err != nil || len(evs) == 0 {
			return err
		}
		keys, msgs := make([]string, len(evs)), make([]amqp.Publishing, len(evs))
		for i, e := range evs {
			body, _ := json.Marshal(e.message())
			keys[i] = RoutingKey(e.tenant, e.kind)
			msgs[i] = amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: e.id, Type: e.kind,
				Timestamp: e.at, Body: body, Headers: amqp.Table{"herald-tenant": e.tenant}}
		}
		acked, err := broker.PublishConfirmed(ctx, ch, s.cfg.Exchange, keys, msgs)
		if err != nil {
			return err
		}
		for n < len(acked) && acked[n] {
			s.metrics.published(evs[n].tenant)
			n++
		}
		if n > 0 {
			if _, err := tx.Exec(ctx, `UPDATE status_event_cursor SET (txid, seq) = (SELECT txid, seq FROM status_events WHERE seq = $1)`,
				evs[n-1].seq); err != nil {
				return err
			}
		}
		if n < len(evs) {
			n = -1
		}
		return nil
	})
	return n, err
}

// --- webhooks ---

func (s *Stage) runWebhooks(ctx context.Context) {
	var mu sync.Mutex
	busy := map[string]bool{}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		tenants, err := s.dueTenants(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("status events: listing tenants with webhook events due failed", "error", err)
		}
		for _, t := range tenants {
			mu.Lock()
			start := !busy[t] && len(busy) < s.cfg.WebhookTenants
			if start {
				busy[t] = true
			}
			mu.Unlock()
			if !start {
				continue
			}
			wg.Add(1)
			go func(t string) {
				defer wg.Done()
				s.tenantWorker(ctx, t)
				mu.Lock()
				delete(busy, t)
				mu.Unlock()
			}(t)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.cfg.PollInterval):
		}
	}
}

// dueTenants lists the tenants with events owed to their webhook now.
func (s *Stage) dueTenants(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT tenant_id FROM status_events
		WHERE webhook_due_at <= now() AND (webhook_lease_until IS NULL OR webhook_lease_until < now()) LIMIT 1000`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// tenantWorker sends the tenant's due events until none is left or a
// failure put them off.
func (s *Stage) tenantWorker(ctx context.Context, tenant string) {
	for ctx.Err() == nil {
		evs, err := s.lease(ctx, tenant)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("status events: leasing webhook events failed", "tenant", tenant, "error", err)
			}
			return
		}
		if len(evs) == 0 {
			return
		}
		hook, err := store.WebhookSecretsOf(ctx, s.pool, tenant)
		if errors.Is(err, store.ErrNoWebhook) || (err == nil && !hook.Enabled) {
			s.settle(ctx, evs, "", "no webhook enabled when it was sent", 0)
			continue
		}
		if err != nil {
			s.log.Warn("status events: reading the tenant's webhook failed", "tenant", tenant, "error", err)
			return
		}
		for i, e := range evs {
			if !contains(hook.Kinds, e.kind) {
				s.settle(ctx, evs[i:i+1], "", "the webhook no longer wants "+e.kind, 0)
				continue
			}
			err := s.post(ctx, hook, e)
			if ctx.Err() != nil {
				return // the lease runs out; another pass sends them
			}
			if err == nil {
				s.settle(ctx, evs[i:i+1], "delivered", "", 0)
				s.metrics.webhook(tenant, "delivered")
				continue
			}
			// This event and the rest of the batch wait for the backoff:
			// a failing endpoint is not hammered with the whole batch.
			attempts := e.attempts + 1
			retry := s.cfg.WebhookRetry()
			if retry.Exhausted(attempts) {
				s.settle(ctx, evs[i:i+1], "failed", err.Error(), 0)
				s.metrics.webhook(tenant, "failed")
				s.log.Warn("status events: webhook event given up", "tenant", tenant, "event_id", e.id, "attempts", attempts, "error", err)
			} else {
				wait := retry.Next(attempts, 0)
				s.settle(ctx, evs[i:i+1], "retry", err.Error(), wait)
				s.metrics.webhook(tenant, "retried")
				s.log.Debug("status events: webhook POST failed; retrying", "tenant", tenant, "event_id", e.id, "attempts", attempts, "in", wait, "error", err)
				s.putOff(ctx, evs[i+1:], wait)
			}
			return
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// lease claims up to s.batch of the tenant's due events, oldest first, for
// long enough to POST them all; a daemon that dies holding them leaves
// them to the next pass once the lease ran out.
func (s *Stage) lease(ctx context.Context, tenant string) ([]row, error) {
	lease := s.cfg.WebhookTimeout*time.Duration(s.batch) + s.cfg.WebhookTimeout
	rows, err := s.pool.Query(ctx, `UPDATE status_events e SET webhook_lease_until = now() + $3::interval
		FROM (SELECT seq FROM status_events WHERE tenant_id = $1 AND webhook_due_at <= now()
		      AND (webhook_lease_until IS NULL OR webhook_lease_until < now())
		      ORDER BY webhook_due_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED) c
		WHERE e.seq = c.seq
		RETURNING e.seq, e.event_id::text, e.tenant_id, e.kind, e.occurred_at, e.data, e.webhook_attempts`, tenant, s.batch, lease)
	if err != nil {
		return nil, err
	}
	evs, err := pgx.CollectRows(rows, scanRow)
	if err != nil {
		return nil, err
	}
	// RETURNING does not keep the subquery's order.
	sortRows(evs)
	return evs, nil
}

func sortRows(evs []row) {
	for i := 1; i < len(evs); i++ {
		for j := i; j > 0 && evs[j].seq < evs[j-1].seq; j-- {
			evs[j], evs[j-1] = evs[j-1], evs[j]
		}
	}
}

// settle records the outcome of evs: delivered, failed (given up),
// retry (due again after wait, one attempt more) or "" (nothing owed).
func (s *Stage) settle(ctx context.Context, evs []row, outcome, why string, wait time.Duration) {
	seqs := make([]int64, len(evs))
	for i, e := range evs {
		seqs[i] = e.seq
	}
	var q string
	switch outcome {
	case "delivered":
		q = `UPDATE status_events SET webhook_due_at = NULL, webhook_lease_until = NULL, webhook_delivered_at = now(),
			webhook_attempts = webhook_attempts + 1, webhook_last_error = $2 WHERE seq = ANY($1)`
	case "retry":
		q = `UPDATE status_events SET webhook_due_at = now() + $3::interval, webhook_lease_until = NULL,
			webhook_attempts = webhook_attempts + 1, webhook_last_error = $2 WHERE seq = ANY($1)`
	case "failed":
		q = `UPDATE status_events SET webhook_due_at = NULL, webhook_lease_until = NULL,
			webhook_attempts = webhook_attempts + 1, webhook_last_error = $2 WHERE seq = ANY($1)`
	default:
		q = `UPDATE status_events SET webhook_due_at = NULL, webhook_lease_until = NULL, webhook_last_error = $2 WHERE seq = ANY($1)`
	}
	args := []any{seqs, truncate(why, 500)}
	if outcome == "retry" {
		args = append(args, wait)
	}
	// The outcome is recorded even as the daemon stops: a POST that went
	// through is not sent again for want of its mark.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, q, args...); err != nil {
		s.log.Warn("status events: recording a webhook outcome failed; the event is sent again after its lease", "error", err)
	}
}

// putOff makes evs due after wait without counting an attempt.
func (s *Stage) putOff(ctx context.Context, evs []row, wait time.Duration) {
	if len(evs) == 0 {
		return
	}
	seqs := make([]int64, len(evs))
	for i, e := range evs {
		seqs[i] = e.seq
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `UPDATE status_events SET webhook_due_at = now() + $2::interval, webhook_lease_until = NULL
		WHERE seq = ANY($1)`, seqs, wait); err != nil {
		s.log.Warn("status events: putting webhook events off failed", "error", err)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// post sends one event to the tenant's webhook: 2xx is delivered,
// anything else (a timeout, a refused dial, a redirect, another status)
// an error to retry.
func (s *Stage) post(ctx context.Context, hook store.WebhookSecrets, e row) error {
	body, err := json.Marshal(e.message())
	if err != nil {
		return err
	}
	now := time.Now()
	sig, err := webhook.Sign(hook.Secrets, e.id, now, body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WebhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "herald-webhooks/1")
	req.Header.Set("webhook-id", e.id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("POST: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("POST: the webhook answered %s", resp.Status)
	}
	return nil
}

// --- retention and gauges ---

func (s *Stage) runSweep(ctx context.Context) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	last := time.Time{}
	for {
		s.gauge(ctx)
		if time.Since(last) > time.Minute {
			last = time.Now()
			s.sweep(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sweep deletes events past the replay window that are published and owe
// nothing to a webhook, in bounded batches.
func (s *Stage) sweep(ctx context.Context) {
	for ctx.Err() == nil {
		tag, err := s.pool.Exec(ctx, `DELETE FROM status_events WHERE seq IN (SELECT e.seq FROM status_events e
			WHERE e.occurred_at < now() - $1::interval AND `+published+` AND e.webhook_due_at IS NULL LIMIT 5000)`, s.cfg.Retention)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("status events: sweep failed", "error", err)
			}
			return
		}
		if tag.RowsAffected() < 5000 {
			return
		}
	}
}

func (s *Stage) gauge(ctx context.Context) {
	b, err := Backlog(ctx, s.pool)
	if err != nil {
		return
	}
	s.metrics.backlog(b)
}

// BacklogStats is what status_events still owes.
type BacklogStats struct {
	// Unpublished counts events not yet confirmed by the broker;
	// OldestUnpublished is the age of the first in publishing order, the
	// one the publisher waits on (0: none). Each count stops at
	// store.BacklogCap.
	Unpublished       int64
	OldestUnpublished time.Duration
	// WebhookDue counts events owed to webhooks (due now or waiting for
	// a retry); OldestWebhookDue is the age of the oldest (0: none).
	WebhookDue       int64
	OldestWebhookDue time.Duration
}

// Backlog reads the backlog (herald doctor and the gauges).
func Backlog(ctx context.Context, q store.Querier) (BacklogStats, error) {
	return backlog(ctx, q, store.BacklogCap)
}

// backlogQuery reads the backlog, each count up to $1, through indexes
// only, however long the table's history:
//   - the events the broker owes are counted past the cursor in its own
//     order (the ORDER BY and LIMIT hold the plan to status_events_by_txid
//     once the table holds more than the count's limit: the planner cannot
//     know where the cursor is when it plans, assumes a third of the table
//     lies past it, and would otherwise read the whole table), and the
//     oldest is the age of the first of them, the one the publisher waits
//     on;
//   - the webhooks' through status_events_webhook_due (partial: only the
//     events still owed are in it), which the planner takes once the
//     table's statistics show how few those are (store.AnalyzeStale keeps
//     them, autovacuum or not).
const backlogQuery = `SELECT
		(SELECT count(*) FROM (SELECT 1 FROM status_events e WHERE ` + unpublished + ` ORDER BY e.txid, e.seq LIMIT $1) u),
		COALESCE((SELECT extract(epoch FROM now() - e.occurred_at) FROM status_events e WHERE ` + unpublished + ` ORDER BY e.txid, e.seq LIMIT 1), 0),
		(SELECT count(*) FROM (SELECT 1 FROM status_events WHERE webhook_due_at IS NOT NULL LIMIT $1) w),
		COALESCE((SELECT extract(epoch FROM now() - min(occurred_at)) FROM status_events WHERE webhook_due_at IS NOT NULL), 0)`

func backlog(ctx context.Context, q store.Querier, limit int) (BacklogStats, error) {
	var b BacklogStats
	var a1, a2 float64
	err := q.QueryRow(ctx, backlogQuery, limit).Scan(&b.Unpublished, &a1, &b.WebhookDue, &a2)
	b.OldestUnpublished = time.Duration(a1 * float64(time.Second))
	b.OldestWebhookDue = time.Duration(a2 * float64(time.Second))
	return b, err
}
