package sdk

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ConfigError names the config field a plugin or the host refused. The CLI
// and the host show Field, so operators know which line to fix.
type ConfigError struct {
	// Field is the offending config key ("" when no single field is at fault).
	Field string
	// Msg says what is wrong with it.
	Msg string
}

// Error returns `config field "port": must be an int, got string`.
func (e *ConfigError) Error() string {
	if e.Field == "" {
		return "config: " + e.Msg
	}
	return fmt.Sprintf("config field %q: %s", e.Field, e.Msg)
}

// The behaviour interfaces errors are classified by. Any error type may
// implement them; the SDK's constructors return one that does.
type (
	retryable    interface{ Retryable() bool }
	rateLimited  interface{ RateLimited() bool }
	permanent    interface{ Permanent() bool }
	skipped      interface{ Skipped() bool }
	retryAfterer interface{ RetryAfter() time.Duration }
	coder        interface{ Code() string }
	timeouter    interface{ Timeout() bool }
)

// RetryableError marks err as transient: the delivery is retried, after
// retryAfter when it is not zero.
func RetryableError(err error, retryAfter time.Duration) error {
	return &classifiedError{err: orUnknown(err), outcome: OutcomeRetryable, after: retryAfter}
}

// RateLimitedError marks err as the provider throttling us: the delivery is
// retried and the host slows the whole provider for retryAfter.
func RateLimitedError(err error, retryAfter time.Duration) error {
	return &classifiedError{err: orUnknown(err), outcome: OutcomeRateLimited, after: retryAfter}
}

// PermanentError marks err as one that retrying cannot fix (bad address,
// rejected content); code is the provider's error code, if any. The delivery
// is FAILED.
func PermanentError(err error, code string) error {
	return &classifiedError{err: orUnknown(err), outcome: OutcomePermanent, code: code}
}

// SkippedError marks err as a delivery not sent by design, which is not a
// failure (see OutcomeSkipped): the delivery is SKIPPED with err's text as
// its reason.
func SkippedError(err error) error {
	return &classifiedError{err: orUnknown(err), outcome: OutcomeSkipped}
}

// IsSkipped reports whether err, or an error it wraps, says the delivery
// was not sent by design (SkippedError, or Skipped() bool returning true).
func IsSkipped(err error) bool {
	var s skipped
	return err != nil && errors.As(err, &s) && s.Skipped()
}

// IsRetryable reports whether err, or an error it wraps, is transient: made by
// RetryableError, or implementing Retryable() bool returning true, or a
// timeout (context.DeadlineExceeded, Timeout() bool), or a cancelled
// context.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var r retryable
	if errors.As(err, &r) && r.Retryable() {
		return true
	}
	var t timeouter
	if errors.As(err, &t) && t.Timeout() {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// IsRateLimited reports whether err, or an error it wraps, says the provider
// throttled us (RateLimitedError, or RateLimited() bool returning true).
func IsRateLimited(err error) bool {
	var r rateLimited
	return err != nil && errors.As(err, &r) && r.RateLimited()
}

// IsPermanent reports whether err, or an error it wraps, cannot be fixed by
// retrying (PermanentError, or Permanent() bool returning true).
func IsPermanent(err error) bool {
	var p permanent
	return err != nil && errors.As(err, &p) && p.Permanent()
}

// RetryAfter returns the retry hint carried by err (RetryAfter()
// time.Duration), or zero.
func RetryAfter(err error) time.Duration {
	var r retryAfterer
	if err != nil && errors.As(err, &r) {
		return r.RetryAfter()
	}
	return 0
}

// ErrorCode returns the provider error code carried by err (Code() string),
// or "".
func ErrorCode(err error) string {
	var c coder
	if err != nil && errors.As(err, &c) {
		return c.Code()
	}
	return ""
}

// Classify returns the outcome err stands for and whether err was
// classified at all. An unclassified error counts as OutcomeRetryable. A nil
// error is OutcomeSent.
func Classify(err error) (outcome Outcome, classified bool) {
	switch {
	case err == nil:
		return OutcomeSent, true
	case IsSkipped(err):
		return OutcomeSkipped, true
	case IsPermanent(err):
		return OutcomePermanent, true
	case IsRateLimited(err):
		return OutcomeRateLimited, true
	case IsRetryable(err):
		return OutcomeRetryable, true
	}
	return OutcomeRetryable, false
}

// ErrorResult turns the error of sending one delivery into its Result,
// using the classification above; a nil error gives Sent with no provider
// message id. An unclassified error gives a Retryable result with
// Unclassified set, which the SDK logs and plugintest flags.
func ErrorResult(deliveryID string, err error) Result {
	outcome, classified := Classify(err)
	if outcome == OutcomeSent {
		return Sent(deliveryID, "")
	}
	return Result{
		DeliveryID:   deliveryID,
		Outcome:      outcome,
		RetryAfter:   RetryAfter(err),
		Reason:       err.Error(),
		Code:         ErrorCode(err),
		Unclassified: !classified,
	}
}

// classifiedError is the error the constructors above return.
type classifiedError struct {
	err     error
	outcome Outcome
	after   time.Duration
	code    string
}

func (e *classifiedError) Error() string             { return e.err.Error() }
func (e *classifiedError) Unwrap() error             { return e.err }
func (e *classifiedError) Retryable() bool           { return e.outcome == OutcomeRetryable }
func (e *classifiedError) RateLimited() bool         { return e.outcome == OutcomeRateLimited }
func (e *classifiedError) Permanent() bool           { return e.outcome == OutcomePermanent }
func (e *classifiedError) Skipped() bool             { return e.outcome == OutcomeSkipped }
func (e *classifiedError) RetryAfter() time.Duration { return e.after }
func (e *classifiedError) Code() string              { return e.code }

func orUnknown(err error) error {
	if err == nil {
		return errors.New("unknown error")
	}
	return err
}
