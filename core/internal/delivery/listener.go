package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/metrics"
	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/tracing"
	"github.com/heraldhq/herald/sdk"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Sender hands a batch of deliveries of one channel to its plugin. The
// plugin host implements it; it returns the results and the provider that
// served the batch. A non-nil error means the whole batch failed.
type Sender interface {
	Send(ctx context.Context, channel string, batch []sdk.Delivery) ([]sdk.Result, string, error)
}

// ListenerConfig tunes the listeners.
type ListenerConfig struct {
	// Lease bounds one attempt; SendTimeout defaults to half of it.
	Lease time.Duration
	// SendTimeout bounds one Send call (default: half the lease).
	SendTimeout time.Duration
	// DefaultPrefetch and DefaultConcurrency apply to queues that set none.
	DefaultPrefetch    int
	DefaultConcurrency int
	// Metrics records outcomes and commit-to-Send latency (nil: none).
	Metrics *metrics.Metrics
}

func (c *ListenerConfig) setDefaults() {
	if c.Lease <= 0 {
		c.Lease = 2 * time.Minute
	}
	if c.SendTimeout <= 0 {
		c.SendTimeout = c.Lease / 2
	}
	if c.DefaultPrefetch <= 0 {
		c.DefaultPrefetch = 20
	}
	if c.DefaultConcurrency <= 0 {
		c.DefaultConcurrency = 4
	}
}

// Listener consumes every queue of the topology with manual acks: for each
// message it claims the deliveries (skipping ones already past that
// attempt), sends them through their channel's plugin, records the outcome
// and only then acks.
type Listener struct {
	pool   *pgxpool.Pool
	conn   *broker.Conn
	sender Sender
	rules  func() *rules.RuleSet
	cfg    ListenerConfig
	log    hclog.Logger
	guard  *inflight

	mu      sync.Mutex
	runCtx  context.Context // set while Run runs
	wg      sync.WaitGroup
	started map[string]bool // queues being consumed
}

// NewListener returns a listener; call Run to start it.
func NewListener(pool *pgxpool.Pool, conn *broker.Conn, sender Sender, ruleset func() *rules.RuleSet, log hclog.Logger, cfg ListenerConfig) *Listener {
	cfg.setDefaults()
	log = log.Named("listener")
	return &Listener{pool: pool, conn: conn, sender: sender, rules: ruleset, cfg: cfg, log: log,
		guard: newInflight(pool.Config().ConnConfig, log)}
}

// Run consumes until ctx ends, resubscribing after broker failures. On
// return every in-flight message has been recorded and acked (or will be
// redelivered by the broker).
func (l *Listener) Run(ctx context.Context) error {
	l.mu.Lock()
	l.runCtx, l.started = ctx, map[string]bool{}
	l.mu.Unlock()
	for _, q := range l.conn.Topology().Queues {
		l.AddQueue(q)
	}
	<-ctx.Done()
	l.mu.Lock()
	l.runCtx = nil // no AddQueue from here on, so Wait races no Add
	l.mu.Unlock()
	l.wg.Wait()
	l.guard.close(context.Background())
	return nil
}

// AddQueue starts consuming q (a queue a rules reload added) unless it is
// consumed already. Before Run it does nothing: Run consumes every queue of
// the topology.
func (l *Listener) AddQueue(q broker.Queue) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runCtx == nil || l.started[q.Name] {
		return
	}
	l.started[q.Name] = true
	ctx := l.runCtx
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.consumeQueue(ctx, q)
	}()
}

