package delivery

import (
	"time"

	"github.com/heraldhq/herald/core/internal/backoff"
	"github.com/heraldhq/herald/core/internal/channel"
)

// DefaultRetry is used for channels without a retry policy.
var DefaultRetry = channel.RetryPolicy{MaxAttempts: 5, Initial: 2 * time.Second, Max: 10 * time.Minute, Multiplier: 2, Jitter: 0.2}

// Backoff returns the delay before the attempt after `attempt` (1-based):
// exponential from Initial by Multiplier, capped at Max, with ±Jitter, and
// never shorter than the provider's retryAfter.
func Backoff(p channel.RetryPolicy, attempt int, retryAfter time.Duration) time.Duration {
	if p.Initial <= 0 {
		p.Initial = DefaultRetry.Initial
	}
	if p.Max <= 0 {
		p.Max = DefaultRetry.Max
	}
	if p.Multiplier < 1 {
		p.Multiplier = DefaultRetry.Multiplier
	}
	delay := backoff.Policy{Initial: p.Initial, Max: p.Max, Multiplier: p.Multiplier, Jitter: p.Jitter}.Delay(attempt)
	if retryAfter > delay {
		delay = retryAfter
	}
	return delay
}
