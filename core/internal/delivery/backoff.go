package delivery

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/heraldhq/herald/core/internal/rules"
)

// DefaultRetry is used for channels without a retry policy.
var DefaultRetry = rules.RetryPolicy{MaxAttempts: 5, Initial: 2 * time.Second, Max: 10 * time.Minute, Multiplier: 2, Jitter: 0.2}

// Backoff returns the delay before the attempt after `attempt` (1-based):
// exponential from Initial by Multiplier, capped at Max, with ±Jitter, and
// never shorter than the provider's retryAfter.
func Backoff(p rules.RetryPolicy, attempt int, retryAfter time.Duration) time.Duration {
	if p.Initial <= 0 {
		p.Initial = DefaultRetry.Initial
	}
	if p.Max <= 0 {
		p.Max = DefaultRetry.Max
	}
	if p.Multiplier < 1 {
		p.Multiplier = DefaultRetry.Multiplier
	}
	d := float64(p.Initial) * math.Pow(p.Multiplier, float64(max(attempt-1, 0)))
	if d > float64(p.Max) {
		d = float64(p.Max)
	}
	if p.Jitter > 0 {
		d += d * p.Jitter * (2*rand.Float64() - 1)
	}
	delay := time.Duration(d)
	if delay < 0 {
		delay = 0
	}
	if retryAfter > delay {
		delay = retryAfter
	}
	return delay
}
