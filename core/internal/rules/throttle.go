package rules

import (
	"fmt"
	"text/template"
	"time"
)

// compiledThrottle is a rule's throttle, compiled.
type compiledThrottle struct {
	spec ThrottleSpec
	// key renders the throttle key (nil: the event type).
	key      *template.Template
	channels map[string]bool
}

// compileThrottle checks and compiles ce's throttle block (nil when the
// rule has none).
func compileThrottle(c *specChecker, ce *compiledEvent, base []string) *compiledThrottle {
	ts := ce.spec.Throttle
	if ts == nil {
		return nil
	}
	p := extend(base, KeyThrottle)
	ct := &compiledThrottle{spec: *ts, channels: channelSubset(c, ce, ts.Channels, extend(p, KeyChannels))}
	if ts.Limit < 1 || ts.Limit > MaxThrottleLimit {
		c.addf(extend(p, KeyLimit), "must be between 1 and %d, got %d", MaxThrottleLimit, ts.Limit)
	}
	if ts.Per < MinThrottlePer || ts.Per > MaxThrottlePer {
		c.addf(extend(p, KeyPer), "must be between %s and %s (7 days), got %s", shortDuration(MinThrottlePer), shortDuration(MaxThrottlePer), shortDuration(ts.Per))
	}
	switch ts.Over {
	case "", ThrottleDrop:
		ct.spec.Over = ThrottleDrop
	case ThrottleDigest:
		for _, ch := range sortedKeys(ce.escalations) {
			if ct.channels[ch] {
				c.addf(extend(p, KeyOver), "channel %s also escalates (escalate %q): what goes over would be folded into a digest and never wait for the inbox row; fold or escalate it, not both", ch, ch)
			}
		}
	default:
		c.addf(extend(p, KeyOver), "must be %s or %s, got %q", ThrottleDrop, ThrottleDigest, ts.Over)
	}
	if ce.digest != nil {
		for ch := range ct.channels {
			if ce.digest.channels[ch] {
				c.addf(extend(p, KeyChannels), "channel %s is also collected by the digest; throttle the digest's channels or the others, not both", ch)
				break
			}
		}
	}
	ct.key = compileWorkflowKey(c, ts.Key, extend(p, KeyKey))
	return ct
}

// folds reports whether the throttle folds what goes over its limit on ch
// into a digest (false for a nil throttle).
func (ct *compiledThrottle) folds(ch string) bool {
	return ct != nil && ct.spec.Over == ThrottleDigest && ct.channels[ch]
}

// ThrottleDecision says that a kept channel counts against a throttle:
// past Limit per Per (for its key), it is not sent alone: it is SKIPPED
// (Over drop) or folded into a digest sent when the window ends (Over
// digest).
type ThrottleDecision struct {
	// Key is the rendered throttle key ("" when it could not be
	// rendered: Err says why, and the delivery fails alone).
	Key   string        `json:"key"`
	Limit int           `json:"limit"`
	Per   time.Duration `json:"per"`
	Over  string        `json:"over"`
	Err   string        `json:"error,omitempty"`
}

// Reason is the last_error of a delivery over the limit.
func (t ThrottleDecision) Reason() string {
	if t.Over == ThrottleDigest {
		return fmt.Sprintf("throttled: %d per %s, folded into digest %q", t.Limit, shortDuration(t.Per), t.Key)
	}
	return fmt.Sprintf("throttled: %d per %s", t.Limit, shortDuration(t.Per))
}

// Folds reports whether what goes over the limit is folded into a digest.
func (t ThrottleDecision) Folds() bool { return t.Over == ThrottleDigest }

// String is the throttle in explain's words.
func (t ThrottleDecision) String() string {
	if t.Err != "" {
		return "throttle key: " + t.Err + " (the delivery fails alone)"
	}
	if t.Folds() {
		return fmt.Sprintf("throttled to %d per %s for %q (more are folded into digest %q, sent when the %s window ends)",
			t.Limit, shortDuration(t.Per), t.Key, t.Key, shortDuration(t.Per))
	}
	return fmt.Sprintf("throttled to %d per %s for %q (more are SKIPPED %q)", t.Limit, shortDuration(t.Per), t.Key, t.Reason())
}

// applyThrottle marks the channels of d that ce's throttle counts.
func (ce *compiledEvent) applyThrottle(d *Decision, data map[string]any) {
	ct := ce.throttle
	if ct == nil {
		return
	}
	td := ThrottleDecision{Limit: ct.spec.Limit, Per: ct.spec.Per, Over: ct.spec.Over}
	td.Key, td.Err = renderWorkflowKey(ct.key, data, ce.spec.Type)
	for i := range d.Recipients {
		for j := range d.Recipients[i].Channels {
			c := &d.Recipients[i].Channels[j]
			if ct.channels[c.Channel] {
				x := td
				c.Throttle = &x
			}
		}
	}
}
