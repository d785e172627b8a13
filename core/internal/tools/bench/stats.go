package bench

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Latencies is an exact latency histogram: it keeps every sample (a few
// million take a few tens of MB). The zero value is empty and ready to use,
// and it is safe for concurrent use.
type Latencies struct {
	mu      sync.Mutex
	samples []time.Duration
	sorted  bool
	max     time.Duration
	sum     time.Duration
}

// Add records one sample.
func (l *Latencies) Add(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.samples) == 0 || d > l.max {
		l.max = d
	}
	l.samples = append(l.samples, d)
	l.sum += d
	l.sorted = false
}

// Count returns the number of samples.
func (l *Latencies) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.samples)
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) by the nearest-rank method:
// the smallest sample such that at least q of all samples are at most it.
// Quantile(0) is the minimum and Quantile(1) the maximum. It returns 0 when
// there are no samples. The samples are sorted on the first call after an
// Add, so asking for several quantiles in a row is cheap.
func (l *Latencies) Quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.samples)
	if n == 0 {
		return 0
	}
	if !l.sorted {
		slices.Sort(l.samples)
		l.sorted = true
	}
	// The epsilon keeps float error (0.07*100 = 7.000000000000001) from
	// moving the rank up by one.
	rank := int(math.Ceil(q*float64(n) - 1e-9))
	rank = max(1, min(n, rank))
	return l.samples[rank-1]
}

// Max returns the largest sample, or 0 when there are none.
func (l *Latencies) Max() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max
}

// Mean returns the average of the samples, or 0 when there are none.
func (l *Latencies) Mean() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.samples) == 0 {
		return 0
	}
	return l.sum / time.Duration(len(l.samples))
}
