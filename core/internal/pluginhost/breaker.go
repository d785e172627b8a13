package pluginhost

import "time"

// BreakerPolicy configures the circuit breaker that moves a channel's
// traffic from a failing or unhealthy provider to the next one by priority.
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
	// let through (half-open) (default 10s). A channel's rules may set
	// their own (channel "X" { breaker { cooldown = "30s" } }).
	Cooldown time.Duration
	// HealthFailures opens the circuit after this many failed health checks
	// in a row (default 2), and while the provider's last HealthFailures
	// checks failed no probe is let through: a provider whose plugin says it
	// is unhealthy gets no traffic, and comes back through the half-open
	// probe once a health check passes again. Health failures are counted
	// apart from send failures because sends that happen to succeed in
	// between must not hide a provider that reports itself down.
	HealthFailures int
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
	if p.HealthFailures <= 0 {
		p.HealthFailures = 2
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
	// healthFails counts failed health checks in a row.
	healthFails int
}

// allow reports whether a send may go to the provider now, and whether it
// is the half-open probe whose outcome decides the circuit. No probe goes
// to a provider whose health checks are failing.
func (b *breaker) allow(now time.Time) (ok, probe bool) {
	switch b.state {
	case breakerOpen:
		// probing: a probe sent before failed health checks reopened the
		// circuit is still out.
		if now.Sub(b.openedAt) < b.policy.Cooldown || b.unhealthy() || b.probing {
			return false, false
		}
		b.state = breakerHalfOpen
		b.probing = true
		return true, true
	case breakerHalfOpen:
		if b.probing || b.unhealthy() {
			return false, false
		}
		b.probing = true
		return true, true
	}
	return true, false
}

// record notes the outcome of a send that allow let through. A send whose
// outcome says nothing about the provider (the caller gave up before the
// provider answered) is not recorded: call abandon instead.
func (b *breaker) record(now time.Time, failed, probe bool) {
	if probe {
		b.probing = false
		switch {
		case failed:
			b.trip(now)
		case b.state == breakerHalfOpen && !b.unhealthy():
			b.reset()
		}
		// Otherwise failed health checks reopened the circuit while the
		// probe was out: it stays open.
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

// abandon releases a probe whose send never reached the provider or whose
// outcome is inconclusive: the circuit stays half-open and the next send is
// the probe. A probe cut short by its caller (context cancelled or past the
// caller's deadline) is inconclusive, not a success: closing the circuit on
// it would put full traffic on a provider nobody has seen answer. Nor is it
// a failure, since the caller, not the provider, ended it. Production
// breakers do the same: resilience4j releases the half-open permission of
// a call whose error it ignores, and mercari/go-circuitbreaker ignores a
// caller's cancellation and deadline by default.
func (b *breaker) abandon(probe bool) {
	if probe {
		b.probing = false
	}
}

// health notes a health check's outcome and reports whether it opened the
// circuit: HealthFailures failed checks in a row open it (a probe in flight
// no longer decides anything). A passing check resets the count; it does
// not close an open circuit, the next probe send does.
func (b *breaker) health(now time.Time, healthy bool) (opened bool) {
	if healthy {
		b.healthFails = 0
		return false
	}
	b.healthFails++
	if !b.unhealthy() || b.state == breakerOpen {
		return false
	}
	b.trip(now)
	return true
}

// unhealthy reports whether the provider's last HealthFailures health
// checks failed.
func (b *breaker) unhealthy() bool {
	return b.healthFails > 0 && b.healthFails >= b.policy.HealthFailures
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

// probeReady reports whether the circuit, open, would let the next send
// through as its probe now: the cooldown has passed, no probe is out and
// the provider's health checks pass. A quiet channel sends no probe, so
// the circuit stays open; readiness counts such a provider as up (see
// ProviderStatus.Up) instead of waiting for traffic that a daemon out of
// service never gets.
func (b *breaker) probeReady(now time.Time) bool {
	switch b.state {
	case breakerOpen:
		return now.Sub(b.openedAt) >= b.policy.Cooldown && !b.unhealthy() && !b.probing
	case breakerHalfOpen:
		return !b.probing && !b.unhealthy()
	}
	return false
}

// open reports whether the circuit keeps traffic away (open, or half-open
// with the probe in flight).
func (b *breaker) open() bool { return b.state != breakerClosed }
