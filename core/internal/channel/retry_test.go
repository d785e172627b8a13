package channel_test

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/channel"
)

func TestRetryPolicyNext(t *testing.T) {
	t.Parallel()
	exact := channel.RetryPolicy{MaxAttempts: 5, Initial: time.Second, Max: time.Minute, Multiplier: 3}
	tests := map[string]struct {
		p          channel.RetryPolicy
		attempt    int
		retryAfter time.Duration
		want       time.Duration
	}{
		"first":                        {exact, 1, 0, time.Second},
		"third":                        {exact, 3, 0, 9 * time.Second},
		"capped":                       {exact, 10, 0, time.Minute},
		"attempt zero is the first":    {exact, 0, 0, time.Second},
		"retry-after is the floor":     {exact, 1, 30 * time.Second, 30 * time.Second},
		"retry-after below delay":      {exact, 3, time.Second, 9 * time.Second},
		"retry-after above the cap":    {exact, 10, 5 * time.Minute, 5 * time.Minute},
		"multiplier below one":         {channel.RetryPolicy{Initial: time.Second, Max: time.Minute}, 4, 0, time.Second},
		"zero policy: at once":         {channel.RetryPolicy{}, 3, 0, 0},
		"zero policy, retry-after":     {channel.RetryPolicy{}, 3, 7 * time.Second, 7 * time.Second},
		"default, third attempt, cap":  {channel.RetryPolicy{Initial: 2 * time.Second, Max: 10 * time.Minute, Multiplier: 2}, 100, 0, 10 * time.Minute},
		"event retries: 1s, 2s, 4s...": {channel.RetryPolicy{Initial: time.Second, Max: 5 * time.Minute, Multiplier: 2}, 3, 0, 4 * time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := tc.p.Next(tc.attempt, tc.retryAfter); got != tc.want {
				t.Errorf("Next(attempt %d, retry-after %s) = %s, want %s", tc.attempt, tc.retryAfter, got, tc.want)
			}
		})
	}
	for range 200 {
		if d := channel.DefaultRetry.Next(1, 0); d < 1600*time.Millisecond || d > 2400*time.Millisecond {
			t.Fatalf("default first delay %s outside 2s ± 20%%", d)
		}
	}
}

func TestRetryPolicyExhausted(t *testing.T) {
	t.Parallel()
	p := channel.RetryPolicy{MaxAttempts: 3}
	for attempt, want := range map[int]bool{1: false, 2: false, 3: true, 4: true} {
		if got := p.Exhausted(attempt); got != want {
			t.Errorf("Exhausted(%d) = %v, want %v", attempt, got, want)
		}
	}
	if (channel.RetryPolicy{}).Exhausted(1000) {
		t.Error("a policy without MaxAttempts is exhausted")
	}
}
