package channel

import (
	"time"

	"github.com/heraldhq/herald/core/internal/backoff"
)

// RetryPolicy is a declarative retry policy: how many tries, and how long
// to wait before each retry. It is the one retry policy of the daemon:
// each channel has one (the rules' retry blocks, DefaultRetry when they
// say nothing), and so do the relay's event retries
// (relay.DefaultEventRetry), attempts lost mid-send
// (maintenance.LostAttempts), plugin restarts (pluginhost's
// Config.Restart) and status-event webhook POSTs
// (statusev.Config.WebhookRetry). What an attempt's outcome leads to, given a policy, is
// delivery.NextStep (core/internal/delivery/outcome.go).
type RetryPolicy struct {
	// MaxAttempts counts every try, the first included (0: no limit).
	MaxAttempts int
	// Initial is the wait after the first try.
	Initial time.Duration
	// Max caps the wait (before jitter); zero: no cap.
	Max time.Duration
	// Multiplier grows the wait after each try; below 1 it stays at
	// Initial.
	Multiplier float64
	// Jitter is the random fraction (0..1) added to or taken from a delay,
	// so that what failed together does not retry together.
	Jitter float64
}

// DefaultRetry is the retry policy of a persistent channel when neither the
// channel nor the defaults set one.
var DefaultRetry = RetryPolicy{
	MaxAttempts: 5,
	Initial:     2 * time.Second,
	Max:         10 * time.Minute,
	Multiplier:  2,
	Jitter:      0.2,
}

// Next returns the wait before the try that follows attempt (1-based;
// below 1 counts as 1): Initial × Multiplier^(attempt-1), capped at Max,
// spread by ±Jitter, and never shorter than retryAfter, the wait a
// provider asked for (Retry-After; 0: none), which is honoured even above
// Max. A zero policy waits nothing but retryAfter.
func (p RetryPolicy) Next(attempt int, retryAfter time.Duration) time.Duration {
	d := backoff.Policy{Initial: p.Initial, Max: p.Max, Multiplier: p.Multiplier, Jitter: p.Jitter}.Delay(attempt)
	return max(d, retryAfter)
}

// Exhausted reports whether attempt (1-based) was the policy's last try.
func (p RetryPolicy) Exhausted(attempt int) bool {
	return p.MaxAttempts > 0 && attempt >= p.MaxAttempts
}
