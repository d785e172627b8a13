package rules_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
)

// randomCase builds a rule set, an event and a directory from a seed: a few
// channels with different user-type support and intrusiveness, an event
// with random mandatory/optional channels, restrictions and quiet-hours
// modes, and a directory with random users, groups, roles, preferences,
// settings, zones, quiet hours and caps.
func randomCase(t *testing.T, seed uint64) (*rules.RuleSet, rules.Event, directory.Directory) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	userTypes := []string{"STAFF", "CUSTOMER", "ADMIN"}
	roles := []string{"MANAGER", "CHEF", "WAITER", "HOST"}
	zones := []string{"", "Europe/Rome", "America/New_York", "Asia/Tokyo", "Not/AZone"}
	windows := []*directory.QuietHours{nil, {Start: "22:00", End: "08:00"}, {Start: "12:00", End: "14:00"}, {Start: "00:00", End: "23:59"}}
	modes := []string{rules.QuietDrop, rules.QuietDefer, rules.QuietIgnore}
	pick := func(n int) int { return r.IntN(n) }
	subset := func(all []string) []string {
		var out []string
		for _, x := range all {
			if r.IntN(2) == 0 {
				out = append(out, x)
			}
		}
		return out
	}

	chNames := []string{"A", "B", "C", "D", "E"}
	spec := rules.Spec{Defaults: rules.DefaultsSpec{TimeZone: "Europe/Rome", QuietHours: windows[pick(len(windows))]}}
	for _, name := range chNames {
		intrusive, uts := r.IntN(2) == 0, subset(userTypes)
		spec.Channels = append(spec.Channels, channel.Config{
			Name:      name,
			Set:       channel.Overrides{Intrusive: &intrusive, UserTypes: uts, UserTypesSet: true},
			Providers: []channel.Provider{{Plugin: "p" + name}},
		})
	}
	if r.IntN(2) == 0 {
		spec.Defaults.UserTypes = map[string]rules.UserTypeDefaults{
			"CUSTOMER": {Enabled: subset(chNames), EnabledSet: true, QuietHours: windows[pick(len(windows))]},
		}
	}
	ev := rules.EventSpec{Type: "E", QuietHours: modes[pick(len(modes))], QuietHoursByChannel: map[string]string{}, Restrict: map[string][]string{}}
	for _, name := range chNames {
		switch r.IntN(3) {
		case 0:
			ev.Mandatory = append(ev.Mandatory, name)
		case 1:
			ev.Optional = append(ev.Optional, name)
			if r.IntN(3) == 0 {
				ev.Restrict[name] = []string{roles[pick(len(roles))]}
			}
		}
	}
	for _, name := range append(slices.Clone(ev.Mandatory), ev.Optional...) {
		if r.IntN(3) == 0 {
			ev.QuietHoursByChannel[name] = modes[pick(len(modes))]
		}
	}
	ev.Audiences = []rules.AudienceSpec{
		{Group: "g:{{ .payload.g }}", Roles: subset(roles)},
		{Group: "h:1"},
	}
	if r.IntN(2) == 0 {
		ev.Audiences = append(ev.Audiences, rules.AudienceSpec{UserType: "ADMIN"})
	}
	if r.IntN(2) == 0 {
		ev.Audiences = append(ev.Audiences, rules.AudienceSpec{User: "{{ .payload.u }}"})
	}
	if r.IntN(2) == 0 {
		ev.Audiences = append(ev.Audiences, rules.AudienceSpec{PayloadPath: "to"})
	}
	spec.Events = []rules.EventSpec{ev}
	rs, err := rules.New(spec)
	if err != nil {
		t.Fatalf("seed %d: New: %v", seed, err)
	}

	var dir directory.Directory
	nUsers := 1 + r.IntN(12)
	var ids []string
	for i := range nUsers {
		id := fmt.Sprintf("u%d", i)
		ids = append(ids, id)
		dir.Recipients = append(dir.Recipients, directory.Recipient{
			UserID:     id,
			UserType:   userTypes[pick(len(userTypes))],
			TimeZone:   zones[pick(len(zones))],
			Active:     r.IntN(5) != 0,
			QuietHours: windows[pick(len(windows))],
		})
	}
	for _, g := range []string{"g:1", "h:1"} {
		dir.Groups = append(dir.Groups, directory.Group{Key: g, MaxRecipients: r.IntN(4), QuietHours: windows[pick(len(windows))]})
		for _, id := range append(slices.Clone(ids), "ghost") {
			if r.IntN(2) == 0 {
				dir.Members = append(dir.Members, directory.Member{Group: g, UserID: id, Role: roles[pick(len(roles))]})
			}
		}
		for _, ch := range chNames {
			if r.IntN(3) == 0 {
				dir.Settings = append(dir.Settings, directory.GroupSetting{Group: g, Channel: ch, Enabled: r.IntN(2) == 0})
			}
			if r.IntN(4) == 0 {
				dir.Settings = append(dir.Settings, directory.GroupSetting{Group: g, EventType: "E", Channel: ch, Enabled: r.IntN(2) == 0})
			}
		}
	}
	for _, id := range ids {
		for _, ch := range chNames {
			if r.IntN(3) == 0 {
				dir.Preferences = append(dir.Preferences, directory.Preference{UserID: id, Channel: ch, Enabled: r.IntN(2) == 0})
			}
			if r.IntN(4) == 0 {
				dir.Preferences = append(dir.Preferences, directory.Preference{UserID: id, EventType: "E", Channel: ch, Enabled: r.IntN(2) == 0})
			}
		}
	}
	payload, _ := json.Marshal(map[string]any{
		"g":  1,
		"u":  ids[pick(len(ids))],
		"to": []string{ids[pick(len(ids))], ids[pick(len(ids))], "nobody"},
	})
	event := rules.Event{EventID: fmt.Sprintf("evt-%d", seed), Type: "E", Payload: payload}
	return rs, event, dir
}