func (l *Listener) consumeQueue(ctx context.Context, q broker.Queue) {
	prefetch, workers := q.Prefetch, q.Concurrency
	if prefetch <= 0 {
		prefetch = l.cfg.DefaultPrefetch
	}
	if workers <= 0 {
		workers = l.cfg.DefaultConcurrency
	}
	log := l.log.With("queue", q.Name)
	for ctx.Err() == nil {
		err := func() error {
			ch, err := l.conn.Channel(ctx)
			if err != nil {
				return err
			}
			defer ch.Close()
			if err := ch.Qos(prefetch, 0, false); err != nil {
				return fmt.Errorf("qos: %w", err)
			}
			msgs, err := ch.ConsumeWithContext(ctx, q.Name, "", false, false, false, false, nil)
			if err != nil {
				return fmt.Errorf("consume: %w", err)
			}
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for m := range msgs {
						l.handle(ctx, log, m)
					}
				}()
			}
			wg.Wait()
			return errors.New("consumer channel closed")
		}()
		if ctx.Err() != nil {
			return
		}
		log.Warn("consumer stopped; resubscribing", "error", err)
		sleepCtx(ctx, 500*time.Millisecond)
	}
}

// handle processes one message. It uses a context that outlives ctx so a
// shutdown finishes recording what was sent before acking.
func (l *Listener) handle(ctx context.Context, log hclog.Logger, m amqp.Delivery) {
	env, err := DecodeEnvelope(m.Body)
	if err != nil {
		// Malformed input never blocks other work: log and drop it.
		log.Error("dropping malformed message", "error", err, "message_id", m.MessageId)
		l.cfg.Metrics.Delivery("", "", metrics.OutcomeDropped, 1)
		_ = m.Ack(false)
		return
	}
	work := context.WithoutCancel(ctx)
	// Hold each referenced attempt against a duplicate message being sent
	// at the same time, then find what still waits for it: a version-2
	// message is checked in the same round trip as its locks.
	keys := make([]string, len(env.Deliveries))
	refs := env.Refs()
	for i, r := range refs {
		keys[i] = attemptKey(r.ID, r.Attempt)
	}
	var checkRefs []store.Ref
	if env.V == 2 {
		checkRefs = refs
	}
	held, due, checked := l.guard.take(work, keys, checkRefs)
	wires := env.Deliveries
	if len(held) < len(keys) {
		// Another listener is sending those attempts and will record
		// them; if it dies first, the broker redelivers its own message.
		log.Debug("skipping deliveries another listener is sending", "count", len(keys)-len(held))
		mine := map[string]bool{}
		for _, k := range held {
			mine[k] = true
		}
		wires = nil
		for i, r := range env.Deliveries {
			if mine[keys[i]] {
				wires = append(wires, r)
			}
		}
	}
	var claimed []store.Claimed
	if checked {
		for _, w := range wires {
			if due[w.ID] {
				claimed = append(claimed, w.claimed())
			}
		}
	} else {
		claimed, err = l.load(work, env.V, wires)
	}
	if err != nil {
		log.Warn("loading deliveries failed; message goes back to the queue", "error", err)
		sleepCtx(ctx, 200*time.Millisecond)
		l.guard.release(work, held) // before the nack: the redelivery must find them free
		_ = m.Nack(false, true)
		return
	}
	if skipped := len(wires) - len(claimed); skipped > 0 {
		log.Debug("skipping deliveries already handled", "count", skipped)
	}
	if len(claimed) > 0 {
		if err := l.sendAndRecord(work, claimed); err != nil {
			// Nothing was recorded: give the message back so the attempt is
			// made again (the provider sees the same idempotency key).
			log.Error("recording outcomes failed; message goes back to the queue", "error", err)
			l.guard.release(work, held)
			_ = m.Nack(false, true)
			return
		}
	}
	// Recorded: a copy of these attempts now fails the database guard, so
	// the locks can go with the next batch of releases.
	l.guard.releaseLater(held)
	if err := m.Ack(false); err != nil {
		log.Warn("ack failed; the message will be redelivered and skipped", "error", err)
	}
}

