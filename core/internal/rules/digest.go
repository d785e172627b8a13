package rules

import (
	"fmt"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"
	"time"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/directory"
)

// compileDigest checks and compiles ce's digest block (nil when the rule
// has none).
func compileDigest(c *specChecker, ce *compiledEvent, base []string) *compiledDigest {
	ds := ce.spec.Digest
	if ds == nil {
		return nil
	}
	p := extend(base, KeyDigest)
	cd := &compiledDigest{spec: *ds, maxItems: ds.MaxItems}
	cd.channels = channelSubset(c, ce, ds.Channels, extend(p, KeyChannels))
	if len(cd.channels) == 0 {
		c.add("the event has no channel to collect", extend(p, KeyChannels)...)
	}
	for _, ch := range sortedKeys(ce.escalations) {
		if cd.channels[ch] {
			c.addf(extend(p, KeyChannels), "channel %s also escalates (escalate %q): a digest item is sent when its window closes, not when the inbox row stays unread; collect or escalate it, not both", ch, ch)
		}
	}
	switch {
	case ds.Window == 0 && ds.MaxItems == 0 && ds.Schedule == "":
		c.addf(p, "set %s, %s or %s: a window must close", KeyWindow, KeySchedule, KeyMaxItems)
	case ds.Window != 0 && (ds.Window < MinDigestWindow || ds.Window > MaxDigestWindow):
		c.addf(extend(p, KeyWindow), "must be between %s and %s (7 days), got %s", shortDuration(MinDigestWindow), shortDuration(MaxDigestWindow), shortDuration(ds.Window))
	}
	if ds.Schedule != "" {
		sc, err := ParseSchedule(ds.Schedule)
		switch {
		case err != nil:
			c.add(err.Error(), extend(p, KeySchedule)...)
		case ds.Window != 0:
			c.addf(extend(p, KeySchedule), "set %s or %s, not both: a window closes after a length or at a time of day", KeyWindow, KeySchedule)
		default:
			cd.schedule = &sc
		}
	}
	if ds.MaxItems < 0 || ds.MaxItems > MaxDigestItems {
		c.addf(extend(p, KeyMaxItems), "must be between 1 and %d, got %d", MaxDigestItems, ds.MaxItems)
	}
	if cd.maxItems <= 0 {
		cd.maxItems = MaxDigestItems
	}
	switch ds.Inbox {
	case "", DigestInboxPerEvent:
		cd.spec.Inbox = DigestInboxPerEvent
	case DigestInboxPerDigest:
		checkPerDigest(c, ce, extend(p, KeyInbox))
	default:
		c.addf(extend(p, KeyInbox), "must be %s or %s, got %q", DigestInboxPerEvent, DigestInboxPerDigest, ds.Inbox)
	}
	cd.key = compileWorkflowKey(c, ds.Key, extend(p, KeyKey))
	return cd
}

// checkPerDigest refuses what a per_digest inbox cannot do: with one
// inbox row per recipient and window, and none per event, there is no row
// that every sharer of an event sees (shared, first-to-act), no row whose
// read calls an escalation off, and no channel may take the name the
// inbox's items go by.
func checkPerDigest(c *specChecker, ce *compiledEvent, path []string) {
	if ce.spec.Shared {
		c.addf(path, "%s cannot be used with %s = true: a digest row is one recipient's, and first-to-act needs the event's own row, which every sharer sees and one acts on", DigestInboxPerDigest, KeyShared)
	}
	for _, ch := range sortedKeys(ce.escalations) {
		c.addf(path, "%s cannot be used with escalate %q: it waits for the event's inbox row to be read, and %s writes none (collect the channel in the digest instead)", DigestInboxPerDigest, ch, DigestInboxPerDigest)
	}
	if ce.mandatory[channel.Inbox] || ce.optional[channel.Inbox] {
		c.addf(path, "%s cannot be used with a channel named %q: the inbox's digest items go by that name", DigestInboxPerDigest, channel.Inbox)
	}
}

// perDigest reports whether ce's inbox keeps one row per digest.
func (ce *compiledEvent) perDigest() bool {
	return ce.digest != nil && ce.digest.spec.Inbox == DigestInboxPerDigest
}

// channelSubset is the channels a digest or throttle block lists (all of
// the rule's when it lists none), each checked to be used by the rule.
func channelSubset(c *specChecker, ce *compiledEvent, list []string, path []string) map[string]bool {
	out := map[string]bool{}
	for _, ch := range list {
		switch {
		case out[ch]:
			c.addf(path, "channel %q listed twice", ch)
		case !ce.mandatory[ch] && !ce.optional[ch]:
			c.addf(path, "channel %q is not used by the event", ch)
		}
		out[ch] = true
	}
	if len(list) == 0 {
		for _, ch := range ce.considered {
			out[ch] = true
		}
	}
	return out
}

