package httpguard_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/httpguard"
)

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestLimiterBurstThenRetryAfterPerKey(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1_000_000, 0)}
	l := httpguard.NewLimiter(httpguard.LimiterConfig{Rate: 2, Burst: 3, Now: c.Now})
	for i := range 3 {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	ok, wait := l.Allow("a")
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("fourth request: ok=%t wait=%s, want refused for 500ms (rate 2/s)", ok, wait)
	}
	if got := httpguard.RetryAfter(wait); got != 1 {
		t.Errorf("RetryAfter(%s) = %d, want 1 (whole seconds, rounded up)", wait, got)
	}
	// A refused request takes no token: after the wait one is allowed.
	if ok, _ := l.Allow("b"); !ok {
		t.Fatal("key b refused while only key a spent its burst")
	}
	c.Add(wait)
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("request after Retry-After refused")
	}
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("second request after one refill allowed")
	}
}

func TestLimiterNilAndZeroRateAllowEverything(t *testing.T) {
	t.Parallel()
	l := httpguard.NewLimiter(httpguard.LimiterConfig{Rate: 0, Burst: 5})
	if l != nil {
		t.Fatalf("rate 0 gave a limiter: %+v", l)
	}
	for range 100 {
		if ok, _ := l.Allow("x"); !ok {
			t.Fatal("a nil limiter refused")
		}
	}
}

func TestLimiterDropsIdleBuckets(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1_000_000, 0)}
	// One request an hour: a bucket never refills during the test, so a
	// refusal proves the key kept its (empty) bucket.
	l := httpguard.NewLimiter(httpguard.LimiterConfig{Rate: 1.0 / 3600, Burst: 1, Idle: time.Minute, Now: c.Now})
	for i := range 100 {
		l.Allow(fmt.Sprintf("ip-%d", i))
	}
	if ok, _ := l.Allow("busy"); !ok {
		t.Fatal("first request of a new key refused")
	}
	if n := l.Len(); n != 101 {
		t.Fatalf("Len = %d, want 101", n)
	}
	// The busy key is used in every idle period; the others go idle.
	for period := range 2 {
		c.Add(time.Minute)
		if ok, _ := l.Allow("busy"); ok {
			t.Fatalf("period %d: the busy key's empty bucket was dropped and refilled", period+1)
		}
	}
	if n := l.Len(); n != 1 {
		t.Fatalf("after two idle periods Len = %d, want 1 (only the busy key)", n)
	}
}

func TestLimiterMemoryBoundedUnderNewKeys(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1_000_000, 0)}
	l := httpguard.NewLimiter(httpguard.LimiterConfig{Rate: 1, Burst: 1, MaxKeys: 64, Now: c.Now})
	for i := range 10_000 {
		l.Allow(fmt.Sprintf("ip-%d", i))
		if n := l.Len(); n > 128 {
			t.Fatalf("after %d keys Len = %d, want at most 2×MaxKeys", i+1, n)
		}
	}
}

func TestLimiterConcurrentUse(t *testing.T) {
	t.Parallel()
	l := httpguard.NewLimiter(httpguard.LimiterConfig{Rate: 1e-6, Burst: 50})
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if ok, _ := l.Allow("k"); ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if allowed != 50 {
		t.Fatalf("allowed %d of 800 concurrent requests, want exactly the burst of 50", allowed)
	}
}
