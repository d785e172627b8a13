package sdk

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type timeoutErr struct{}

func (timeoutErr) Error() string { return "i/o timeout" }
func (timeoutErr) Timeout() bool { return true }

type ownPermanent struct{}

func (ownPermanent) Error() string   { return "mailbox unavailable" }
func (ownPermanent) Permanent() bool { return true }
func (ownPermanent) Code() string    { return "550" }

// ownRetryable is classified the way host.ErrPluginExited is (package
// sdk/host tests that one).
type ownRetryable struct{}

func (ownRetryable) Error() string   { return "plugin exited" }
func (ownRetryable) Retryable() bool { return true }

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		err            error
		wantOutcome    Outcome
		wantClassified bool
		wantAfter      time.Duration
		wantCode       string
	}{
		"nil":                 {err: nil, wantOutcome: OutcomeSent, wantClassified: true},
		"plain":               {err: errors.New("boom"), wantOutcome: OutcomeRetryable},
		"retryable":           {err: RetryableError(errors.New("503"), time.Second), wantOutcome: OutcomeRetryable, wantClassified: true, wantAfter: time.Second},
		"wrapped retryable":   {err: fmt.Errorf("smtp: %w", RetryableError(errors.New("421"), 0)), wantOutcome: OutcomeRetryable, wantClassified: true},
		"rate limited":        {err: RateLimitedError(errors.New("429"), time.Minute), wantOutcome: OutcomeRateLimited, wantClassified: true, wantAfter: time.Minute},
		"permanent":           {err: PermanentError(errors.New("bad"), "400"), wantOutcome: OutcomePermanent, wantClassified: true, wantCode: "400"},
		"own type permanent":  {err: fmt.Errorf("x: %w", ownPermanent{}), wantOutcome: OutcomePermanent, wantClassified: true, wantCode: "550"},
		"timeout":             {err: timeoutErr{}, wantOutcome: OutcomeRetryable, wantClassified: true},
		"deadline":            {err: fmt.Errorf("post: %w", context.DeadlineExceeded), wantOutcome: OutcomeRetryable, wantClassified: true},
		"own type retryable":  {err: fmt.Errorf("send: %w", ownRetryable{}), wantOutcome: OutcomeRetryable, wantClassified: true},
		"nil wrapped in ctor": {err: PermanentError(nil, ""), wantOutcome: OutcomePermanent, wantClassified: true},
		"skipped":             {err: fmt.Errorf("live: %w", SkippedError(errors.New("offline"))), wantOutcome: OutcomeSkipped, wantClassified: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			outcome, classified := Classify(tc.err)
			got := []any{outcome, classified, RetryAfter(tc.err), ErrorCode(tc.err)}
			want := []any{tc.wantOutcome, tc.wantClassified, tc.wantAfter, tc.wantCode}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestErrorResult(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		err  error
		want Result
	}{
		"nil is sent":  {err: nil, want: Sent("d", "")},
		"unclassified": {err: errors.New("boom"), want: Result{DeliveryID: "d", Outcome: OutcomeRetryable, Reason: "boom", Unclassified: true}},
		"rate limited": {err: RateLimitedError(errors.New("429"), time.Second), want: RateLimited("d", "429", time.Second)},
		"permanent":    {err: PermanentError(errors.New("no such user"), "550"), want: Permanent("d", "no such user", "550")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, ErrorResult("d", tc.err)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestSendEach(t *testing.T) {
	t.Parallel()
	batch := []Delivery{{DeliveryID: "a"}, {DeliveryID: "b"}, {DeliveryID: "c"}}
	tests := map[string]struct {
		fn       SendOneFunc
		cancel   bool
		want     []Result
		wantSent []string
	}{
		"all sent": {
			fn:       func(_ context.Context, d Delivery) (string, error) { return "m-" + d.DeliveryID, nil },
			want:     []Result{Sent("a", "m-a"), Sent("b", "m-b"), Sent("c", "m-c")},
			wantSent: []string{"a", "b", "c"},
		},
		"mixed errors": {
			fn: func(_ context.Context, d Delivery) (string, error) {
				if d.DeliveryID == "b" {
					return "", PermanentError(errors.New("bad"), "")
				}
				return "m", nil
			},
			want:     []Result{Sent("a", "m"), Permanent("b", "bad", ""), Sent("c", "m")},
			wantSent: []string{"a", "b", "c"},
		},
		"rate limit stops the batch": {
			fn: func(_ context.Context, d Delivery) (string, error) {
				if d.DeliveryID == "a" {
					return "", RateLimitedError(errors.New("429"), time.Second)
				}
				return "m", nil
			},
			want: []Result{RateLimited("a", "429", time.Second),
				RateLimited("b", "not attempted: provider rate limited", time.Second),
				RateLimited("c", "not attempted: provider rate limited", time.Second)},
			wantSent: []string{"a"},
		},
		"cancelled context": {
			fn:     func(_ context.Context, d Delivery) (string, error) { return "m", nil },
			cancel: true,
			want: []Result{Retry("a", "not attempted: context canceled", 0),
				Retry("b", "not attempted: context canceled", 0), Retry("c", "not attempted: context canceled", 0)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			var sent []string
			fn := func(ctx context.Context, d Delivery) (string, error) {
				sent = append(sent, d.DeliveryID)
				return tc.fn(ctx, d)
			}
			resp, err := SendEach(fn)(ctx, SendRequest{Deliveries: batch})
			got := resp.Results
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSent, sent); diff != "" {
				t.Errorf("attempted (-want +got):\n%s", diff)
			}
		})
	}
}
