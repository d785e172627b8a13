package pluginhost

import "time"

// BreakerPolicy configures the circuit breaker that moves a channel's
// traffic from a failing provider to the next one by priority.
type BreakerPolicy struct {
	// ConsecutiveFailures opens the circuit after this many failed sends in
	// a row (default 5).
	ConsecutiveFailures int
	// ErrorRate opens the circuit when the share of failed sends within
	// Window reaches it (default 0.5; a negative value disables the rule).
	ErrorRate float64
	// Window is the sliding window ErrorRate is measured over (default 30s).
	Window time.Duration
	// MinRequests is how many sends Window must hold before ErrorRate is
	// judged (default 10).
	MinRequests int
	// Cooldown is how long the circuit stays open before one probe send is
	// let through (half-open) (default 10s).
	Cooldown time.Duration
}

func (p *BreakerPolicy) setDefaults() {
	if p.ConsecutiveFailures <= 0 {
		p.ConsecutiveFailures = 5
	}
	if p.ErrorRate == 0 {
		p.ErrorRate = 0.5
	}
	if p.Window <= 0 {
		p.Window = 30 * time.Second
	}
	if p.MinRequests <= 0 {
		p.MinRequests = 10
	}
	if p.Cooldown <= 0 {
		p.Cooldown = 10 * time.Second
	}
}

type breakerState int

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen
)

// maxBreakerEvents bounds the sliding window's memory.
const maxBreakerEvents = 1024

type breakerEvent struct {
	at     time.Time
	failed bool
}

// breaker is a circuit breaker. It is not safe for concurrent use: the
// provider's mutex guards it.
type breaker struct {
	policy      BreakerPolicy
	state       breakerState
	consecutive int
	events      []breakerEvent
	openedAt    time.Time
	// probing is set while the one half-open probe is in flight.
	probing bool
}

// allow reports whether a send may go to the provider now, and whether it
// is the half-open probe whose outcome decides the circuit.
func (b *breaker) allow(now time.Time) (ok, probe bool) {
	switch b.state {
	case breakerOpen:
		if now.Sub(b.openedAt) < b.policy.Cooldown {
			return false, false
		}
		b.state = breakerHalfOpen
		b.probing = true
		return true, true
	case breakerHalfOpen:
		if b.probing {
			return false, false
		}
		b.probing = true
		return true, true
	}
	return true, false
}

// record notes the outcome of a send that allow let through.
func (b *breaker) record(now time.Time, failed, probe bool) {
	if probe {
		b.probing = false
		if failed {
			b.trip(now)
		} else {
			b.reset()
		}
		return
	}
	if b.state != breakerClosed {
		// A send admitted before the circuit opened: its outcome is stale.
		return
	}
	b.events = append(b.events, breakerEvent{at: now, failed: failed})
	if len(b.events) > maxBreakerEvents {
		b.events = b.events[len(b.events)-maxBreakerEvents:]
	}
	if !failed {
		b.consecutive = 0
		return
	}
	b.consecutive++
	if b.consecutive >= b.policy.ConsecutiveFailures {
		b.trip(now)
		return
	}
	if b.policy.ErrorRate < 0 {
		return
	}
	cut := 0
	for cut < len(b.events) && now.Sub(b.events[cut].at) > b.policy.Window {
		cut++
	}
	b.events = b.events[cut:]
	if len(b.events) < b.policy.MinRequests {
		return
	}
	fails := 0
	for _, e := range b.events {
		if e.failed {
			fails++
		}
	}
	if float64(fails)/float64(len(b.events)) >= b.policy.ErrorRate {
		b.trip(now)
	}
}

// abandon releases a probe whose send never reached the provider.
func (b *breaker) abandon(probe bool) {
	if probe {
		b.probing = false
	}
}

func (b *breaker) trip(now time.Time) {
	b.state = breakerOpen
	b.openedAt = now
	b.consecutive = 0
	b.events = b.events[:0]
}

func (b *breaker) reset() {
	b.state = breakerClosed
	b.consecutive = 0
	b.events = b.events[:0]
	b.probing = false
}

// open reports whether the circuit keeps traffic away (open, or half-open
// with the probe in flight).
func (b *breaker) open() bool { return b.state != breakerClosed }
