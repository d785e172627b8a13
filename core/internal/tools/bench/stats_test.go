package bench

import (
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"
)

func TestLatenciesEmpty(t *testing.T) {
	t.Parallel()
	var l Latencies
	if l.Count() != 0 || l.Quantile(0.5) != 0 || l.Quantile(1) != 0 || l.Max() != 0 || l.Mean() != 0 {
		t.Errorf("empty: Count %d, p50 %v, p100 %v, Max %v, Mean %v", l.Count(), l.Quantile(0.5), l.Quantile(1), l.Max(), l.Mean())
	}
}

func TestLatenciesQuantiles(t *testing.T) {
	t.Parallel()
	// 1 ms … 100 ms, added in a shuffled order.
	var l Latencies
	r := rand.New(rand.NewPCG(1, 2))
	for _, i := range r.Perm(100) {
		l.Add(time.Duration(i+1) * time.Millisecond)
	}
	for q, want := range map[float64]time.Duration{
		-1:    1 * time.Millisecond, // below range: the minimum
		0:     1 * time.Millisecond,
		0.001: 1 * time.Millisecond,
		0.01:  1 * time.Millisecond,
		0.011: 2 * time.Millisecond,
		0.07:  7 * time.Millisecond, // 0.07*100 is 7.000000000000001 in float64
		0.5:   50 * time.Millisecond,
		0.505: 51 * time.Millisecond,
		0.9:   90 * time.Millisecond,
		0.95:  95 * time.Millisecond,
		0.99:  99 * time.Millisecond,
		0.999: 100 * time.Millisecond,
		1:     100 * time.Millisecond,
		2:     100 * time.Millisecond, // above range: the maximum
	} {
		if got := l.Quantile(q); got != want {
			t.Errorf("Quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if l.Count() != 100 {
		t.Errorf("Count() = %d, want 100", l.Count())
	}
	if l.Max() != 100*time.Millisecond {
		t.Errorf("Max() = %v, want 100ms", l.Max())
	}
	if l.Mean() != 50500*time.Microsecond {
		t.Errorf("Mean() = %v, want 50.5ms", l.Mean())
	}

	// Adding after a quantile was asked re-sorts.
	l.Add(0)
	if got := l.Quantile(0); got != 0 {
		t.Errorf("after Add(0): Quantile(0) = %v, want 0", got)
	}
}

func TestLatenciesSmall(t *testing.T) {
	t.Parallel()
	var l Latencies
	for _, d := range []time.Duration{30, 10, 20, 40} {
		l.Add(d)
	}
	// Nearest rank on four samples: ranks ceil(q*4).
	for q, want := range map[float64]time.Duration{0.25: 10, 0.26: 20, 0.5: 20, 0.75: 30, 0.76: 40, 1: 40} {
		if got := l.Quantile(q); got != want {
			t.Errorf("Quantile(%v) = %v, want %v", q, got, want)
		}
	}
	var one Latencies
	one.Add(-5) // clocks can step back; a negative sample is still a sample
	if one.Max() != -5 || one.Quantile(0.5) != -5 {
		t.Errorf("one negative sample: Max %v, p50 %v", one.Max(), one.Quantile(0.5))
	}
}

func TestLatenciesConcurrent(t *testing.T) {
	t.Parallel()
	var l Latencies
	var wg sync.WaitGroup
	const writers, each = 8, 1000
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= each; i++ {
				l.Add(time.Duration(i) * time.Microsecond)
				if i%100 == 0 {
					_ = l.Quantile(0.99) // reads interleaved with writes
				}
			}
		}()
	}
	wg.Wait()
	if l.Count() != writers*each {
		t.Errorf("Count() = %d, want %d", l.Count(), writers*each)
	}
	if got := l.Quantile(0.5); got != 500*time.Microsecond {
		t.Errorf("Quantile(0.5) = %v, want 500µs", got)
	}
	if l.Max() != each*time.Microsecond {
		t.Errorf("Max() = %v, want %v", l.Max(), each*time.Microsecond)
	}
}

// TestTailSplit checks that the split takes the trips at or above the
// quantile only, and the median of each of their stages.
func TestTailSplit(t *testing.T) {
	t.Parallel()
	ms := int64(time.Millisecond)
	// 98 quick trips (1 + 1 + 2 ms) and two slow ones: one that waited for
	// its wake-up, one for its delivery.
	var trips []trip
	for i := range 98 {
		c := int64(i) * 10 * ms
		trips = append(trips, trip{commit: c, claimed: c + ms, written: c + 2*ms, sent: c + 4*ms})
	}
	trips = append(trips, trip{commit: 0, claimed: 150 * ms, written: 151 * ms, sent: 160 * ms},
		trip{commit: 0, claimed: 2 * ms, written: 3 * ms, sent: 203 * ms})
	for name, tc := range map[string]struct {
		trips []trip
		q     float64
		want  TailSplit
	}{
		// The fifths are by commit (0 to 970 ms): the two slow trips
		// committed at 0, in the first fifth with the 20 quick ones
		// committed before 194 ms.
		"none": {q: 0.99, want: TailSplit{}},
		"p99": {trips: trips, q: 0.99, want: TailSplit{Count: 2, From: 160, Wake: 2, Relay: 1, Deliver: 9,
			Fifths: []float64{203, 4, 4, 4, 4}}},
		"p100": {trips: trips, q: 1, want: TailSplit{Count: 1, From: 203, Wake: 2, Relay: 1, Deliver: 200,
			Fifths: []float64{203, 4, 4, 4, 4}}},
		"p0": {trips: trips[:98], q: 0, want: TailSplit{Count: 98, From: 4, Wake: 1, Relay: 1, Deliver: 2,
			Fifths: []float64{4, 4, 4, 4, 4}}},
		"alone": {trips: trips[98:99], q: 0.99, want: TailSplit{Count: 1, From: 160, Wake: 150, Relay: 1, Deliver: 9,
			Fifths: []float64{160, 0, 0, 0, 0}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := tailSplit(tc.trips, tc.q); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("tailSplit(q=%v) = %+v, want %+v", tc.q, got, tc.want)
			}
		})
	}
}
