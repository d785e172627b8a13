package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/config/field"
	"github.com/heraldhq/herald/core/internal/metrics"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/tracing"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// PublisherConfig tunes the publisher and the relay's handoff: the
// daemon's publisher { ... } settings (the fields with a koanf tag) and
// what the daemon wires in.
type PublisherConfig struct {
	// BatchSize is how many deliveries one claim takes; the publisher
	// publishes a claim's messages, then waits for their confirms, so it
	// also bounds the publishes waiting for a confirm on one worker.
	BatchSize int `koanf:"batch_size"`
	// PerMessage caps the deliveries one broker message carries; above
	// 1000 (the most an envelope holds) it is 1000.
	PerMessage int `koanf:"per_message"`
	// PollInterval is the fallback wake-up when no notification arrives.
	PollInterval time.Duration `koanf:"poll_interval"`
	// ReclaimAfter republishes PUBLISHED deliveries no listener took in
	// time (a message lost with its queue).
	ReclaimAfter time.Duration `koanf:"reclaim_after"`
	// Workers is the number of concurrent publishing loops, each with its
	// own broker channel; SKIP LOCKED keeps their claims apart.
	Workers int `koanf:"workers"`
	// Handoff lets the relay publish the deliveries it writes itself
	// (false: the publisher claims every new delivery).
	Handoff bool `koanf:"handoff"`
	// ConfirmTimeout bounds the wait for the broker's confirms (0: 30 s).
	ConfirmTimeout time.Duration
	// Metrics records batches, unconfirmed publishes and unroutable
	// deliveries (nil: none).
	Metrics *metrics.Metrics
}

// DefaultPublisherConfig returns the publisher's default settings.
func DefaultPublisherConfig() PublisherConfig {
	return PublisherConfig{BatchSize: 500, PerMessage: 50, PollInterval: time.Second, ReclaimAfter: 5 * time.Minute, Workers: 2,
		Handoff: true}
}

// Validate checks the settings; it returns field.Errors naming the keys.
func (c PublisherConfig) Validate() error {
	var errs field.Errors
	errs.Positive("batch_size", c.BatchSize)
	errs.Positive("per_message", c.PerMessage)
	errs.PositiveDuration("poll_interval", c.PollInterval)
	errs.PositiveDuration("reclaim_after", c.ReclaimAfter)
	errs.Positive("workers", c.Workers)
	return errs.Err()
}

// setDefaults gives every setting left zero its default.
func (c *PublisherConfig) setDefaults() {
	d := DefaultPublisherConfig()
	if c.BatchSize <= 0 {
		c.BatchSize = d.BatchSize
	}
	if c.PerMessage <= 0 {
		c.PerMessage = d.PerMessage
	}
	if c.PerMessage > MaxEnvelope {
		c.PerMessage = MaxEnvelope
	}
	if c.PollInterval <= 0 {
		c.PollInterval = d.PollInterval
	}
	if c.ReclaimAfter <= 0 {
		c.ReclaimAfter = d.ReclaimAfter
	}
	if c.ConfirmTimeout <= 0 {
		c.ConfirmTimeout = 30 * time.Second
	}
	if c.Workers <= 0 {
		c.Workers = d.Workers
	}
}

// Publisher claims deliveries due for the broker (new, due retries and
// stale published ones), publishes them as persistent messages with
// pipelined publisher confirms and marks them PUBLISHED only once confirmed.
// When the broker is down the rows simply wait.
type Publisher struct {
	pool  *pgxpool.Pool
	conn  *broker.Conn
	cfg   PublisherConfig
	log   hclog.Logger
	kicks []chan struct{}
}

// pubWorker is one publishing loop and its broker channel.
type pubWorker struct {
	*Publisher
	confirmChannel
	kick chan struct{}
	// staleSince bounds the stale reclaim's round to the deliveries
	// created since then (zero: every delivery; see run).
	staleSince time.Time
}

// staleFullEvery is how often the stale reclaim reads every delivery; in
// between, each round reads the deliveries created since the previous
// round's reach (store.ClaimStaleSince), so that a round's cost does not
// grow with the history in the table. A delivery republished (by a retry
// or a reclaim) long after it was created and lost again waits for the
// next full round.
const staleFullEvery = time.Hour

