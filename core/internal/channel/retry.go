package channel

import "time"

// RetryPolicy is a channel's declarative retry policy.
type RetryPolicy struct {
	// MaxAttempts counts every try, the first included.
	MaxAttempts int
	Initial     time.Duration
	Max         time.Duration
	Multiplier  float64
	// Jitter is the random fraction (0..1) added to or taken from a delay.
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
