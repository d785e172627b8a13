package delivery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/metrics"
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
// once; one whose daemon died is taken over as soon as a publisher sees
// its owner's liveness lock free (see Liveness), or after Grace when it
// has no owner; either way a publisher claims its deliveries
// (store.ClaimHandoffs) and publishes them again. A delivery published
// twice that way is sent once: listeners check each attempt in the
// database before sending it.
//
// A confirmed round's handoff rows are not deleted in a transaction of
// their own: the relay's next transaction that writes a handoff row takes
// them (TakeConfirmed) and deletes them with the same round trip, so a
// busy relay pays no commit for them. Rows no relay took within
// deleteAfter are deleted by the handoff itself. A row left undeleted
// (that delete failed, the daemon died first) only comes due later, and
// its deliveries are published again, which the listeners' check makes
// harmless.
type Handoff struct {
	pool    *pgxpool.Pool
	conn    *broker.Conn
	live    *Liveness // nil: the rows have no owner, only their grace
	cfg     PublisherConfig
	log     hclog.Logger
	recover func() // wakes the publisher to take over due handoffs
	batches chan handoffBatch
	up      atomic.Bool // the broker channel is open
	// nacked is the broker channel a round was nacked (or failed) on,
	// set by the confirming goroutine; Run closes it if it is still the
	// current one. A quorum queue nacks a channel's publishes while its
	// leader is gone (a RabbitMQ node lost), and that channel can keep
	// being nacked for seconds after a new leader took over; a new
	// channel finds the new leader at once.
	nacked atomic.Pointer[amqp.Channel]

	// doneMu guards done: the handoff rows of confirmed rounds still to
	// delete, and sweeping: a delete of them is scheduled.
	doneMu   sync.Mutex
	done     []int64
	sweeping bool
	// deleteAfter is how long confirmed rows wait for a relay
	// transaction to delete them before the handoff deletes them itself.
	deleteAfter time.Duration

	confirmChannel
}

// handoffDeleteAfter is Handoff.deleteAfter's default: a relay that runs
// at all runs more often than that, and an idle one leaves few rows.
const handoffDeleteAfter = 200 * time.Millisecond

// handoffDeleteBatch is how many confirmed rows make the handoff delete
// them at once rather than wait for a relay.
const handoffDeleteBatch = 1000

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
// Its handoff rows name live's id as their owner (live may be nil).
func NewHandoff(pool *pgxpool.Pool, conn *broker.Conn, live *Liveness, log hclog.Logger, cfg PublisherConfig, recover func()) *Handoff {
	cfg.setDefaults()
	if recover == nil {
		recover = func() {}
	}
	return &Handoff{pool: pool, conn: conn, live: live, cfg: cfg, log: log.Named("handoff"), recover: recover,
		batches: make(chan handoffBatch, handoffQueue), deleteAfter: handoffDeleteAfter}
}

// TakeConfirmed returns the handoff rows whose deliveries the broker
// confirmed and that are not deleted yet, and forgets them: the caller
// deletes them in its transaction (store.InsertHandoff), and gives them
// back with ReturnConfirmed if that transaction does not commit.
func (h *Handoff) TakeConfirmed() []int64 {
	h.doneMu.Lock()
	defer h.doneMu.Unlock()
	ids := h.done
	h.done = nil
	return ids
}

// ReturnConfirmed gives back rows TakeConfirmed returned that were not
// deleted (the caller's transaction rolled back); they are deleted later.
func (h *Handoff) ReturnConfirmed(ids []int64) { h.confirmed(ids) }

// confirmed adds rows to delete and makes sure a delete of them is
// scheduled: after deleteAfter, or at once when many wait.
func (h *Handoff) confirmed(ids []int64) {
	if len(ids) == 0 {
		return
	}
	h.doneMu.Lock()
	h.done = append(h.done, ids...)
	now := len(h.done) >= handoffDeleteBatch
	schedule := !now && !h.sweeping
	if schedule {
		h.sweeping = true
	}
	h.doneMu.Unlock()
	switch {
	case now:
		h.sweep(false)
	case schedule:
		time.AfterFunc(h.deleteAfter, func() { h.sweep(true) })
	}
}