// NewPublisher returns a publisher; call Run to start it.
func NewPublisher(pool *pgxpool.Pool, conn *broker.Conn, log hclog.Logger, cfg PublisherConfig) *Publisher {
	cfg.setDefaults()
	p := &Publisher{pool: pool, conn: conn, cfg: cfg, log: log.Named("publisher")}
	for range cfg.Workers {
		p.kicks = append(p.kicks, make(chan struct{}, 1))
	}
	return p
}

// Kick wakes every publishing loop (new deliveries exist).
func (p *Publisher) Kick() {
	for _, k := range p.kicks {
		select {
		case k <- struct{}{}:
		default:
		}
	}
}

// Run publishes until ctx ends. It wakes on Kick (the relay left
// deliveries to it, the handoff gave some up, the maintenance stage
// released some) and every PollInterval.
func (p *Publisher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for i, k := range p.kicks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &pubWorker{Publisher: p, kick: k}
			defer w.closeChannel()
			w.run(ctx, i == 0)
		}()
	}
	wg.Wait()
	return nil
}

// run is one publishing loop; the first one also reclaims stale rows.
func (p *pubWorker) run(ctx context.Context, reclaims bool) {
	var lastStale, lastFull time.Time
	for {
		kinds := []store.ClaimKind{claimHandoffs, store.ClaimPending, store.ClaimRetry}
		if reclaims && time.Since(lastStale) > p.cfg.ReclaimAfter/4 {
			kinds = append(kinds, store.ClaimStale)
			now := time.Now()
			if lastFull.IsZero() || now.Sub(lastFull) >= staleFullEvery {
				p.staleSince, lastFull = time.Time{}, now
			} else {
				// A row the last round could not yet call stale was
				// created after lastStale - ReclaimAfter; a minute more
				// for clocks.
				p.staleSince = lastStale.Add(-p.cfg.ReclaimAfter - time.Minute)
			}
			lastStale = now
		}
		// Wait for the broker before claiming anything, so that no rows are
		// held locked while it is down; deliveries wait in the database.
		if _, err := p.channel(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			p.log.Warn("broker channel unavailable; deliveries wait in the database", "error", err)
			sleepCtx(ctx, 500*time.Millisecond)
			continue
		}
		for _, kind := range kinds {
			for ctx.Err() == nil {
				_, more, err := p.publishBatch(ctx, kind)
				if err != nil {
					if ctx.Err() == nil {
						p.log.Warn("publish batch failed; deliveries stay queued in the database", "error", err)
						p.closeChannel()
						sleepCtx(ctx, 500*time.Millisecond)
					}
					break
				}
				if !more {
					break
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-time.After(p.cfg.PollInterval):
		}
	}
}

func (p *pubWorker) channel(ctx context.Context) (*amqp.Channel, error) {
	return p.confirmChannel.open(ctx, p.conn)
}

type pending struct {
	refs []Wire
	dc   *amqp.DeferredConfirmation
}

// confirmChannel is a broker channel in confirm mode and the messages the
// broker returns on it as unroutable.
type confirmChannel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
}

// open returns the channel, opening a new one if it is closed.
func (c *confirmChannel) open(ctx context.Context, conn *broker.Conn) (*amqp.Channel, error) {
	if c.ch != nil && !c.ch.IsClosed() {
		return c.ch, nil
	}
	ch, err := conn.Channel(ctx)
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	c.returns = ch.NotifyReturn(make(chan amqp.Return, 4096))
	c.ch = ch
	return ch, nil
}

func (c *confirmChannel) closeChannel() {
	if c.ch != nil {
		_ = c.ch.Close()
		c.ch = nil
	}
}

// outgoing is one delivery attempt to publish and where it goes.
type outgoing struct {
	userType, channel string
	wire              Wire
}

// publishGrouped publishes out as persistent envelopes of version v, one
// routing key per message and at most perMessage deliveries each, with
// deferred confirms. It returns the messages sent and the deliveries no
// queue is bound for (not published).
func publishGrouped(ctx context.Context, ch *amqp.Channel, topo broker.Topology, v, perMessage int, out []outgoing) ([]pending, []string, error) {
	byKey := map[string][]Wire{}
	var unroutable []string
	for _, o := range out {
		key := broker.RoutingKey(o.userType, o.channel)
		if !topo.Routable(key) {
			unroutable = append(unroutable, o.wire.ID)
			continue
		}
		byKey[key] = append(byKey[key], o.wire)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sent []pending
	stage := "publisher"
	if v == 2 {
		stage = "handoff"
	}
	for _, key := range keys {
		wires := byKey[key]
		for start := 0; start < len(wires); start += perMessage {
			part := wires[start:min(start+perMessage, len(wires))]
			spans := startPublishSpans(ctx, stage, key, part)
			body, err := json.Marshal(Envelope{V: v, Deliveries: part})
			if err != nil {
				endSpans(spans, "error")
				return sent, unroutable, err
			}
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, topo.Exchange, key, true, false, amqp.Publishing{
				ContentType:  "application/json",
				DeliveryMode: amqp.Persistent,
				MessageId:    part[0].ID,
				Timestamp:    time.Now(),
				Body:         body,
			})
			if err != nil {
				endSpans(spans, "error")
				return sent, unroutable, fmt.Errorf("publish: %w", err)
			}
			endSpans(spans, "published")
			sent = append(sent, pending{refs: part, dc: dc})
		}
	}
	return sent, unroutable, nil
}

// startPublishSpans starts a producer span for each delivery of part that
// continues a trace (recorded only when tracing is on) and gives the
// delivery the span's context for the listener to continue.
func startPublishSpans(ctx context.Context, stage, key string, part []Wire) []trace.Span {
	var spans []trace.Span
	for i := range part {
		w := &part[i]
		if w.TraceParent == "" {
			continue
		}
		sctx, span := tracing.Start(ctx, w.TraceParent, w.TraceState, "herald.publish", trace.SpanKindProducer,
			tracing.Stage.String(stage), attribute.String("messaging.rabbitmq.destination.routing_key", key))
		if w.TenantID != "" { // version 2 carries them; version 1 names the delivery only
			span.SetAttributes(tracing.Tenant.String(w.TenantID), tracing.Channel.String(w.Channel))
		}
		if !span.IsRecording() {
			continue // tracing is off: the delivery keeps its context
		}
		w.TraceParent, w.TraceState = tracing.Header(sctx)
		spans = append(spans, span)
	}
	return spans
}

// endSpans ends spans with outcome.
func endSpans(spans []trace.Span, outcome string) {
	for _, s := range spans {
		tracing.End(s, outcome, outcome == "error")
	}
}

// claimHandoffs is the publisher's claim of the relay's handoffs that
// never got their broker confirm (store.ClaimHandoffs).
const claimHandoffs store.ClaimKind = -1

// publishBatch claims one batch of the kind (marking it PUBLISHED in a
// transaction it keeps open), publishes it, waits for the broker's
// confirms and commits; rows whose message was nacked go back to their
// previous status first (for handoffs, whose rows were PUBLISHED already,
// a nack rolls the claim back instead, so the handoff stays due). A
// failure before the commit rolls everything back, so a delivery is
// PUBLISHED only once the broker has its message. It returns how many
// deliveries were claimed and whether more may wait.
func (p *pubWorker) publishBatch(ctx context.Context, kind store.ClaimKind) (int, bool, error) {
	n, more, err := p.publishClaim(ctx, kind)
	return n, more && err == nil, err
}

func (p *pubWorker) publishClaim(ctx context.Context, kind store.ClaimKind) (int, bool, error) {
	// A channel closed after a nack is reopened here, before any row is
	// claimed (a broker gone since Run checked makes this wait, holding
	// nothing).
	if _, err := p.channel(ctx); err != nil {
		return 0, false, err
	}
	began := time.Now()
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return 0, false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var rows []store.OutRow
	more := false
	if kind == claimHandoffs {
		var taken int
		rows, taken, err = store.ClaimHandoffs(ctx, tx, 10)
		more = taken > 0
		if err == nil && len(rows) == 0 && taken > 0 {
			// Every delivery of those handoffs was taken already.
			return 0, true, tx.Commit(ctx)
		}
	} else {
		if kind == store.ClaimStale {
			rows, err = store.ClaimStaleSince(ctx, tx, p.cfg.BatchSize, p.cfg.ReclaimAfter, p.staleSince)
		} else {
			rows, err = store.ClaimForPublish(ctx, tx, kind, p.cfg.BatchSize, p.cfg.ReclaimAfter)
		}
		more = len(rows) >= p.cfg.BatchSize
	}
	if err != nil || len(rows) == 0 {
		return 0, false, err
	}
	// Run waited for the broker; a channel lost since then fails the batch.
	ch := p.ch
	if ch == nil || ch.IsClosed() {
		return 0, false, errors.New("broker channel closed")
	}
	out := make([]outgoing, len(rows))
	for i, r := range rows {
		out[i] = outgoing{userType: r.UserType, channel: r.Channel, wire: Wire{Ref: store.Ref{ID: r.ID, Attempt: r.Attempt},
			TraceParent: r.TraceParent, TraceState: r.TraceState}}
	}
	inflight, unroutable, err := publishGrouped(ctx, ch, p.conn.Topology(), 1, p.cfg.PerMessage, out)
	if err != nil {
		return 0, false, err
	}
	p.cfg.Metrics.Unconfirmed(metrics.StagePublisher, len(inflight))
	waiting := len(inflight)
	defer func() { p.cfg.Metrics.Unconfirmed(metrics.StagePublisher, -waiting) }()
	confirmCtx, cancel := context.WithTimeout(ctx, p.cfg.ConfirmTimeout)
	defer cancel()
	var confirmed []string
	nackedIDs := map[string]bool{}
	for _, f := range inflight {
		ok, err := f.dc.WaitContext(confirmCtx)
		if err != nil {
			return 0, false, fmt.Errorf("wait for confirms: %w", err)
		}
		p.cfg.Metrics.Unconfirmed(metrics.StagePublisher, -1)
		waiting--
		if !ok {
			for _, r := range f.refs {
				nackedIDs[r.ID] = true
			}
			continue
		}
		for _, r := range f.refs {
			confirmed = append(confirmed, r.ID)
		}
	}
	nacked := len(nackedIDs)
	if nacked > 0 && kind == claimHandoffs {
		return 0, false, fmt.Errorf("broker nacked %d handed-off deliveries; their handoffs stay due", nacked)
	}
	returned := map[string]bool{}
	for _, id := range drainReturns(p.returns, p.log) {
		returned[id] = true
	}
	for _, id := range confirmed {
		if returned[id] {
			unroutable = append(unroutable, id)
		}
	}
	// The claim marked every row PUBLISHED; put back what the broker nacked.
	var revert []store.OutRow
	for _, r := range rows {
		if nackedIDs[r.ID] {
			revert = append(revert, r)
		}
	}
	if err := store.RevertPublished(ctx, tx, revert); err != nil {
		return 0, false, err
	}
	if len(unroutable) > 0 {
		if err := failUnroutable(ctx, tx, unroutable); err != nil {
			return 0, false, err
		}
		p.log.Error("deliveries failed: no queue bound for their routing key", "count", len(unroutable))
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, fmt.Errorf("commit published: %w", err)
	}
	if nacked > 0 {
		p.log.Warn("broker nacked messages; their deliveries will be published again", "deliveries", nacked)
		// A quorum queue whose leader was lost can keep nacking this
		// channel's publishes for seconds; a new channel finds the new
		// leader at once (see Handoff.nacked).
		p.closeChannel()
	}
	if kind == claimHandoffs {
		p.log.Warn("deliveries the relay handed off without a broker confirm were published again", "deliveries", len(rows))
	}
	if p.cfg.Metrics != nil {
		p.cfg.Metrics.PublishBatch(metrics.StagePublisher, len(rows), time.Since(began))
		channelOf := make(map[string]string, len(rows))
		for _, r := range rows {
			channelOf[r.ID] = r.Channel
		}
		for _, id := range unroutable {
			p.cfg.Metrics.Delivery(channelOf[id], "", metrics.OutcomeFailed, 1)
		}
	}
	return len(rows), more, nil
}

func failUnroutable(ctx context.Context, q store.Querier, ids []string) error {
	_, err := q.Exec(ctx, `UPDATE deliveries SET status = 'FAILED', updated_at = now(),
		last_error = 'unroutable: no queue is bound for routing key ' || user_type || '.' || channel
		WHERE delivery_id = ANY($1::uuid[]) AND status IN ('PENDING', 'RETRY', 'PUBLISHED')`, ids)
	if err != nil {
		return fmt.Errorf("fail unroutable: %w", err)
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
