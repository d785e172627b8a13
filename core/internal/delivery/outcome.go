package delivery

import (
	"fmt"
	"time"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/store"
)

// OutcomeKind is how one attempt of a delivery ended, as its next status
// depends on it.
type OutcomeKind int

// Outcome kinds. The zero kind is not one: NextStep treats it as
// Retryable.
const (
	// Unavailable: no provider took the batch (refused, restarting,
	// circuit open, throttled, shutting down). The delivery was not
	// attempted and spends none of its tries.
	Unavailable OutcomeKind = iota + 1
	// Sent: the provider accepted the delivery.
	Sent
	// Permanent: the provider refused it for good (sdk.Permanent).
	Permanent
	// Retryable: it may succeed later: sdk.Retry, sdk.RateLimited, a
	// failed Send call, or a result the plugin did not return.
	Retryable
	// Skipped: the plugin did not send by design (sdk.Skipped: a live
	// delivery to a user with no open session). Not a failure.
	Skipped
)

// Outcome is what one attempt of a delivery came to.
type Outcome struct {
	Kind OutcomeKind
	// RetryAfter is the wait the provider (or a throttled host) asked for
	// (0: none).
	RetryAfter time.Duration
	// Error is the reason a failed attempt gives.
	Error string
	// Code is a Permanent outcome's code ("": none).
	Code string
}

// Attempt is the attempt an outcome belongs to.
type Attempt struct {
	// Number is the attempt's number (1-based).
	Number int
	// Max is the delivery's max_attempts (attempts lost mid-send raise it
	// by one each: they do not count).
	Max int
	// BestEffort marks a delivery of a best-effort channel: tried once.
	BestEffort bool
}

// Step is what follows an attempt: the delivery's next status, when it is
// due again, and the error it records.
type Step struct {
	// Status is store.StatusSent, store.StatusRetry, store.StatusFailed or
	// store.StatusSkipped.
	Status string
	// At is when a RETRY is due (zero otherwise).
	At time.Time
	// Error is the error the delivery records (for SENT, whatever reason
	// the provider gave, usually none).
	Error string
	// NotAttempted: the attempt was not made; the delivery keeps its
	// attempt count and no attempt is logged.
	NotAttempted bool
}

// NextStep is the one place that decides what an attempt's outcome leads
// to (River's retry_policy.go is the model). It is pure: now is the time
// of the decision, policy is the channel's retry policy, whose Next gives
// the wait before a retry.
//
//   - Unavailable: RETRY after policy.Next(1, RetryAfter), attempt not
//     spent.
//   - Sent: SENT.
//   - Permanent: FAILED, the error naming the code.
//   - Skipped: SKIPPED, the error being the plugin's reason ("offline"),
//     whether the delivery is best-effort or not: the plugin says there
//     is nothing to send, and a retry would find the same.
//   - Retryable: FAILED for a best-effort delivery (its one try is over)
//     and for one whose attempts are exhausted; otherwise RETRY after
//     policy.Next(attempt, RetryAfter).
func NextStep(o Outcome, a Attempt, policy channel.RetryPolicy, now time.Time) Step {
	switch o.Kind {
	case Unavailable:
		return Step{Status: store.StatusRetry, At: now.Add(policy.Next(1, o.RetryAfter)), Error: o.Error, NotAttempted: true}
	case Sent:
		return Step{Status: store.StatusSent, Error: o.Error}
	case Permanent:
		msg := o.Error
		if o.Code != "" {
			msg = fmt.Sprintf("%s (code %s)", o.Error, o.Code)
		}
		return Step{Status: store.StatusFailed, Error: msg}
	case Skipped:
		return Step{Status: store.StatusSkipped, Error: o.Error}
	}
	switch {
	case a.BestEffort:
		return Step{Status: store.StatusFailed, Error: o.Error}
	case a.Number >= a.Max:
		return Step{Status: store.StatusFailed, Error: fmt.Sprintf("attempts exhausted (%d): %s", a.Number, o.Error)}
	}
	return Step{Status: store.StatusRetry, At: now.Add(policy.Next(a.Number, o.RetryAfter)), Error: o.Error}
}
