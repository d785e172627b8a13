package delivery

import (
	"context"

	"github.com/heraldhq/herald/core/internal/store"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The entry points below let `herald bench` run the listener's and the
// handoff's database work with no broker (its database floor,
// core/internal/tools/bench/floor.go): the same code the daemon runs, so
// that the floor follows every change of that path.

// HandleMessage does for m what one of Run's consumers does for a message
// of its queue: hold and check its attempts, send the due ones through the
// Sender in chunks of the plugin's MaxBatch, record their outcomes
// (store.RecordOutcomes), then ack m (or nack it with requeue when
// recording failed). m.Acknowledger receives the ack.
func (l *Listener) HandleMessage(ctx context.Context, m amqp.Delivery) { l.handle(ctx, l.log, m) }

// CloseGuard ends the sessions of the listener's in-flight guard, dropping
// the locks they hold. Run does it when it returns; a caller of
// HandleMessage does it once it is done.
func (l *Listener) CloseGuard(ctx context.Context) { l.guard.close(ctx) }

// HandoffWire is the version-2 form in which the handoff publishes a
// delivery the relay just wrote (its first attempt).
func HandoffWire(d store.NewDelivery) Wire { return wireOf(d) }
