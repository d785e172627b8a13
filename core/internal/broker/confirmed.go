package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrNacked is what a Drain round returns (as a negative count) when the
// broker nacked any of its messages: Drain then opens a new channel (a
// quorum queue whose leader was lost keeps nacking the old one for
// seconds; a new channel reaches the new leader at once). The nacked rows
// are still unpublished and go out on the new channel.
var ErrNacked = errors.New("broker nacked messages")

// Drain publishes an outbox table's rows to the durable topic exchange
// until ctx ends: on a channel in confirm mode, it calls round, which
// publishes one batch and marks the confirmed rows, and returns how many
// it marked (0: none waiting, -1: the broker nacked some). It calls round
// again at once after a full round, after poll or a kick otherwise, and
// opens a new channel after a lost one or a nack. what names the messages
// in the log ("action": "action publisher: ...").
func (c *Conn) Drain(ctx context.Context, exchange, what string, log hclog.Logger, poll time.Duration, kick <-chan struct{},
	round func(context.Context, *amqp.Channel) (int, error)) {
	for {
		ch, err := c.Channel(ctx)
		if err != nil {
			return // ctx ended or the connection closed for good
		}
		err = drainOn(ctx, ch, exchange, poll, kick, round)
		if errors.Is(err, ErrNacked) {
			err = fmt.Errorf("broker nacked %s messages; they stay unpublished and go out again on a new channel: %w", what, err)
		}
		_ = ch.Close()
		if ctx.Err() != nil {
			return
		}
		log.Warn(what+" publisher: broker channel lost; reconnecting", "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func drainOn(ctx context.Context, ch *amqp.Channel, exchange string, poll time.Duration, kick <-chan struct{},
	round func(context.Context, *amqp.Channel) (int, error)) error {
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	for {
		n, err := round(ctx, ch)
		if err != nil {
			return err
		}
		if n < 0 {
			return ErrNacked
		}
		if n > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-time.After(poll):
		}
	}
}

// PublishConfirmed publishes msgs to exchange on ch, a channel in confirm
// mode, pipelined (every message first, then every confirm), and reports
// which the broker acked: acked[i] is msgs[i]'s. A Drain round calls it
// and marks the acked rows published in its claim's transaction.
func PublishConfirmed(ctx context.Context, ch *amqp.Channel, exchange string, keys []string, msgs []amqp.Publishing) (acked []bool, err error) {
	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	for i := range msgs {
		confirms[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, exchange, keys[i], false, false, msgs[i])
		if err != nil {
			return nil, err
		}
	}
	acked = make([]bool, len(msgs))
	for i, c := range confirms {
		if acked[i], err = c.WaitContext(ctx); err != nil {
			return nil, err
		}
	}
	return acked, nil
}
