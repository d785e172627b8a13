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
	for _, r := range d.Recipients {
		b.WriteString("\n")
		fmt.Fprintf(&b, "user %s  type %s", r.Recipient.UserID, r.Recipient.UserType)
		if r.Role != "" {
			fmt.Fprintf(&b, "  role %s", r.Role)
		}
		fmt.Fprintf(&b, "  via %s\n", strings.Join(r.Via, ", "))
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, c := range r.Channels {
			status := "kept"
			if c.Deferred {
				status = "deferred"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Channel, status, c.Reason)
		}
		for _, c := range r.Dropped {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Channel, "dropped", strings.TrimPrefix(c.Reason, "dropped: "))
		}
		if len(r.Channels)+len(r.Dropped) == 0 {
			fmt.Fprintf(tw, "  (no channels: inbox only)\n")
		}
		if err := tw.Flush(); err != nil {
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

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
