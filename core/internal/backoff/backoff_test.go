package backoff

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		p       Policy
		attempt int
		want    time.Duration
	}{
		"first attempt":          {Policy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}, 1, 100 * time.Millisecond},
		"attempt zero is first":  {Policy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}, 0, 100 * time.Millisecond},
		"negative attempt":       {Policy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}, -3, 100 * time.Millisecond},
		"grows":                  {Policy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}, 3, 400 * time.Millisecond},
		"capped":                 {Policy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}, 5, time.Second},
		"huge attempt stays cap": {Policy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}, 1 << 30, time.Second},
		"initial above max":      {Policy{Initial: 2 * time.Second, Max: time.Second, Multiplier: 2}, 1, time.Second},
		"fractional multiplier":  {Policy{Initial: time.Second, Max: time.Minute, Multiplier: 1.5}, 3, 2250 * time.Millisecond},
		"multiplier below one":   {Policy{Initial: time.Second, Max: time.Minute, Multiplier: 0}, 5, time.Second},
		"no cap":                 {Policy{Initial: time.Second, Multiplier: 10}, 4, 1000 * time.Second},
		"zero policy":            {Policy{}, 7, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := tc.p.Delay(tc.attempt); got != tc.want {
				t.Errorf("Delay(%d) = %s, want %s", tc.attempt, got, tc.want)
			}
		})
	}
}

func TestDelayJitterStaysInItsBand(t *testing.T) {
	t.Parallel()
	p := Policy{Initial: time.Second, Max: 8 * time.Second, Multiplier: 2, Jitter: 0.2}
	for attempt, base := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 9: 8 * time.Second} {
		lo, hi := base-base/5, base+base/5
		seen := map[time.Duration]bool{}
		for range 1000 {
			d := p.Delay(attempt)
			if d < lo || d > hi {
				t.Fatalf("Delay(%d) = %s, outside [%s, %s]", attempt, d, lo, hi)
			}
			seen[d] = true
		}
		if len(seen) < 100 {
			t.Errorf("Delay(%d) took only %d values in 1000 draws: no jitter", attempt, len(seen))
		}
	}
}

func TestDelayJitterNeverNegative(t *testing.T) {
	t.Parallel()
	p := Policy{Initial: time.Millisecond, Multiplier: 2, Jitter: 3}
	for range 1000 {
		if d := p.Delay(1); d < 0 {
			t.Fatalf("Delay = %s", d)
		}
	}
}
