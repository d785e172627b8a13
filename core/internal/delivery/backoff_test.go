package delivery

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/channel"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	exact := channel.RetryPolicy{Initial: time.Second, Max: time.Minute, Multiplier: 3}
	tests := map[string]struct {
		p          channel.RetryPolicy
		attempt    int
		retryAfter time.Duration
		want       time.Duration
	}{
		"first":                    {exact, 1, 0, time.Second},
		"third":                    {exact, 3, 0, 9 * time.Second},
		"capped":                   {exact, 10, 0, time.Minute},
		"retry-after is the floor": {exact, 1, 30 * time.Second, 30 * time.Second},
		"retry-after below delay":  {exact, 3, time.Second, 9 * time.Second},
		"defaults":                 {channel.RetryPolicy{}, 2, 0, 4 * time.Second},
		"default cap":              {channel.RetryPolicy{}, 100, 0, 10 * time.Minute},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := Backoff(tc.p, tc.attempt, tc.retryAfter); got != tc.want {
				t.Errorf("Backoff(attempt %d, retry-after %s) = %s, want %s", tc.attempt, tc.retryAfter, got, tc.want)
			}
		})
	}
	for range 200 {
		if d := Backoff(DefaultRetry, 1, 0); d < 1600*time.Millisecond || d > 2400*time.Millisecond {
			t.Fatalf("default first delay %s outside 2s ± 20%%", d)
		}
	}
}
