package delivery

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/store"
)

func TestNextStep(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	// Without jitter every wait is exact: 1s, 2s, 4s... capped at 10s.
	policy := channel.RetryPolicy{MaxAttempts: 5, Initial: time.Second, Max: 10 * time.Second, Multiplier: 2}
	persistent := func(n int) Attempt { return Attempt{Number: n, Max: 5} }
	tests := map[string]struct {
		o    Outcome
		a    Attempt
		want Step
	}{
		"sent": {
			o: Outcome{Kind: Sent}, a: persistent(1),
			want: Step{Status: store.StatusSent},
		},
		"permanent": {
			o: Outcome{Kind: Permanent, Error: "no such address"}, a: persistent(1),
			want: Step{Status: store.StatusFailed, Error: "no such address"},
		},
		"permanent with a code": {
			o: Outcome{Kind: Permanent, Error: "no such address", Code: "550"}, a: persistent(2),
			want: Step{Status: store.StatusFailed, Error: "no such address (code 550)"},
		},
		"skipped: not a failure, never retried": {
			o: Outcome{Kind: Skipped, Error: "offline"}, a: persistent(1),
			want: Step{Status: store.StatusSkipped, Error: "offline"},
		},
		"skipped, best effort": {
			o: Outcome{Kind: Skipped, Error: "offline"}, a: Attempt{Number: 1, Max: 1, BestEffort: true},
			want: Step{Status: store.StatusSkipped, Error: "offline"},
		},
		"retryable, first attempt": {
			o: Outcome{Kind: Retryable, Error: "timeout"}, a: persistent(1),
			want: Step{Status: store.StatusRetry, At: now.Add(time.Second), Error: "timeout"},
		},
		"retryable, third attempt": {
			o: Outcome{Kind: Retryable, Error: "timeout"}, a: persistent(3),
			want: Step{Status: store.StatusRetry, At: now.Add(4 * time.Second), Error: "timeout"},
		},
		"retryable, capped": {
			o: Outcome{Kind: Retryable, Error: "timeout"}, a: Attempt{Number: 8, Max: 9},
			want: Step{Status: store.StatusRetry, At: now.Add(10 * time.Second), Error: "timeout"},
		},
		"rate limited: retry-after wins over a shorter wait": {
			o: Outcome{Kind: Retryable, Error: "slow down", RetryAfter: time.Minute}, a: persistent(1),
			want: Step{Status: store.StatusRetry, At: now.Add(time.Minute), Error: "slow down"},
		},
		"retryable, attempts exhausted": {
			o: Outcome{Kind: Retryable, Error: "timeout"}, a: persistent(5),
			want: Step{Status: store.StatusFailed, Error: "attempts exhausted (5): timeout"},
		},
		"a lost attempt raised max_attempts: one more try": {
			o: Outcome{Kind: Retryable, Error: "timeout"}, a: Attempt{Number: 5, Max: 6},
			want: Step{Status: store.StatusRetry, At: now.Add(10 * time.Second), Error: "timeout"},
		},
		"best effort: its one try is over": {
			o: Outcome{Kind: Retryable, Error: "no live session"}, a: Attempt{Number: 1, Max: 1, BestEffort: true},
			want: Step{Status: store.StatusFailed, Error: "no live session"},
		},
		"best effort, sent": {
			o: Outcome{Kind: Sent}, a: Attempt{Number: 1, Max: 1, BestEffort: true},
			want: Step{Status: store.StatusSent},
		},
		"unavailable: not attempted, waits from the first step": {
			o: Outcome{Kind: Unavailable, Error: "circuit open"}, a: persistent(4),
			want: Step{Status: store.StatusRetry, At: now.Add(time.Second), Error: "circuit open", NotAttempted: true},
		},
		"unavailable, throttled: the throttle's wait": {
			o: Outcome{Kind: Unavailable, Error: "provider throttled", RetryAfter: 30 * time.Second}, a: Attempt{Number: 1, Max: 1, BestEffort: true},
			want: Step{Status: store.StatusRetry, At: now.Add(30 * time.Second), Error: "provider throttled", NotAttempted: true},
		},
		"unspecified kind counts as retryable": {
			o: Outcome{Error: "?"}, a: persistent(1),
			want: Step{Status: store.StatusRetry, At: now.Add(time.Second), Error: "?"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, NextStep(tc.o, tc.a, policy, now)); diff != "" {
				t.Errorf("NextStep (-want +got):\n%s", diff)
			}
		})
	}
}