// load returns the deliveries of the message that still wait for the
// attempt it names: read from the database for a version-1 message, taken
// from the message itself for a version-2 one once the database says the
// attempt is still due.
func (l *Listener) load(ctx context.Context, v int, wires []Wire) ([]store.Claimed, error) {
	refs := make([]store.Ref, len(wires))
	for i, w := range wires {
		refs[i] = w.Ref
	}
	if v == 1 {
		claimed, err := store.LoadForSend(ctx, l.pool, refs)
		// The message's trace context is the publish span's, a child of
		// the one stored with the row.
		var traced map[string]Wire
		for _, w := range wires {
			if w.TraceParent != "" {
				if traced == nil {
					traced = make(map[string]Wire, len(wires))
				}
				traced[w.ID] = w
			}
		}
		for i := range claimed {
			if w, ok := traced[claimed[i].ID]; ok {
				claimed[i].TraceParent, claimed[i].TraceState = w.TraceParent, w.TraceState
			}
		}
		return claimed, err
	}
	due, err := store.Sendable(ctx, l.pool, refs)
	if err != nil {
		return nil, err
	}
	claimed := make([]store.Claimed, 0, len(due))
	for _, w := range wires {
		if due[w.ID] {
			claimed = append(claimed, w.claimed())
		}
	}
	return claimed, nil
}

func (l *Listener) record(ctx context.Context, outs []store.Outcome) error {
	var err error
	for i := range 5 {
		if _, err = store.RecordOutcomes(ctx, l.pool, outs); err == nil {
			return nil
		}
		sleepCtx(ctx, time.Duration(i+1)*200*time.Millisecond)
	}
	return err
}

// describer is the optional part of a Sender that says what the plugin
// serving a channel declared (the plugin host implements it).
type describer interface {
	Describe(channel string) (sdk.Description, bool)
}

// The plugin host tells the listener its plugins' MaxBatch.
var _ describer = (*pluginhost.Host)(nil)

// sendAndRecord groups the claimed deliveries by channel and sends each
// group in chunks of the serving plugin's MaxBatch, recording each chunk's
// outcomes as soon as its Send returns. A daemon killed mid-message so
// leaves unrecorded only the chunk inside the plugin (sent again after
// the restart: the provider's duplicates), not every chunk of the message
// sent before it. A record that fails returns its error: the caller gives
// the message back, and the redelivery skips the chunks recorded already.
func (l *Listener) sendAndRecord(ctx context.Context, claimed []store.Claimed) error {
	byChannel := map[string][]store.Claimed{}
	for _, c := range claimed {
		byChannel[c.Channel] = append(byChannel[c.Channel], c)
	}
	channels := make([]string, 0, len(byChannel))
	for ch := range byChannel {
		channels = append(channels, ch)
	}
	sort.Strings(channels)
	d, _ := l.sender.(describer)
	for _, chName := range channels {
		group := byChannel[chName]
		size := len(group)
		if d != nil {
			if desc, ok := d.Describe(chName); ok && desc.MaxBatch > 0 {
				size = desc.MaxBatch
			}
		}
		for start := 0; start < len(group); start += size {
			outs := l.send(ctx, group[start:min(start+size, len(group))])
			if err := l.record(ctx, outs); err != nil {
				return err
			}
			l.removeGone(ctx, outs)
			l.count(chName, outs)
		}
	}
	return nil
}

// removeGone deletes the devices the provider reported gone
// (sdk.Result.GoneDevices) from the directory, so no later delivery tries
// them. A failure is logged, not returned: the outcome is recorded, and
// the provider reports the device gone again next time.
func (l *Listener) removeGone(ctx context.Context, outs []store.Outcome) {
	for _, o := range outs {
		if len(o.GoneDevices) == 0 {
			continue
		}
		n, err := store.RemoveDevices(ctx, l.pool, o.TenantID, o.UserID, o.GoneDevices)
		if err != nil {
			l.log.Warn("could not remove gone devices", "delivery", o.ID, "error", err)
			continue
		}
		l.log.Info("removed devices the provider reported gone", "delivery", o.ID, "tenant", o.TenantID,
			"user", o.UserID, "devices", n)
	}
}