// sweep deletes the confirmed rows no relay transaction took; scheduled
// says it is the scheduled delete.
func (h *Handoff) sweep(scheduled bool) {
	h.doneMu.Lock()
	ids := h.done
	h.done = nil
	if scheduled {
		h.sweeping = false
	}
	h.doneMu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// If this fails the rows become due later and the deliveries are
	// published again, which the listeners' check makes harmless.
	if err := store.DeleteHandoffs(ctx, h.pool, ids); err != nil {
		h.log.Warn("confirmed handoffs not deleted; their deliveries will be published again", "error", err)
	}
}

// Grace is how long a handoff row may wait for its confirm before the
// publisher takes its deliveries over.
func (h *Handoff) Grace() time.Duration { return h.cfg.ConfirmTimeout + 10*time.Second }

// Owner is the daemon's liveness id that the handoff rows carry (0: none).
func (h *Handoff) Owner() int32 { return h.live.ID() }

// Ready reports whether the handoff takes a batch now: its broker channel
// is open and its queue has room.
func (h *Handoff) Ready() bool { return h.up.Load() && len(h.batches) < cap(h.batches) }

// Offer hands over the deliveries of a committed relay batch and its
// handoff row. It never waits: a batch the queue has no room for (it
// filled since Ready) is given up to the publisher at once.
func (h *Handoff) Offer(_ context.Context, id int64, dels []store.NewDelivery) {
	b := handoffBatch{id: id, dels: dels}
	select {
	case h.batches <- b:
	default:
		h.giveUp([]handoffBatch{b})
	}
}

// handoffRound is what one publish round sent: its batches and the
// broker's confirms still to come.
type handoffRound struct {
	batches    []handoffBatch
	sent       []pending
	unroutable []string // deliveries no queue is bound for
	err        error    // the round failed before all its messages went out
	// returns is the broker channel's returned messages: the broker
	// sends a basic.return before the confirm of the same message.
	returns chan amqp.Return
	// ch is the broker channel the round went out on.
	ch *amqp.Channel
	// began is when the round started publishing; n is its deliveries.
	began time.Time
	n     int
}

// handoffPipeline bounds the rounds published and not yet confirmed.
const handoffPipeline = 16

// Run publishes handed-over batches until ctx ends. Publishing does not
// wait for the previous round's confirms: a second goroutine waits for
// them, in order, and deletes the confirmed rounds' handoff rows.
func (h *Handoff) Run(ctx context.Context) error {
	rounds := make(chan handoffRound, handoffPipeline)
	confirmed := make(chan struct{})
	go func() {
		defer close(confirmed)
		h.confirm(ctx, rounds)
	}()
	defer func() {
		h.up.Store(false)
		close(rounds)
		<-confirmed
		h.closeChannel()
		h.failQueued()
		h.sweep(false) // no relay will take them any more
	}()
	for ctx.Err() == nil {
		if bad := h.nacked.Swap(nil); bad != nil && bad == h.ch {
			h.closeChannel()
		}
		if h.ch == nil || h.ch.IsClosed() {
			// Opening a channel waits for the broker: take no batches
			// meanwhile.
			h.up.Store(false)
		}
		if _, err := h.channel(ctx); err != nil {
			h.up.Store(false)
			if ctx.Err() != nil {
				break
			}
			h.log.Warn("broker channel unavailable; the relay leaves deliveries to the publisher", "error", err)
			h.failQueued()
			sleepCtx(ctx, 500*time.Millisecond)
			continue
		}
		h.up.Store(true)
		var batches []handoffBatch
		select {
		case <-ctx.Done():
			continue
		case b := <-h.batches:
			batches = append(batches, b)
		}
		n := len(batches[0].dels)
	gather:
		for n < handoffGather {
			select {
			case b := <-h.batches:
				batches = append(batches, b)
				n += len(b.dels)
			default:
				break gather
			}
		}
		round := h.publish(ctx, batches)
		if round.err != nil {
			h.up.Store(false)
			h.closeChannel() // the rounds in flight on it fail too
		}
		rounds <- round
	}
	return nil
}

// publish sends the deliveries of a round's batches with deferred
// confirms. Deliveries no queue is bound for are set aside as unroutable.
func (h *Handoff) publish(ctx context.Context, batches []handoffBatch) handoffRound {
	round := handoffRound{batches: batches, returns: h.returns, ch: h.ch, began: time.Now()}
	n := 0
	for _, b := range batches {
		n += len(b.dels)
	}
	out := make([]outgoing, 0, n)
	for _, b := range batches {
		for _, d := range b.dels {
			out = append(out, outgoing{userType: d.UserType, channel: d.Channel, wire: wireOf(d)})
		}
	}
	round.sent, round.unroutable, round.err = publishGrouped(ctx, h.ch, h.conn.Topology(), 2, h.cfg.PerMessage, out)
	round.n = len(out)
	h.cfg.Metrics.Unconfirmed(metrics.StageHandoff, len(round.sent))
	return round
}

