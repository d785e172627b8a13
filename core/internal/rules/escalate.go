package rules

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/heraldhq/herald/core/internal/durfmt"
)

// Escalation is how a kept channel waits: its delivery is written WAITING
// and released at SendAt, unless the in-app notification was read or
// acted on (as Unless says) before then.
type Escalation struct {
	// After is the rule's wait ("10m").
	After string `json:"after"`
	// Unless lists what cancels it: read, acted.
	Unless []string `json:"unless"`
	// Due is the decision time plus After.
	Due time.Time `json:"due"`
	// SendAt is when it is sent unless cancelled: Due, or the end of the
	// recipient's quiet hours when Due falls inside them and the channel
	// defers.
	SendAt time.Time `json:"send_at"`
}

// escalationUnlessValues are the conditions an escalation may name.
var escalationUnlessValues = []string{UnlessRead, UnlessActed}

// compileEscalations checks the event's escalate blocks and returns them
// with Unless filled in (default: read, and acted too for a shared event).
// uses reports whether the event uses a channel.
func (rs *RuleSet) compileEscalations(c *specChecker, ev EventSpec, uses func(string) bool, base []string) map[string]EscalationSpec {
	if len(ev.Escalations) == 0 {
		return nil
	}
	out := make(map[string]EscalationSpec, len(ev.Escalations))
	for _, ch := range sortedKeys(ev.Escalations) {
		es := ev.Escalations[ch]
		p := extend(base, KeyEscalate, ch)
		switch {
		case strings.EqualFold(ch, InboxLabel):
			c.addf(p, "the in-app inbox row is what an escalation waits on; it cannot wait for itself (name the channel that escalates, e.g. EMAIL)")
		case !uses(ch):
			c.addf(p, "channel %q is not used by the event (list it in %s or %s)", ch, KeyMandatory, KeyOptional)
		default:
			if plugin := rs.inAppPlugin(ch); plugin != "" {
				c.addf(p, "channel %q shows the in-app notification itself (plugin %s): it cannot wait for that notification to be read; escalate to another channel", ch, plugin)
			}
		}
		switch {
		case es.After <= 0:
			c.addf(extend(p, KeyAfter), "must be a positive duration such as 10m, got %s", es.After)
		case es.After > MaxEscalationWait:
			c.addf(extend(p, KeyAfter), "must be at most %s (7 days), got %s", shortDuration(MaxEscalationWait), shortDuration(es.After))
		}
		if es.UnlessSet && len(es.Unless) == 0 {
			c.addf(extend(p, KeyUnless), "empty: list %s and/or %s (an escalation nothing cancels is a delay)", UnlessRead, UnlessActed)
		}
		var unless []string
		for _, u := range es.Unless {
			switch {
			case !slices.Contains(escalationUnlessValues, u):
				c.addf(extend(p, KeyUnless), "unknown condition %q: want %s or %s", u, UnlessRead, UnlessActed)
			case slices.Contains(unless, u):
				c.addf(extend(p, KeyUnless), "%q listed twice", u)
			case u == UnlessActed && !ev.Shared:
				c.addf(extend(p, KeyUnless), "%q: the event is not shared (shared = true), so its notification takes no actions", u)
			default:
				unless = append(unless, u)
			}
		}
		if len(es.Unless) == 0 {
			unless = []string{UnlessRead}
			if ev.Shared {
				unless = append(unless, UnlessActed)
			}
		}
		slices.Sort(unless)
		slices.Reverse(unless) // read before acted, as people say it
		es.Unless = unless
		out[ch] = es
	}
	return out
}

// inAppPlugin names the plugin of a channel that shows the in-app
// notification itself (the bundled websocket plugin pushes the inbox row
// to the user's open sessions), or "".
func (rs *RuleSet) inAppPlugin(ch string) string {
	for _, p := range rs.channels[ch].Providers {
		if p.Plugin == "websocket" {
			return p.Plugin
		}
	}
	return ""
}

// unlessText is Unless in explain's words: "read or acted on".
func unlessText(unless []string) string {
	words := make([]string, len(unless))
	for i, u := range unless {
		words[i] = u
		if u == UnlessActed {
			words[i] = "acted on"
		}
	}
	return strings.Join(words, " or ")
}

// shortDuration writes d without zero tails: 10m, 1h30m, 2s.
func shortDuration(d time.Duration) string { return durfmt.Short(d) }

// escalate decides how an escalated channel waits for recipient r: due at
// at+After; inside the recipient's quiet hours an intrusive channel
// follows the rule's mode at the due time (drop: dropped, unless
// mandatory; defer: sent when the window ends). It returns the escalation,
// or a drop reason.
func escalate(es EscalationSpec, at time.Time, quietAt func(time.Time) (deferUntil time.Time, why string, drop bool)) (*Escalation, string) {
	e := &Escalation{After: shortDuration(es.After), Unless: slices.Clone(es.Unless), Due: at.Add(es.After)}
	e.SendAt = e.Due
	if until, why, drop := quietAt(e.Due); why != "" {
		if drop {
			return nil, fmt.Sprintf("escalation after %s would be due at %s, inside %s", e.After, e.Due.Format(time.RFC3339), why)
		}
		e.SendAt = until
	}
	return e, ""
}

// reason is the escalation in explain's words.
func (e *Escalation) reason() string {
	s := fmt.Sprintf("waits %s (due %s) and is sent then unless the in-app notification was %s", e.After,
		e.Due.Format(time.RFC3339), unlessText(e.Unless))
	if !e.SendAt.Equal(e.Due) {
		s = fmt.Sprintf("waits %s (due %s, inside quiet hours: deferred until %s) and is sent then unless the in-app notification was %s",
			e.After, e.Due.Format(time.RFC3339), e.SendAt.Format(time.RFC3339), unlessText(e.Unless))
	}
	return s
}