// compileWorkflowKey parses the key template of a digest or throttle
// (nil for none: the event type is the key).
func compileWorkflowKey(c *specChecker, src string, path []string) *template.Template {
	if src == "" {
		return nil
	}
	t, err := parseTextTemplate(KeyKey, src)
	switch {
	case err != nil:
		c.addf(path, "bad template: %v", err)
	case onlyText(t) && strings.TrimSpace(src) == "":
		c.add("renders empty: give a key such as restaurant:{{ .payload.restaurant_id }}", path...)
	case len(src) > 500:
		c.addf(path, "is %d bytes long; at most 500", len(src))
	default:
		return t
	}
	return nil
}

// renderWorkflowKey renders a digest or throttle key for one event: the
// key, or why it cannot be rendered (fallback when t is nil).
func renderWorkflowKey(t *template.Template, data map[string]any, fallback string) (string, string) {
	if t == nil {
		return fallback, ""
	}
	key, err := renderKey(t, data)
	switch {
	case err != nil:
		return "", "cannot render " + KeyKey + ": " + err.Error()
	case len(key) > 1000:
		return "", fmt.Sprintf("rendered %d bytes; at most 1000", len(key))
	}
	return key, ""
}

// checkItemsUse reports templates that read .items outside a digest: the
// inbox's (one row per event), and the channel templates of a channel the
// rule does not collect.
func checkItemsUse(c *specChecker, ce *compiledEvent, base []string) {
	texts := func(path []string, ct *compiledTemplate, why string) {
		check := func(path []string, root parse.Node) {
			if readsItems(root) {
				c.add("reads .items, which only the template of a digest channel has ("+why+")", path...)
			}
		}
		checkText(path, ct.base, check)
		for _, l := range sortedKeys(ct.locales) {
			checkText(extend(path, KeyLocale, l), ct.locales[l], check)
		}
	}
	if !ce.perDigest() {
		texts(extend(base, KeyInbox), ce.inbox, "the inbox keeps one row per event")
	} else if templateReadsItems(ce.inbox) {
		// A channel without a template of its own renders the inbox's,
		// one event at a time when the digest does not collect it.
		fallback := slices.Clone(ce.considered)
		fallback = append(fallback, ce.postChannels...)
		slices.Sort(fallback)
		for _, ch := range slices.Compact(fallback) {
			if _, own := ce.templates[ch]; !own && !ce.digest.channels[ch] {
				c.addf(extend(base, KeyInbox), "reads .items, and channel %s, which the digest does not collect, has no template of its own and would render the inbox's for one event: give %s a template", ch, ch)
			}
		}
	}
	for _, ch := range sortedKeys(ce.templates) {
		switch {
		case ce.throttle.folds(ch):
			// What goes over the throttle is sent as a digest.
		case ce.digest == nil:
			texts(extend(base, KeyTemplate, ch), ce.templates[ch], "the rule has no digest block")
		case !ce.digest.channels[ch]:
			texts(extend(base, KeyTemplate, ch), ce.templates[ch], "the digest does not collect "+ch)
		}
	}
}

// templateReadsItems reports whether any field of ct, or of its locale
// variants, reads .items.
func templateReadsItems(ct *compiledTemplate) bool {
	found := false
	check := func(_ []string, root parse.Node) {
		if readsItems(root) {
			found = true
		}
	}
	checkText(nil, ct.base, check)
	for _, l := range sortedKeys(ct.locales) {
		checkText(nil, ct.locales[l], check)
	}
	return found
}

// readsItems reports whether a template tree reads the field .items.
func readsItems(n parse.Node) bool {
	found := false
	walkFields(n, func(ident []string) {
		if len(ident) > 0 && ident[0] == "items" {
			found = true
		}
	})
	return found
}

// onlyText reports whether a template is plain text, with no action.
func onlyText(t *template.Template) bool {
	for _, n := range t.Tree.Root.Nodes {
		if _, ok := n.(*parse.TextNode); !ok {
			return false
		}
	}
	return true
}

// DigestDecision says that a kept channel is collected into a digest
// rather than sent alone, and into which.
type DigestDecision struct {
	// Key is the rendered digest key ("" when it could not be rendered:
	// Err says why, and the delivery fails alone).
	Key string `json:"key"`
	// Window is how long a window stays open after its first item (0:
	// until Schedule or MaxItems items).
	Window time.Duration `json:"window"`
	// Schedule, when set, closes the window at its next occurrence after
	// the first item ("daily 08:00"), in Zone, the recipient's zone.
	Schedule string `json:"schedule,omitempty"`
	Zone     string `json:"zone,omitempty"`
	// ClosesAt is when a window the item opened would close: the
	// schedule's next occurrence after the decision's time (nil without
	// a schedule). An item that joins an open window waits for that
	// window's close.
	ClosesAt *time.Time `json:"closes_at,omitempty"`
	// MaxItems closes a window early.
	MaxItems int `json:"max_items"`
	// Inbox is the inbox mode (per_event or per_digest).
	Inbox string `json:"inbox"`
	// Err is why the key could not be rendered.
	Err string `json:"error,omitempty"`
}