// confirm waits for each round's confirms, in order, and leaves the
// handoff rows of the confirmed ones to delete (see TakeConfirmed); a
// round that failed is given up. It returns once rounds is closed and
// drained.
func (h *Handoff) confirm(ctx context.Context, rounds <-chan handoffRound) {
	work := context.WithoutCancel(ctx)
	for round := range rounds {
		done := []handoffRound{round}
	more:
		for len(done) < handoffPipeline {
			select {
			case r, ok := <-rounds:
				if !ok {
					break more
				}
				done = append(done, r)
			default:
				break more
			}
		}
		var ids []int64
		var unroutable []string
		drained := map[chan amqp.Return]bool{}
		for _, r := range done {
			err := h.await(work, r)
			h.cfg.Metrics.Unconfirmed(metrics.StageHandoff, -len(r.sent))
			if err != nil {
				h.log.Warn("handoff publish failed; the publisher takes its deliveries over", "error", err)
				h.nacked.Store(r.ch)
				h.giveUp(r.batches)
				continue
			}
			h.cfg.Metrics.PublishBatch(metrics.StageHandoff, r.n, time.Since(r.began))
			unroutable = append(unroutable, r.unroutable...)
			if !drained[r.returns] {
				drained[r.returns] = true
				unroutable = append(unroutable, drainReturns(r.returns, h.log)...)
			}
			for _, b := range r.batches {
				ids = append(ids, b.id)
			}
		}
		if len(unroutable) > 0 {
			if err := failUnroutable(work, h.pool, unroutable); err != nil {
				h.log.Warn("unroutable deliveries not marked FAILED; the stale reclaim finds them", "error", err)
			} else {
				h.log.Error("deliveries failed: no queue bound for their routing key", "count", len(unroutable))
				h.countUnroutable(done, unroutable)
			}
		}
		h.confirmed(ids)
	}
}

// countUnroutable adds the unroutable deliveries of rounds, by channel,
// to the failed ones of the metrics.
func (h *Handoff) countUnroutable(rounds []handoffRound, ids []string) {
	if h.cfg.Metrics == nil {
		return
	}
	channelOf := map[string]string{}
	for _, r := range rounds {
		for _, b := range r.batches {
			for _, d := range b.dels {
				channelOf[d.ID] = d.Channel
			}
		}
	}
	for _, id := range ids {
		h.cfg.Metrics.Delivery(channelOf[id], "", metrics.OutcomeFailed, 1)
	}
}

// await waits for every confirm of a round.
func (h *Handoff) await(ctx context.Context, r handoffRound) error {
	if r.err != nil {
		return r.err
	}
	confirmCtx, cancel := context.WithTimeout(ctx, h.cfg.ConfirmTimeout)
	defer cancel()
	for _, p := range r.sent {
		ok, err := p.dc.WaitContext(confirmCtx)
		if err != nil {
			return fmt.Errorf("wait for confirms: %w", err)
		}
		if !ok {
			return errors.New("broker nacked a message (or its channel closed)")
		}
	}
	return nil
}

// giveUp makes the handoff rows of a round due now, so the publisher takes
// their deliveries over without waiting for Grace.
func (h *Handoff) giveUp(batches []handoffBatch) {
	if len(batches) == 0 {
		return
	}
	ids := make([]int64, len(batches))
	for i, b := range batches {
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
func (h *Handoff) failQueued() {
	var batches []handoffBatch
	for {
		select {
		case b := <-h.batches:
			batches = append(batches, b)
		default:
			h.giveUp(batches)
			return
		}
	}
}

func (h *Handoff) channel(ctx context.Context) (*amqp.Channel, error) {
	return h.confirmChannel.open(ctx, h.conn)
}

// drainReturns collects the deliveries of messages the broker returned as
// unroutable; the broker sends basic.return before the confirm of the same
// message, so after the confirms every return is here.
func drainReturns(returns chan amqp.Return, log hclog.Logger) []string {
	var ids []string
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				return ids // the channel closed
			}
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
