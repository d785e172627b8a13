package sdk

import (
	"context"
)

// SendOneFunc sends one delivery and returns the provider's message id. Its
// error is classified as ErrorResult describes: wrap it with RetryableError,
// RateLimitedError or PermanentError.
type SendOneFunc func(ctx context.Context, d Delivery) (providerMessageID string, err error)

// SendEach adapts a plugin that can only send one delivery at a time to
// Channel.Send. It sends the deliveries in order and returns exactly one Result
// per delivery. Once ctx is done, or a delivery is rate limited, the
// remaining deliveries are not attempted and come back Retryable (rate
// limited, with the same hint, after a rate limit). Each call's ctx holds
// its delivery's own trace context (DeliveryContext).
//
//	func (p *Plugin) Send(ctx context.Context, req sdk.SendRequest) (sdk.SendResponse, error) {
//		return sdk.SendEach(p.sendOne)(ctx, req)
//	}
func SendEach(fn SendOneFunc) func(ctx context.Context, req SendRequest) (SendResponse, error) {
	return func(ctx context.Context, req SendRequest) (SendResponse, error) {
		batch := req.Deliveries
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
			id, err := fn(DeliveryContext(ctx, d), d)
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
		return SendResponse{Results: results}, nil
	}
}
