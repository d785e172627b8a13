package rules_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
)

// choicesRules: EMAIL mandatory for ORDER_SHIPPED and optional for
// PROMO; SMS optional everywhere (restricted to managers for PROMO); PUSH
// only for CUSTOMERs and mandatory wherever it is used; STAFF users have
// SMS off by default.
func choicesRules(t *testing.T) *rules.RuleSet {
	t.Helper()
	ch := func(name string, types ...string) channel.Config {
		return channel.Config{Name: name, Providers: []channel.Provider{{Plugin: strings.ToLower(name)}},
			Set: channel.Overrides{UserTypes: types, UserTypesSet: len(types) > 0}}
	}
	rs, err := rules.New(rules.Spec{
		Channels: []channel.Config{ch("EMAIL"), ch("PUSH", "CUSTOMER"), ch("SMS")},
		Events: []rules.EventSpec{
			{Type: "ORDER_SHIPPED", Description: "your order left", Audiences: []rules.AudienceSpec{{User: "{{ .payload.user }}"}},
				Mandatory: []string{"EMAIL", "PUSH"}, Optional: []string{"SMS"}},
			{Type: "PROMO", Audiences: []rules.AudienceSpec{{User: "{{ .payload.user }}"}},
				Optional: []string{"EMAIL", "SMS"}, Restrict: map[string][]string{"SMS": {"MANAGER"}}},
			{Type: "SECURITY", Audiences: []rules.AudienceSpec{{User: "{{ .payload.user }}"}}, Mandatory: []string{"PUSH"}},
		},
		Defaults: rules.DefaultsSpec{UserTypes: map[string]rules.UserTypeDefaults{
			"STAFF": {Enabled: []string{"EMAIL"}, EnabledSet: true},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestChoices(t *testing.T) {
	t.Parallel()
	rs := choicesRules(t)
	pref := func(ev, ch string, on bool) directory.Preference {
		return directory.Preference{UserID: "u1", EventType: ev, Channel: ch, Enabled: on}
	}
	optional := func(ch string, on bool, src string) rules.Choice {
		return rules.Choice{Channel: ch, Enabled: on, Source: src}
	}
	locked := func(ch, why string) rules.Choice {
		return rules.Choice{Channel: ch, Enabled: true, Source: rules.ChoiceMandatory, Locked: true, Why: why}
	}
	promoSMS := func(c rules.Choice) rules.Choice {
		c.Note = "sent only to recipients reached with role MANAGER"
		return c
	}
	emailNote := "mandatory for ORDER_SHIPPED, which send it whatever this switch says"
	staffSMS := "off by default for user type STAFF: sent only when a group that reaches you switches it on as well"
	staff := func(c rules.Choice) rules.Choice {
		c.Note = staffSMS
		return c
	}
	staffPromoSMS := func(c rules.Choice) rules.Choice {
		c.Note = staffSMS + "; sent only to recipients reached with role MANAGER"
		return c
	}
	tests := map[string]struct {
		userType string
		prefs    []directory.Preference
		want     rules.Choices
	}{
		"customer without preferences: defaults, PUSH locked everywhere": {
			userType: "CUSTOMER",
			want: rules.Choices{
				Channels: []rules.Choice{
					{Channel: "EMAIL", Enabled: true, Source: rules.ChoiceDefault, Note: emailNote},
					locked("PUSH", "mandatory for every event type that sends it (ORDER_SHIPPED, SECURITY)"),
					optional("SMS", true, rules.ChoiceDefault),
				},
				Events: []rules.EventChoices{
					{EventType: "ORDER_SHIPPED", Description: "your order left", Channels: []rules.Choice{
						locked("EMAIL", "mandatory for ORDER_SHIPPED: the rules always send it"),
						locked("PUSH", "mandatory for ORDER_SHIPPED: the rules always send it"),
						optional("SMS", true, rules.ChoiceDefault),
					}},
					{EventType: "PROMO", Channels: []rules.Choice{
						optional("EMAIL", true, rules.ChoiceDefault),
						promoSMS(optional("SMS", true, rules.ChoiceDefault)),
					}},
					{EventType: "SECURITY", Channels: []rules.Choice{
						locked("PUSH", "mandatory for SECURITY: the rules always send it"),
					}},
				},
			},
		},
		"staff: no PUSH (not their type), so no SECURITY; SMS off by the type's default": {
			userType: "STAFF",
			want: rules.Choices{
				Channels: []rules.Choice{
					{Channel: "EMAIL", Enabled: true, Source: rules.ChoiceDefault, Note: emailNote},
					staff(optional("SMS", false, rules.ChoiceDefault)),
				},
				Events: []rules.EventChoices{
					{EventType: "ORDER_SHIPPED", Description: "your order left", Channels: []rules.Choice{
						locked("EMAIL", "mandatory for ORDER_SHIPPED: the rules always send it"),
						staff(optional("SMS", false, rules.ChoiceDefault)),
					}},
					{EventType: "PROMO", Channels: []rules.Choice{
						optional("EMAIL", true, rules.ChoiceDefault),
						staffPromoSMS(optional("SMS", false, rules.ChoiceDefault)),
					}},
				},
			},
		},
		"staff preferences: the event type's switch wins over the channel's; conflicting rows read off": {
			userType: "STAFF",
			prefs: []directory.Preference{
				pref("", "SMS", true), pref("PROMO", "SMS", false),
				pref("PROMO", "EMAIL", true), pref("PROMO", "EMAIL", false),
				// A switch for a locked channel (written by an operator)
				// does not unlock it.
				pref("ORDER_SHIPPED", "EMAIL", false),
			},
			want: rules.Choices{
				Channels: []rules.Choice{
					{Channel: "EMAIL", Enabled: true, Source: rules.ChoiceDefault, Note: emailNote},
					staff(optional("SMS", true, rules.ChoiceExplicit)),
				},
				Events: []rules.EventChoices{
					{EventType: "ORDER_SHIPPED", Description: "your order left", Channels: []rules.Choice{
						locked("EMAIL", "mandatory for ORDER_SHIPPED: the rules always send it"),
						staff(optional("SMS", true, rules.ChoiceChannel)),
					}},
					{EventType: "PROMO", Channels: []rules.Choice{
						optional("EMAIL", false, rules.ChoiceExplicit),
						staffPromoSMS(optional("SMS", false, rules.ChoiceExplicit)),
					}},
				},
			},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := rs.Choices(tt.userType, tt.prefs, nil, nil)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Choices (-want +got):\n%s", diff)
			}
		})
	}
}

func TestChoicesSwitchable(t *testing.T) {
	t.Parallel()
	c := choicesRules(t).Choices("CUSTOMER", nil, nil, nil)
	tests := map[string]struct {
		event, channel string
		want           string // "" = switchable
	}{
		"optional channel":                {"", "SMS", ""},
		"optional per event type":         {"PROMO", "EMAIL", ""},
		"mandatory everywhere":            {"", "PUSH", "locked: mandatory for every event type"},
		"mandatory for the event type":    {"ORDER_SHIPPED", "EMAIL", "locked: mandatory for ORDER_SHIPPED"},
		"unknown channel":                 {"", "FAX", `no channel "FAX" reaches you`},
		"unknown event type":              {"NOPE", "SMS", `no event type "NOPE" reaches you`},
		"channel the event does not send": {"SECURITY", "SMS", `event type SECURITY sends you no channel "SMS"`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ok, why := c.Switchable(tt.event, tt.channel)
			if ok != (tt.want == "") || !strings.HasPrefix(why, tt.want) {
				t.Errorf("Switchable(%q, %q) = %v, %q; want prefix %q", tt.event, tt.channel, ok, why, tt.want)
			}
		})
	}
}

// TestChoicesAgreeWithDecide checks the preference centre against the
// engine: for a user reached directly (no group), every channel Choices
// shows on is sent by Decide and every one it shows off is dropped, for
// every combination of the user's switches.
func TestChoicesAgreeWithDecide(t *testing.T) {
	t.Parallel()
	rs := choicesRules(t)
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	switches := []directory.Preference{
		{EventType: "", Channel: "SMS"}, {EventType: "", Channel: "EMAIL"},
		{EventType: "PROMO", Channel: "EMAIL"}, {EventType: "ORDER_SHIPPED", Channel: "SMS"},
	}
	for _, userType := range []string{"CUSTOMER", "STAFF"} {
		// Each switch absent, on or off: 3^4 combinations.
		for combo := range 81 {
			var prefs []directory.Preference
			n := combo
			for _, s := range switches {
				if v := n % 3; v > 0 {
					p := s
					p.UserID, p.Enabled = "u1", v == 1
					prefs = append(prefs, p)
				}
				n /= 3
			}
			dir := &directory.Directory{
				Recipients:  []directory.Recipient{{UserID: "u1", UserType: userType, Active: true}},
				Preferences: prefs,
			}
			choices := rs.Choices(userType, prefs, nil, nil)
			for _, ec := range choices.Events {
				payload, _ := json.Marshal(map[string]string{"user": "u1"})
				d, err := rs.Decide(rules.Event{Type: ec.EventType, Payload: payload}, dir, at)
				if err != nil {
					t.Fatal(err)
				}
				var sent []string
				for _, r := range d.Recipients {
					for _, cd := range r.Channels {
						sent = append(sent, cd.Channel)
					}
				}
				for _, c := range ec.Channels {
					if c.Note != "" {
						continue // a role restriction decides too
					}
					if got := slices.Contains(sent, c.Channel); got != c.Enabled {
						t.Errorf("%s with %+v: %s %s: Choices says enabled=%v, Decide sent=%v", userType, prefs, ec.EventType, c.Channel, c.Enabled, got)
					}
				}
			}
		}
	}
}

// TestChoicesGroupSettings: a setting of one of the user's groups that
// does not enable an optional channel for their role is named in the
// note (the event type's setting first, then the channel's), and Decide
// agrees: reached through that group alone, the channel is not sent
// whatever the user's switch says.
func TestChoicesGroupSettings(t *testing.T) {
	t.Parallel()
	rs, err := rules.New(rules.Spec{
		Channels: []channel.Config{
			{Name: "EMAIL", Providers: []channel.Provider{{Plugin: "email"}}},
			{Name: "SMS", Providers: []channel.Provider{{Plugin: "sms"}}},
			{Name: "WEBSOCKET", Providers: []channel.Provider{{Plugin: "websocket"}}},
		},
		Events: []rules.EventSpec{{Type: "BOOKED", Audiences: []rules.AudienceSpec{{Group: "restaurant:5"}},
			Mandatory: []string{"WEBSOCKET"}, Optional: []string{"EMAIL", "SMS"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	member := []directory.Member{{Group: "restaurant:5", UserID: "u1", Role: "WAITER"}}
	settings := []directory.GroupSetting{
		{Group: "restaurant:5", Channel: "EMAIL", Enabled: false},
		{Group: "restaurant:5", EventType: "BOOKED", Channel: "SMS", Enabled: true, Roles: []string{"MANAGER"}},
	}
	prefs := []directory.Preference{{UserID: "u1", Channel: "EMAIL", Enabled: true}, {UserID: "u1", Channel: "SMS", Enabled: true}}
	c := rs.Choices("STAFF", prefs, member, settings)
	notes := map[string]string{}
	for _, x := range c.Channels {
		notes[""+x.Channel] = x.Note
	}
	for _, x := range c.Events[0].Channels {
		notes["BOOKED/"+x.Channel] = x.Note
	}
	tail := ": an event that reaches you through that group alone does not send it, whatever your switch says"
	want := map[string]string{
		"EMAIL":            "switched off by group restaurant:5's setting" + tail,
		"SMS":              "",
		"WEBSOCKET":        "",
		"BOOKED/EMAIL":     "switched off by group restaurant:5's setting" + tail,
		"BOOKED/SMS":       "enabled by group restaurant:5's setting for BOOKED only for roles MANAGER" + tail,
		"BOOKED/WEBSOCKET": "",
	}
	if diff := cmp.Diff(want, notes); diff != "" {
		t.Errorf("notes (-want +got):\n%s", diff)
	}
	dir := &directory.Directory{
		Recipients:  []directory.Recipient{{UserID: "u1", UserType: "STAFF", Active: true}},
		Groups:      []directory.Group{{Key: "restaurant:5", Type: "restaurant"}},
		Members:     member,
		Preferences: prefs,
		Settings:    settings,
	}
	d, err := rs.Decide(rules.Event{Type: "BOOKED", Payload: json.RawMessage(`{}`)}, dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Recipients) != 1 || len(d.Recipients[0].Channels) != 1 || d.Recipients[0].Channels[0].Channel != "WEBSOCKET" {
		t.Errorf("Decide sends %+v, want WEBSOCKET only", d.Recipients)
	}
}
