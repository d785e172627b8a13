package rules

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteExplain prints a decision as the table `herald rules explain` shows:
// one block per recipient (user, type, role, via) listing every channel
// kept, deferred or dropped with its reason, then the excluded users.
func WriteExplain(w io.Writer, d Decision, at time.Time) error {
	var b strings.Builder
	flags := []string{"severity " + d.Severity}
	if d.Shared {
		flags = append(flags, "shared")
	}
	fmt.Fprintf(&b, "event %s %s at %s (%s)\n", d.EventType, d.EventID, formatTime(at), strings.Join(flags, ", "))
	fmt.Fprintf(&b, "%d %s, %d excluded\n", len(d.Recipients), plural(len(d.Recipients), "recipient", "recipients"), len(d.Excluded))
	if d.InboxDigest != nil {
		fmt.Fprintf(&b, "%s\n", d.InboxDigest.InboxString())
	}
	for _, w := range d.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	if len(d.Posts) > 0 {
		b.WriteString("\nposts (places, once per event; no preferences or quiet hours)\n")
		for _, p := range d.Posts {
			fmt.Fprintf(&b, "  %s\n", p)
		}
	}
	if err := writeChannelClasses(&b, d.Channels); err != nil {
		return err
	}
	for _, r := range d.Recipients {
		b.WriteString("\n")
		if err := writeRecipient(&b, r); err != nil {
			return err
		}
	}
	if len(d.Excluded) > 0 {
		b.WriteString("\nexcluded\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, e := range d.Excluded {
			fmt.Fprintf(tw, "  user %s\t%s\n", e.UserID, e.Reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeRecipient prints one recipient's block: who, how reached, their
// clock and quiet hours, and every channel with its reason.
func writeRecipient(b *strings.Builder, r RecipientDecision) error {
	fmt.Fprintf(b, "user %s  type %s", r.Recipient.UserID, r.Recipient.UserType)
	if r.Role != "" {
		fmt.Fprintf(b, "  role %s", r.Role)
	}
	fmt.Fprintf(b, "  via %s\n", strings.Join(r.Via, ", "))
	if r.LocalTime != "" {
		fmt.Fprintf(b, "  local time %s", r.LocalTime)
		if r.QuietHours != "" {
			fmt.Fprintf(b, "; quiet hours %s", r.QuietHours)
		} else {
			b.WriteString("; no quiet hours")
		}
		b.WriteString("\n")
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	for _, c := range r.Channels {
		status := "kept"
		reason := c.Reason
		if c.Deferred {
			status = "deferred"
		}
		if c.Escalation != nil {
			status = "waits"
		}
		if c.Digest != nil {
			status = "digest"
			reason += "; " + c.Digest.String()
		}
		if c.Throttle != nil {
			reason += "; " + c.Throttle.String()
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Channel, status, reason)
	}
	for _, c := range r.Dropped {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Channel, "dropped", strings.TrimPrefix(c.Reason, "dropped: "))
	}
	if len(r.Channels)+len(r.Dropped) == 0 {
		fmt.Fprintf(tw, "  (no channels: inbox only)\n")
	}
	return tw.Flush()
}

// WriteUserExplain prints the explanation for one user (`rules explain
// --user`): a summary, every audience and whether it reached the user,
// then their channels or why they are left out.
func WriteUserExplain(w io.Writer, ev Event, ue UserExplanation, at time.Time) error {
	var b strings.Builder
	fmt.Fprintf(&b, "event %s %s at %s, user %s\n", ev.Type, ev.EventID, formatTime(at), ue.UserID)
	if ue.Recipient != nil {
		active := "active"
		if !ue.Recipient.Active {
			active = "inactive"
		}
		fmt.Fprintf(&b, "directory: type %s, %s\n", ue.Recipient.UserType, active)
	} else {
		b.WriteString("directory: no such user\n")
	}
	fmt.Fprintf(&b, "%s\n", ue.Summary)
	b.WriteString("\naudiences\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, a := range ue.Audiences {
		mark := "no"
		if a.Reached {
			mark = "reached"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", a.Audience, mark, a.Why)
	}
	if len(ue.Audiences) == 0 {
		fmt.Fprintf(tw, "  (the rule has no audience)\n")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case ue.Decision != nil:
		b.WriteString("\n")
		if err := writeRecipient(&b, *ue.Decision); err != nil {
			return err
		}
	case ue.Excluded != "":
		fmt.Fprintf(&b, "\nexcluded: %s\n", ue.Excluded)
	}
	if ue.Decision != nil {
		if err := writeChannelClasses(&b, ue.Channels); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeChannelClasses prints the channels' classes and which source won
// each (the rules, the plugin, the default).
func writeChannelClasses(b *strings.Builder, cs []ChannelClass) error {
	if len(cs) == 0 {
		return nil
	}
	b.WriteString("\nchannels\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	for _, c := range cs {
		fmt.Fprintf(tw, "  %s\t%s\n", c.Channel, c)
	}
	return tw.Flush()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
