package statusev

import (
	"context"

	"github.com/heraldhq/herald/core/internal/store"
	amqp "github.com/rabbitmq/amqp091-go"
)

// PublishRound runs one round of the broker publisher on ch (in confirm
// mode): the tests drive it round by round.
func (s *Stage) PublishRound(ctx context.Context, ch *amqp.Channel) (int, error) {
	return s.publishRound(ctx, ch)
}

// BacklogUpTo is Backlog counting the broker's backlog up to limit.
func BacklogUpTo(ctx context.Context, q store.Querier, limit int) (BacklogStats, error) {
	return backlog(ctx, q, limit)
}

// BacklogQuery is Backlog's statement, for its plan.
const BacklogQuery = backlogQuery
