package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Handoff is the relay's fast lane to the broker. The relay writes the
// deliveries of a batch as PUBLISHED, together with a handoff row naming
// them (store.InsertHandoff), and hands them over once it committed. The
// handoff publishes them as version-2 messages, which carry what the
// plugin is sent, waits for the broker's confirms and deletes the handoff
// row. So a new delivery costs no claim by the publisher and no read of its
// row by the listener.
//
// Nothing is lost on the way: a handoff whose publish fails is made due at
// once, and one whose daemon died becomes due after Grace; either way the
// publisher turns its deliveries back into PENDING ones
// (store.RecoverHandoffs) and publishes them as usual. A delivery published
// twice that way is sent once: listeners check each attempt in the
// database before sending it.
type Handoff struct {
	pool    *pgxpool.Pool
	conn    *broker.Conn
	cfg     PublisherConfig
	log     hclog.Logger
	recover func() // wakes the publisher to take over due handoffs
	batches chan handoffBatch
	up      atomic.Bool // the broker channel is open

	ch      *amqp.Channel
	returns chan amqp.Return
}

type handoffBatch struct {
	id   int64
	dels []store.NewDelivery
}

// handoffQueue bounds the batches waiting for the broker; while it is full
// (or the broker is down) the relay leaves new deliveries to the
// publisher.
const handoffQueue = 64

// handoffGather bounds the deliveries one round publishes before it waits
// for their confirms.
const handoffGather = 10000

// NewHandoff returns the relay's handoff; recover wakes the publisher.
func NewHandoff(pool *pgxpool.Pool, conn *broker.Conn, log hclog.Logger, cfg PublisherConfig, recover func()) *Handoff {
	cfg.setDefaults()
	if recover == nil {
		recover = func() {}
	}
	return &Handoff{pool: pool, conn: conn, cfg: cfg, log: log.Named("handoff"), recover: recover,
		batches: make(chan handoffBatch, handoffQueue)}
}

// Grace is how long a handoff row may wait for its confirm before the
// publisher takes its deliveries over.
func (h *Handoff) Grace() time.Duration { return h.cfg.ConfirmTimeout + 10*time.Second }

// Ready reports whether the handoff takes a batch now: its broker channel
// is open and its queue has room.
func (h *Handoff) Ready() bool { return h.up.Load() && len(h.batches) < cap(h.batches) }

// Offer hands over the deliveries of a committed relay batch and its
// handoff row. It waits while the queue is full, until ctx ends; a batch
// not taken stays with its handoff row, for the publisher after Grace.
func (h *Handoff) Offer(ctx context.Context, id int64, dels []store.NewDelivery) {
	select {
	case h.batches <- handoffBatch{id: id, dels: dels}:
	case <-ctx.Done():
	}
}

// Run publishes handed-over batches until ctx ends.
func (h *Handoff) Run(ctx context.Context) error {
	defer h.closeChannel()
	for ctx.Err() == nil {
		if _, err := h.channel(ctx); err != nil {
			h.up.Store(false)
			if ctx.Err() != nil {
				break
			}
			h.log.Warn("broker channel unavailable; the relay leaves deliveries to the publisher", "error", err)
			h.failQueued(ctx)
			sleepCtx(ctx, 500*time.Millisecond)
			continue
		}
		h.up.Store(true)
		var round []handoffBatch
		select {
		case <-ctx.Done():
			continue
		case b := <-h.batches:
			round = append(round, b)
		}
		n := len(round[0].dels)
	gather:
		for n < handoffGather {
			select {
			case b := <-h.batches:
				round = append(round, b)
				n += len(b.dels)
			default:
				break gather
			}
		}
		if err := h.publish(ctx, round); err != nil {
			h.up.Store(false)
			h.closeChannel()
			h.log.Warn("handoff publish failed; the publisher takes its deliveries over", "error", err)
			h.giveUp(round)
		}
	}
	h.up.Store(false)
	h.failQueued(ctx)
	return nil
}