// count adds the recorded outcomes of channel to the metrics.
func (l *Listener) count(channel string, outs []store.Outcome) {
	if l.cfg.Metrics == nil {
		return
	}
	type key struct{ provider, outcome string }
	n := map[key]int{}
	for _, o := range outs {
		outcome := metrics.OutcomeRetry
		switch o.Status {
		case store.StatusSent:
			outcome = metrics.OutcomeSent
		case store.StatusFailed:
			outcome = metrics.OutcomeFailed
		case store.StatusSkipped:
			outcome = metrics.OutcomeSkipped
		}
		n[key{o.Provider, outcome}]++
	}
	for k, v := range n {
		l.cfg.Metrics.Delivery(channel, k.provider, k.outcome, v)
	}
}

// send groups the claimed deliveries by channel, sends each group and turns
// the results into outcomes.
func (l *Listener) send(ctx context.Context, claimed []store.Claimed) []store.Outcome {
	byChannel := map[string][]store.Claimed{}
	for _, c := range claimed {
		byChannel[c.Channel] = append(byChannel[c.Channel], c)
	}
	channels := make([]string, 0, len(byChannel))
	for ch := range byChannel {
		channels = append(channels, ch)
	}
	sort.Strings(channels)
	rs := l.rules()
	var outs []store.Outcome
	for _, chName := range channels {
		group := byChannel[chName]
		policy := channel.DefaultRetry
		if rs != nil {
			if cc, ok := rs.Channel(chName); ok && cc.Retry.MaxAttempts > 0 {
				policy = cc.Retry
			}
		}
		started := time.Now()
		latency := l.cfg.Metrics.SendLatencies(chName)
		batch := make([]sdk.Delivery, len(group))
		for i, c := range group {
			batch[i] = toSDK(c)
			if at, ok := store.WrittenAt(c.ID); ok && c.Attempt == 1 {
				latency(started.Sub(at))
			}
		}
		spanCtx, spans := startDeliverSpans(ctx, chName, group)
		for i := range batch {
			// Each delivery's own trace, for plugins that send them one by
			// one (sdk.DeliveryContext); the call's context is the first's.
			batch[i].TraceParent, batch[i].TraceState = tracing.Header(trace.ContextWithSpan(ctx, spans[i]))
		}
		sendCtx, cancel := context.WithTimeout(spanCtx, l.cfg.SendTimeout)
		results, provider, err := l.sender.Send(sendCtx, chName, batch)
		cancel()
		if notAttempted(err) {
			l.log.Debug("no provider took the batch; its deliveries wait as RETRY", "channel", chName,
				"deliveries", len(group), "error", err)
		}
		byID := map[string]sdk.Result{}
		if err == nil {
			for _, r := range results {
				byID[r.DeliveryID] = r
			}
		}
		for i, c := range group {
			o := store.Outcome{ID: c.ID, Attempt: c.Attempt, Provider: provider, StartedAt: started}
			r, ok := byID[c.ID]
			res := Outcome{Kind: Retryable}
			switch {
			case notAttempted(err):
				// No provider could take the batch (refused, restarting,
				// circuit open, throttled, shutting down).
				o.Kind = "unavailable"
				res = Outcome{Kind: Unavailable, RetryAfter: sdk.RetryAfter(err), Error: err.Error()}
			case err != nil && sdk.IsSkipped(err):
				o.Kind, res = sdk.OutcomeSkipped.String(), Outcome{Kind: Skipped, Error: err.Error()}
			case err != nil:
				o.Kind, res.Error = "error", err.Error()
			case !ok:
				o.Kind, res.Error = "error", "plugin returned no result for the delivery"
			default:
				o.Kind, res.Error, res.RetryAfter, res.Code = r.Outcome.String(), r.Reason, r.RetryAfter, r.Code
				o.RetryAfter = r.RetryAfter
				switch r.Outcome {
				case sdk.OutcomeSent:
					res.Kind = Sent
				case sdk.OutcomePermanent:
					res.Kind = Permanent
				case sdk.OutcomeSkipped:
					res.Kind = Skipped
				}
				o.ProviderMessageID = r.ProviderMessageID
				if len(r.GoneDevices) > 0 {
					o.TenantID = c.TenantID
					o.UserID, o.GoneDevices = goneOf(c, r.GoneDevices)
				}
			}
			step := NextStep(res, Attempt{Number: c.Attempt, Max: c.MaxAttempts, BestEffort: c.BestEffort}, policy, time.Now())
			o.Status, o.NextAttemptAt, o.NotAttempted = step.Status, step.At, step.NotAttempted
			// A plugin's whole-call error is its own text, as long as it
			// likes; results' reasons are bounded by the host already.
			o.Error = pluginhost.Bound(step.Error, pluginhost.MaxReasonBytes)
			if spans[i].IsRecording() {
				spans[i].SetAttributes(tracing.Provider.String(provider))
			}
			tracing.End(spans[i], strings.ToLower(o.Status), o.Status == store.StatusFailed)
			outs = append(outs, o)
		}
	}
	return outs
}

