// Package backoff is the one exponential backoff formula of Herald:
// channel.RetryPolicy (delivery retries, the relay's event retries, lost
// attempts, plugin restarts, status-event webhooks) and the broker's
// redials compute their delays with a Policy.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy is an exponential backoff. The delay before the retry that follows
// attempt n (1-based) is Initial × Multiplier^(n-1), capped at Max, then
// spread by Jitter. Callers fill in their own defaults: a zero Policy waits
// nothing.
type Policy struct {
	// Initial is the delay after the first attempt.
	Initial time.Duration
	// Max caps the delay (before jitter); zero or less: no cap.
	Max time.Duration
	// Multiplier grows the delay after each attempt; below 1 the delay
	// stays at Initial.
	Multiplier float64
	// Jitter spreads each delay uniformly over ± Jitter of itself (0.2:
	// ±20 %), so that peers that failed together do not retry together;
	// 0: every delay is exact.
	Jitter float64
}

// Delay returns the delay before the retry that follows attempt (1-based;
// below 1 counts as 1). It is never negative.
func (p Policy) Delay(attempt int) time.Duration {
	d := float64(p.Initial)
	capped := func() bool { return p.Max > 0 && d >= float64(p.Max) }
	if p.Multiplier > 1 {
		for i := 1; i < attempt && !capped(); i++ {
			d *= p.Multiplier
		}
	}
	if capped() {
		d = float64(p.Max)
	}
	if p.Jitter > 0 {
		d += d * p.Jitter * (2*rand.Float64() - 1)
	}
	return max(time.Duration(d), 0)
}
