package statusev

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
)

// PublishRound runs one round of the broker publisher on ch (in confirm
// mode): the tests drive it round by round.
func (s *Stage) PublishRound(ctx context.Context, ch *amqp.Channel) (int, error) {
	return s.publishRound(ctx, ch)
}