// startDeliverSpans starts a consumer span for each delivery of group,
// child of the trace context its message (or row) carried. It returns the
// context the plugin's Send is called with: the first delivery's span,
// linked to the others' (a Send span has one parent).
func startDeliverSpans(ctx context.Context, channel string, group []store.Claimed) (context.Context, []trace.Span) {
	spans := make([]trace.Span, len(group))
	sendCtx := ctx
	var links []trace.Link
	for i, c := range group {
		sctx, span := tracing.Start(ctx, c.TraceParent, c.TraceState, "herald.deliver", trace.SpanKindConsumer,
			tracing.Tenant.String(c.TenantID), tracing.Channel.String(channel), attribute.Int("herald.attempt", c.Attempt))
		spans[i] = span
		if i == 0 {
			sendCtx = sctx
		} else if sc := trace.SpanContextFromContext(sctx); sc.IsValid() && span.IsRecording() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return tracing.WithLinks(sendCtx, links), spans
}

// notAttempted reports a Send error that means no provider was handed
// the batch.
func notAttempted(err error) bool {
	return err != nil && (errors.Is(err, pluginhost.ErrNoProvider) || errors.Is(err, pluginhost.ErrCircuitOpen) ||
		errors.Is(err, pluginhost.ErrThrottled) || errors.Is(err, pluginhost.ErrClosed))
}

func toSDK(c store.Claimed) sdk.Delivery {
	d := sdk.Delivery{
		DeliveryID:     c.ID,
		IdempotencyKey: c.TenantID + ":" + c.ID,
		TenantID:       c.TenantID,
		EventID:        c.EventID,
		EventType:      c.EventType,
		NotificationID: c.NotificationID,
		Channel:        c.Channel,
		Severity:       c.Severity,
		Attempt:        c.Attempt,
		CreatedAt:      c.CreatedAt,
	}
	_ = json.Unmarshal(c.Recipient, &d.Recipient)
	_ = json.Unmarshal(c.Content, &d.Content)
	return d
}

// goneOf returns the user id of a claimed delivery's recipient and those
// of the gone addresses a plugin reported that are the recipient's own
// devices (as the delivery carried them): a plugin cannot have anybody
// else's devices removed, nor send the host a list of any length.
func goneOf(c store.Claimed, gone []string) (string, []string) {
	var r sdk.Recipient
	_ = json.Unmarshal(c.Recipient, &r)
	own := map[string]bool{}
	for _, t := range r.DeviceTokens {
		own[t] = true
	}
	for _, d := range r.Devices {
		own[d.Token] = true
	}
	var out []string
	for _, g := range gone {
		if own[g] {
			out = append(out, g)
			delete(own, g)
		}
	}
	return r.UserID, out
}