// String is the digest in explain's words.
func (d DigestDecision) String() string {
	if d.Err != "" {
		return "digest key: " + d.Err + " (the delivery fails alone)"
	}
	return fmt.Sprintf("collected into digest %q %s, inbox %s", d.Key, d.until(), d.Inbox)
}

// InboxString is a per_digest inbox in explain's words.
func (d DigestDecision) InboxString() string {
	if d.Err != "" {
		return "inbox per_digest, but digest key: " + d.Err + " (the inbox keeps this event's own row)"
	}
	return fmt.Sprintf("inbox per_digest: one row per recipient for digest %q %s, written when the window closes", d.Key, d.until())
}

// until says when the decision's window closes.
func (d DigestDecision) until() string {
	switch {
	case d.Schedule != "" && d.ClosesAt != nil:
		return fmt.Sprintf("until %s in %s (next %s) or %d items", d.Schedule, d.Zone, d.ClosesAt.Format("2006-01-02 15:04 MST"), d.MaxItems)
	case d.Schedule != "":
		return fmt.Sprintf("until %s in each recipient's zone or %d items", d.Schedule, d.MaxItems)
	case d.Window > 0:
		return fmt.Sprintf("for %s or %d items", shortDuration(d.Window), d.MaxItems)
	default:
		return fmt.Sprintf("until %d items", d.MaxItems)
	}
}

// decision renders ce's digest key for one event (data: .payload and
// .event).
func (cd *compiledDigest) decision(evType string, data map[string]any) *DigestDecision {
	out := &DigestDecision{Window: cd.spec.Window, MaxItems: cd.maxItems, Inbox: cd.spec.Inbox}
	out.Key, out.Err = renderWorkflowKey(cd.key, data, evType)
	if cd.schedule != nil {
		out.Schedule = cd.schedule.String()
	}
	return out
}

// applyDigest marks the channels of d that ce's digest collects; a
// scheduled digest's close is computed from at in each recipient's zone
// (zone picks it, with the quiet hours' fallback).
func (ce *compiledEvent) applyDigest(d *Decision, data map[string]any, at time.Time, zone func(directory.Recipient) *time.Location) {
	if ce.digest == nil {
		return
	}
	dd := ce.digest.decision(ce.spec.Type, data)
	if ce.perDigest() {
		x := *dd
		d.InboxDigest = &x
	}
	for i := range d.Recipients {
		var closes *time.Time
		var zname string
		if sc := ce.digest.schedule; sc != nil && dd.Err == "" && ce.perDigest() {
			loc := zone(d.Recipients[i].Recipient)
			next := sc.Next(at, loc)
			closes, zname = &next, loc.String()
			d.Recipients[i].InboxDigestClosesAt = closes
		}
		for j := range d.Recipients[i].Channels {
			c := &d.Recipients[i].Channels[j]
			if !ce.digest.channels[c.Channel] {
				continue
			}
			x := *dd
			if sc := ce.digest.schedule; sc != nil && x.Err == "" {
				if closes == nil {
					loc := zone(d.Recipients[i].Recipient)
					next := sc.Next(at, loc)
					closes, zname = &next, loc.String()
				}
				x.ClosesAt, x.Zone = closes, zname
			}
			c.Digest = &x
		}
	}
}

// RenderDigest renders the digest of items (events of one type, oldest
// first) for recipient r on channel ch: the channel's template sees .items
// (each with .payload and .event) and, as for a single event, .payload and
// .event of the newest item, .recipient and .channel.
func (rs *RuleSet) RenderDigest(items []Event, r directory.Recipient, ch string) (Rendered, error) {
	if len(items) == 0 {
		return Rendered{}, fmt.Errorf("rules: render digest: no items")
	}
	list := make([]any, len(items))
	for i, ev := range items {
		payload, err := decodePayload(ev.Payload)
		if err != nil {
			return Rendered{}, fmt.Errorf("rules: event %s: item %d: %w", ev.Type, i, err)
		}
		list[i] = map[string]any{"payload": payload, "event": eventData(ev)}
	}
	pe := PrepareEvent(items[len(items)-1])
	return rs.render(pe, r, ch, list)
}

// Digest returns the digest of eventType's rule, with MaxItems resolved,
// and whether it has one.
func (rs *RuleSet) Digest(eventType string) (DigestSpec, bool) {
	ce, ok := rs.events[eventType]
	if !ok || ce.digest == nil {
		return DigestSpec{}, false
	}
	d := ce.digest.spec
	d.Channels = slices.Clone(d.Channels)
	d.MaxItems = ce.digest.maxItems
	return d, true
}
