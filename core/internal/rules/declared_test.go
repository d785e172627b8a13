package rules_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
)

// TestWithDeclared: a channel's class comes from what its plugin declares
// unless the rules set it. A plugin that declares best effort makes its
// channel tried once and free of quiet hours; the rules' best_effort =
// false makes it persistent again (retried, held by quiet hours).
func TestWithDeclared(t *testing.T) {
	t.Parallel()
	persistent := false
	rs, err := rules.New(rules.Spec{
		Channels: []channel.Config{
			{Name: "LIVE", Providers: []channel.Provider{{Plugin: "ticker"}}},
			{Name: "LIVE_RETRIED", Set: channel.Overrides{BestEffort: &persistent}, Providers: []channel.Provider{{Plugin: "ticker"}}},
		},
		Defaults: rules.DefaultsSpec{QuietHours: &directory.QuietHours{Start: "22:00", End: "08:00"}},
		Events: []rules.EventSpec{{
			Type: "X", Audiences: []rules.AudienceSpec{{UserType: "STAFF"}}, Optional: []string{"LIVE", "LIVE_RETRIED"},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	declared := rs.WithDeclared(map[string]channel.Declared{
		"LIVE":         {Plugin: "ticker", BestEffort: true},
		"LIVE_RETRIED": {Plugin: "ticker", BestEffort: true},
	})

	type class struct {
		BestEffort, Intrusive bool
		MaxAttempts           int
		From                  string
	}
	classOf := func(rs *rules.RuleSet, name string) class {
		c, ok := rs.Channel(name)
		if !ok {
			t.Fatalf("no channel %s", name)
		}
		return class{c.Resolved.BestEffort, c.Resolved.Intrusive, c.Retry.MaxAttempts, c.Resolved.ClassFrom}
	}
	got := map[string]class{
		"undeclared LIVE":         classOf(rs, "LIVE"),
		"undeclared LIVE_RETRIED": classOf(rs, "LIVE_RETRIED"),
		"declared LIVE":           classOf(declared, "LIVE"),
		"declared LIVE_RETRIED":   classOf(declared, "LIVE_RETRIED"),
	}
	want := map[string]class{
		"undeclared LIVE":         {Intrusive: true, MaxAttempts: 5, From: channel.FromNoPlugin},
		"undeclared LIVE_RETRIED": {Intrusive: true, MaxAttempts: 5, From: channel.FromRules},
		"declared LIVE":           {BestEffort: true, MaxAttempts: 1, From: "declared by plugin ticker"},
		"declared LIVE_RETRIED":   {Intrusive: true, MaxAttempts: 5, From: channel.FromRules},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("classes (-want +got):\n%s", diff)
	}
	if chs := declared.Channels(); !chs[0].Resolved.BestEffort || chs[1].Resolved.BestEffort {
		t.Errorf("Channels() does not carry the classes in force: %+v", chs)
	}

	// At 23:00 quiet hours hold the persistent channel only.
	ev := rules.Event{EventID: "e", Type: "X", Payload: json.RawMessage(`{}`)}
	dir := &directory.Directory{Recipients: []directory.Recipient{{UserID: "u", UserType: "STAFF", Active: true}}}
	at := time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC)
	d, err := declared.Decide(ev, dir, at)
	if err != nil {
		t.Fatal(err)
	}
	var kept, dropped []string
	for _, c := range d.Recipients[0].Channels {
		kept = append(kept, c.Channel)
	}
	for _, c := range d.Recipients[0].Dropped {
		dropped = append(dropped, c.Channel)
	}
	if diff := cmp.Diff([][]string{{"LIVE"}, {"LIVE_RETRIED"}}, [][]string{kept, dropped}); diff != "" {
		t.Errorf("kept, dropped (-want +got):\n%s", diff)
	}
	var b strings.Builder
	if err := rules.WriteExplain(&b, d, at); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"  LIVE          class best-effort (declared by plugin ticker); not intrusive (a best-effort channel)\n",
		"  LIVE_RETRIED  class persistent (set in rules); intrusive (a persistent channel)\n",
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("explain lacks %q:\n%s", line, b.String())
		}
	}
}
