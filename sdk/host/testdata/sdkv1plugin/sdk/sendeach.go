package sdk

import (
	"context"
)

// SendOneFunc sends one delivery and returns the provider's message id. Its
// error is classified as ErrorResult describes: wrap it with RetryableError,
// RateLimitedError or PermanentError.
type SendOneFunc func(ctx context.Context, d Delivery) (providerMessageID string, err error)

// SendEach adapts a plugin that can only send one delivery at a time to
// Channel.Send. It sends the batch in order and returns exactly one Result
// per delivery. Once ctx is done, or a delivery is rate limited, the
// remaining deliveries are not attempted and come back Retryable (rate
// limited, with the same hint, after a rate limit).
//
//	func (p *Plugin) Send(ctx context.Context, batch []sdk.Delivery) ([]sdk.Result, error) {
//		return sdk.SendEach(p.sendOne)(ctx, batch)
//	}
func SendEach(fn SendOneFunc) func(ctx context.Context, batch []Delivery) ([]Result, error) {
	return func(ctx context.Context, batch []Delivery) ([]Result, error) {
		results := make([]Result, 0, len(batch))
		var stop *Result
		for _, d := range batch {
			if stop == nil {
				if err := ctx.Err(); err != nil {
					stop = &Result{Outcome: OutcomeRetryable, Reason: "not attempted: " + err.Error()}
				}
			}
			if stop != nil {
				r := *stop
				r.DeliveryID = d.DeliveryID
				results = append(results, r)
				continue
			}
			id, err := fn(ctx, d)
			if err != nil {
				r := ErrorResult(d.DeliveryID, err)
				results = append(results, r)
				if r.Outcome == OutcomeRateLimited {
					stop = &Result{Outcome: OutcomeRateLimited, RetryAfter: r.RetryAfter, Reason: "not attempted: provider rate limited"}
				}
				continue
			}
			results = append(results, Sent(d.DeliveryID, id))
		}
		return results, nil
	}
}