func shuffled(r *rand.Rand, d directory.Directory) directory.Directory {
	out := directory.Directory{
		Recipients:  slices.Clone(d.Recipients),
		Groups:      slices.Clone(d.Groups),
		Members:     slices.Clone(d.Members),
		Preferences: slices.Clone(d.Preferences),
		Settings:    slices.Clone(d.Settings),
	}
	r.Shuffle(len(out.Recipients), func(i, j int) { out.Recipients[i], out.Recipients[j] = out.Recipients[j], out.Recipients[i] })
	r.Shuffle(len(out.Groups), func(i, j int) { out.Groups[i], out.Groups[j] = out.Groups[j], out.Groups[i] })
	r.Shuffle(len(out.Members), func(i, j int) { out.Members[i], out.Members[j] = out.Members[j], out.Members[i] })
	r.Shuffle(len(out.Preferences), func(i, j int) {
		out.Preferences[i], out.Preferences[j] = out.Preferences[j], out.Preferences[i]
	})
	r.Shuffle(len(out.Settings), func(i, j int) { out.Settings[i], out.Settings[j] = out.Settings[j], out.Settings[i] })
	return out
}

// checkDecisionProperties checks the engine's invariants on one case.
func checkDecisionProperties(t *testing.T, seed uint64, atUnix int64) {
	rs, ev, dir := randomCase(t, seed)
	at := time.Unix(atUnix%(1<<34), 0).UTC()
	d, err := rs.Decide(ev, &dir, at)
	if err != nil {
		t.Fatalf("seed %d: Decide: %v", seed, err)
	}
	spec, _ := rs.Event("E")
	mandatory := map[string]bool{}
	for _, ch := range spec.Mandatory {
		mandatory[ch] = true
	}
	considered := append(slices.Clone(spec.Mandatory), spec.Optional...)
	supported := func(ch, userType string) bool {
		cfg, ok := rs.Channel(ch)
		return ok && (len(cfg.Resolved.UserTypes) == 0 || slices.Contains(cfg.Resolved.UserTypes, userType))
	}

	seen := map[string]bool{}
	for i, rd := range d.Recipients {
		id := rd.Recipient.UserID
		if seen[id] {
			t.Fatalf("seed %d: user %s has two decisions", seed, id)
		}
		seen[id] = true
		if i > 0 && d.Recipients[i-1].Recipient.UserID >= id {
			t.Fatalf("seed %d: recipients not sorted by user id", seed)
		}
		if !rd.Recipient.Active {
			t.Fatalf("seed %d: inactive user %s notified", seed, id)
		}
		all := map[string]bool{}
		for j, c := range rd.Channels {
			if j > 0 && rd.Channels[j-1].Channel >= c.Channel {
				t.Fatalf("seed %d: user %s: kept channels not sorted", seed, id)
			}
			// The result is a subset of the channels supported for the user type.
			if !supported(c.Channel, rd.Recipient.UserType) {
				t.Fatalf("seed %d: user %s (%s): kept unsupported channel %s", seed, id, rd.Recipient.UserType, c.Channel)
			}
			if !slices.Contains(considered, c.Channel) {
				t.Fatalf("seed %d: user %s: kept channel %s the event does not use", seed, id, c.Channel)
			}
			if c.Deferred && !c.DeferUntil.After(at) {
				t.Fatalf("seed %d: user %s: %s deferred to %s, not after %s", seed, id, c.Channel, c.DeferUntil, at)
			}
			all[c.Channel] = true
		}
		for _, c := range rd.Dropped {
			if all[c.Channel] {
				t.Fatalf("seed %d: user %s: channel %s both kept and dropped", seed, id, c.Channel)
			}
			all[c.Channel] = true
			// A mandatory channel is never dropped unless unsupported.
			if mandatory[c.Channel] && supported(c.Channel, rd.Recipient.UserType) {
				t.Fatalf("seed %d: user %s: mandatory %s dropped: %s", seed, id, c.Channel, c.Reason)
			}
		}
		if len(all) != len(considered) {
			t.Fatalf("seed %d: user %s: %d channels explained, event uses %d", seed, id, len(all), len(considered))
		}
	}
	for _, e := range d.Excluded {
		if seen[e.UserID] {
			t.Fatalf("seed %d: user %s both notified and excluded", seed, e.UserID)
		}
		seen[e.UserID] = true
	}

	// Deterministic: same input, same output; shuffled directory, same output.
	again, err := rs.Decide(ev, &dir, at)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d, again); diff != "" {
		t.Fatalf("seed %d: second decision differs (-first +second):\n%s", seed, diff)
	}
	r := rand.New(rand.NewPCG(seed, 7))
	for range 3 {
		sd := shuffled(r, dir)
		got, err := rs.Decide(ev, &sd, at)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(d, got); diff != "" {
			t.Fatalf("seed %d: shuffled directory changes the decision (-ordered +shuffled):\n%s", seed, diff)
		}
	}
}

// FuzzDecide checks the invariants on random rule sets and directories.
// `go test` runs the seed corpus; `go test -fuzz=FuzzDecide` explores.
func FuzzDecide(f *testing.F) {
	for seed := range uint64(64) {
		f.Add(seed, int64(1_780_000_000+seed*7919))
	}
	f.Add(uint64(1<<40), int64(1_774_740_600)) // 2026-03-28T23:30Z, Rome's DST night
	f.Fuzz(func(t *testing.T, seed uint64, at int64) {
		if at < 0 {
			at = -at
		}
		checkDecisionProperties(t, seed, at)
	})
}