// publish sends the deliveries of a round, waits for the broker's confirms
// and deletes the handoff rows. Deliveries no queue is bound for are
// FAILED as unroutable. An error leaves the round's rows to giveUp.
func (h *Handoff) publish(ctx context.Context, round []handoffBatch) error {
	topo := h.conn.Topology()
	byKey := map[string][]Wire{}
	var unroutable []string
	for _, b := range round {
		for _, d := range b.dels {
			key := broker.RoutingKey(d.UserType, d.Channel)
			if !topo.Routable(key) {
				unroutable = append(unroutable, d.ID)
				continue
			}
			byKey[key] = append(byKey[key], wireOf(d))
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var inflight []pending
	for _, key := range keys {
		wires := byKey[key]
		for start := 0; start < len(wires); start += h.cfg.PerMessage {
			part := wires[start:min(start+h.cfg.PerMessage, len(wires))]
			body, err := json.Marshal(Envelope{V: 2, Deliveries: part})
			if err != nil {
				return err
			}
			dc, err := h.ch.PublishWithDeferredConfirmWithContext(ctx, topo.Exchange, key, true, false, amqp.Publishing{
				ContentType:  "application/json",
				DeliveryMode: amqp.Persistent,
				MessageId:    part[0].ID,
				Timestamp:    time.Now(),
				Body:         body,
			})
			if err != nil {
				return fmt.Errorf("publish: %w", err)
			}
			inflight = append(inflight, pending{refs: part, dc: dc})
		}
	}
	confirmCtx, cancel := context.WithTimeout(ctx, h.cfg.ConfirmTimeout)
	defer cancel()
	for _, f := range inflight {
		ok, err := f.dc.WaitContext(confirmCtx)
		if err != nil {
			return fmt.Errorf("wait for confirms: %w", err)
		}
		if !ok {
			return fmt.Errorf("broker nacked a message of %d deliveries", len(f.refs))
		}
	}
	unroutable = append(unroutable, drainReturns(h.returns, h.log)...)
	work := context.WithoutCancel(ctx)
	if len(unroutable) > 0 {
		if err := failUnroutable(work, h.pool, unroutable); err != nil {
			return err
		}
		h.log.Error("deliveries failed: no queue bound for their routing key", "count", len(unroutable))
	}
	ids := make([]int64, len(round))
	for i, b := range round {
		ids[i] = b.id
	}
	// If this fails the rows become due later and the deliveries are
	// published again, which the listeners' check makes harmless.
	if err := store.DeleteHandoffs(work, h.pool, ids); err != nil {
		h.log.Warn("confirmed handoffs not deleted; their deliveries will be published again", "error", err)
	}
	return nil
}

// giveUp makes the handoff rows of a round due now, so the publisher takes
// their deliveries over without waiting for Grace.
func (h *Handoff) giveUp(round []handoffBatch) {
	if len(round) == 0 {
		return
	}
	ids := make([]int64, len(round))
	for i, b := range round {
		ids[i] = b.id
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := store.HandoffsDueNow(ctx, h.pool, ids); err != nil {
		h.log.Warn("handoffs not made due; the publisher takes them over after the grace period", "error", err)
	}
	h.recover()
}

// failQueued gives up every batch waiting in the queue.
func (h *Handoff) failQueued(ctx context.Context) {
	var round []handoffBatch
	for {
		select {
		case b := <-h.batches:
			round = append(round, b)
		default:
			h.giveUp(round)
			return
		}
	}
}

func (h *Handoff) channel(ctx context.Context) (*amqp.Channel, error) {
	if h.ch != nil && !h.ch.IsClosed() {
		return h.ch, nil
	}
	ch, err := h.conn.Channel(ctx)
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	h.returns = ch.NotifyReturn(make(chan amqp.Return, 4096))
	h.ch = ch
	return ch, nil
}

func (h *Handoff) closeChannel() {
	if h.ch != nil {
		_ = h.ch.Close()
		h.ch = nil
	}
}

// drainReturns collects the deliveries of messages the broker returned as
// unroutable; the broker sends basic.return before the confirm of the same
// message, so after the confirms every return is here.
func drainReturns(returns chan amqp.Return, log hclog.Logger) []string {
	var ids []string
	for {
		select {
		case r := <-returns:
			if env, err := DecodeEnvelope(r.Body); err == nil {
				for _, w := range env.Deliveries {
					ids = append(ids, w.ID)
				}
			}
			log.Error("message returned by the broker: no queue bound", "routing_key", r.RoutingKey, "reply", r.ReplyText)
		default:
			return ids
		}
	}
}
