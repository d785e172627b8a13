package httpguard

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// DefaultMaxKeys is LimiterConfig.MaxKeys when it is zero.
const DefaultMaxKeys = 1 << 16

// LimiterConfig is one rate limit: a token bucket per key.
type LimiterConfig struct {
	// Rate is the requests per second each key may make; zero or less
	// turns the limit off (NewLimiter returns nil).
	Rate float64
	// Burst is the bucket size: how many requests a key may make at once.
	Burst int
	// MaxKeys bounds the buckets kept in one generation (default
	// DefaultMaxKeys); at most twice as many are in memory.
	MaxKeys int
	// Idle is how long a bucket must go unused before it may be dropped
	// (default: the time it takes to refill, at least a minute). A bucket
	// dropped after that long was full, so dropping it changes nothing.
	Idle time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (c *LimiterConfig) setDefaults() {
	if c.MaxKeys <= 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	if c.Idle <= 0 {
		c.Idle = max(time.Minute, time.Duration(float64(c.Burst)/c.Rate*float64(time.Second)))
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Limiter keeps one token bucket per key (an API key id, a client IP) in
// bounded memory. Buckets live in two generations: a lookup moves its
// bucket into the current one, and once Idle has passed (or the current
// generation holds MaxKeys buckets) the previous generation, every bucket
// not used since the last turn, is dropped. Only a flood of new keys can
// drop a bucket before it is Idle, which resets that key to a full burst.
//
// A nil *Limiter allows everything.
type Limiter struct {
	cfg     LimiterConfig
	mu      sync.Mutex
	cur     map[string]*rate.Limiter
	prev    map[string]*rate.Limiter
	rotated time.Time
}

// NewLimiter returns the limiter of cfg, or nil when cfg.Rate is zero or
// less (no limit).
func NewLimiter(cfg LimiterConfig) *Limiter {
	if cfg.Rate <= 0 {
		return nil
	}
	cfg.Burst = max(cfg.Burst, 1)
	cfg.setDefaults()
	return &Limiter{cfg: cfg, cur: map[string]*rate.Limiter{}, prev: map[string]*rate.Limiter{}, rotated: cfg.Now()}
}

// Allow takes one request from key's bucket. When the bucket is empty it
// takes nothing and returns false with how long until a request would be
// allowed.
func (l *Limiter) Allow(key string) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	now := l.cfg.Now()
	r := l.bucket(key, now).ReserveN(now, 1)
	if !r.OK() {
		return false, time.Duration(math.MaxInt64)
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// Rate returns the requests per second each key may make.
func (l *Limiter) Rate() float64 { return l.cfg.Rate }

// Len returns how many buckets the limiter holds.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.cur) + len(l.prev)
}

// bucket returns key's bucket, made full when the key is new.
func (l *Limiter) bucket(key string, now time.Time) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.rotated) >= l.cfg.Idle || len(l.cur) >= l.cfg.MaxKeys {
		l.prev, l.cur, l.rotated = l.cur, make(map[string]*rate.Limiter, len(l.cur)), now
	}
	if b, ok := l.cur[key]; ok {
		return b
	}
	b, ok := l.prev[key]
	if ok {
		delete(l.prev, key)
	} else {
		b = rate.NewLimiter(rate.Limit(l.cfg.Rate), l.cfg.Burst) // full
	}
	l.cur[key] = b
	return b
}

// RetryAfter renders d as the whole seconds of a Retry-After header,
// rounded up and at least 1.
func RetryAfter(d time.Duration) int {
	return max(1, int(math.Ceil(min(d, 24*time.Hour).Seconds())))
}
