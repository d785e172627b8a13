package rules

import (
	"fmt"
	"slices"
	"strings"

	"github.com/heraldhq/herald/core/internal/directory"
)

// Choices is what one user may switch in their own preferences (the end
// user's preference centre, GET /v1/me/preferences), as the rules make it
// for the user's type: a switch per channel, for every event type, and one
// per event type and channel, which wins (userEnabled reads them in that
// order). Only optional channels can be switched; a mandatory one is shown
// locked, with why. A channel that does not support the user's type, and
// an event type none of whose channels reach the type, is left out: no
// switch of the user's could change what they receive from it.
//
// A user's switch is one side of an optional channel's decision: the
// groups that reach the user must enable the channel too (groupEnabled).
// Choices describes the user's side; Note says where the other side can
// still keep a channel off: the user type's default, a setting of one of
// the user's groups, or a role restriction.
type Choices struct {
	// Channels are the switches for every event type, sorted by channel.
	Channels []Choice `json:"channels"`
	// Events are the switches per event type, sorted by event type.
	Events []EventChoices `json:"events"`
}

// EventChoices are the switches of one event type.
type EventChoices struct {
	EventType   string   `json:"event_type"`
	Description string   `json:"description,omitempty"`
	Channels    []Choice `json:"channels"`
}

// Sources of a choice's Enabled value.
const (
	// ChoiceExplicit: the user's own switch for exactly this entry.
	ChoiceExplicit = "preference"
	// ChoiceChannel: the user's switch for the channel (every event type).
	ChoiceChannel = "channel preference"
	// ChoiceDefault: no switch of the user's; the rules' default.
	ChoiceDefault = "default"
	// ChoiceMandatory: the rules always send it.
	ChoiceMandatory = "mandatory"
)

// Choice is one switch: whether the user's side has the channel on now,
// where that comes from, and whether the user may change it.
type Choice struct {
	Channel string `json:"channel"`
	// Enabled is the user's side of the decision now (true for a locked,
	// mandatory channel).
	Enabled bool `json:"enabled"`
	// Source is ChoiceExplicit, ChoiceChannel, ChoiceDefault or
	// ChoiceMandatory.
	Source string `json:"source"`
	// Locked switches cannot be changed by the user; Why says why.
	Locked bool   `json:"locked"`
	Why    string `json:"why,omitempty"`
	// Note is what else decides whether the channel is sent, when
	// something does (a role restriction, mandatory event types).
	Note string `json:"note,omitempty"`
}

// Choices returns what a user of userType, with the preferences prefs,
// may switch, and where each switch stands. member are the user's
// memberships and settings their groups' settings (both may be nil): a
// group setting that has an optional channel off for the user's role is
// named in the choice's Note. The caller passes the user's own rows only.
func (rs *RuleSet) Choices(userType string, prefs []directory.Preference, member []directory.Member, settings []directory.GroupSetting) Choices {
	groupOff := groupsOff(member, settings)
	type key struct{ ev, ch string }
	mine := map[key]bool{}
	for _, p := range prefs {
		k := key{p.EventType, p.Channel}
		if old, ok := mine[k]; ok {
			mine[k] = old && p.Enabled // conflicting rows read as disabled, as in Decide
			continue
		}
		mine[k] = p.Enabled
	}
	channelLevel := func(ch string) (bool, string) {
		if on, ok := mine[key{"", ch}]; ok {
			return on, ChoiceExplicit
		}
		return rs.defaultEnabled(userType, ch), ChoiceDefault
	}
	// For the channel-level switch: the event types that send each
	// channel to this user type, mandatory and optional.
	mandatoryIn := map[string][]string{}
	optionalIn := map[string][]string{}
	out := Choices{Channels: []Choice{}, Events: []EventChoices{}}
	for _, ev := range rs.spec.Events {
		ce := rs.events[ev.Type]
		ec := EventChoices{EventType: ev.Type, Description: ev.Description, Channels: []Choice{}}
		for _, ch := range ce.considered {
			if !rs.supports(ch, userType) {
				continue
			}
			c := Choice{Channel: ch}
			if ce.mandatory[ch] {
				mandatoryIn[ch] = append(mandatoryIn[ch], ev.Type)
				c.Enabled, c.Source, c.Locked = true, ChoiceMandatory, true
				c.Why = fmt.Sprintf("mandatory for %s: the rules always send it", ev.Type)
			} else {
				optionalIn[ch] = append(optionalIn[ch], ev.Type)
				if on, ok := mine[key{ev.Type, ch}]; ok {
					c.Enabled, c.Source = on, ChoiceExplicit
				} else {
					c.Enabled, c.Source = channelLevel(ch)
					if c.Source == ChoiceExplicit {
						c.Source = ChoiceChannel
					}
				}
				c.Note = joinNotes(rs.groupNote(userType, ch), groupOff(ev.Type, ch))
				if roles := ce.spec.Restrict[ch]; len(roles) > 0 {
					c.Note = joinNotes(c.Note, fmt.Sprintf("sent only to recipients reached with role %s", strings.Join(roles, " or ")))
				}
			}
			ec.Channels = append(ec.Channels, c)
		}
		if len(ec.Channels) > 0 {
			out.Events = append(out.Events, ec)
		}
	}
	for _, cfg := range rs.spec.Channels {
		ch := cfg.Name
		m, o := mandatoryIn[ch], optionalIn[ch]
		switch {
		case len(m) == 0 && len(o) == 0:
			continue
		case len(o) == 0:
			out.Channels = append(out.Channels, Choice{Channel: ch, Enabled: true, Source: ChoiceMandatory, Locked: true,
				Why: fmt.Sprintf("mandatory for every event type that sends it (%s)", strings.Join(m, ", "))})
		default:
			c := Choice{Channel: ch}
			c.Enabled, c.Source = channelLevel(ch)
			c.Note = joinNotes(rs.groupNote(userType, ch), groupOff("", ch))
			if len(m) > 0 {
				c.Note = joinNotes(c.Note, fmt.Sprintf("mandatory for %s, which send it whatever this switch says", strings.Join(m, ", ")))
			}
			out.Channels = append(out.Channels, c)
		}
	}
	return out
}

// groupNote says, when the user type's default has optional channel ch
// off, that the user's switch alone does not send it: the group side of
// the decision (groupEnabled) falls back to the same default, so ch goes
// out only through a group whose setting switches it on.
func (rs *RuleSet) groupNote(userType, ch string) string {
	if rs.defaultEnabled(userType, ch) {
		return ""
	}
	return fmt.Sprintf("off by default for user type %s: sent only when a group that reaches you switches it on as well", userType)
}

// groupsOff returns a function naming, for an event type ("": the
// channel-wide setting) and a channel, the user's groups whose setting
// does not enable the channel for the user's role there: the event type's
// setting first, then the channel's, as groupEnabled reads them
// (conflicting rows merge as in Decide). A group without a setting is left
// to groupNote.
func groupsOff(member []directory.Member, settings []directory.GroupSetting) func(eventType, ch string) string {
	merged := map[prefKey]groupSetting{}
	for _, gs := range settings {
		k := prefKey{gs.Group, gs.EventType, gs.Channel}
		s := groupSetting{on: gs.Enabled, roles: gs.Roles}
		if old, ok := merged[k]; ok {
			s = old.merge(s)
		}
		merged[k] = s
	}
	return func(eventType, ch string) string {
		var notes []string
		for _, m := range member {
			s, ok := merged[prefKey{m.Group, eventType, ch}]
			by := "group " + m.Group + "'s setting"
			if eventType != "" {
				by += " for " + eventType
			}
			if !ok && eventType != "" {
				s, ok = merged[prefKey{m.Group, "", ch}]
				by = "group " + m.Group + "'s setting"
			}
			if !ok || s.enables([]string{m.Role}) {
				continue
			}
			why := "switched off by " + by
			if s.on {
				why = "enabled by " + by + " only for roles " + strings.Join(s.roles, ", ")
			}
			if !slices.Contains(notes, why) {
				notes = append(notes, why)
			}
		}
		if len(notes) == 0 {
			return ""
		}
		return strings.Join(notes, "; ") + ": an event that reaches you through that group alone does not send it, whatever your switch says"
	}
}

func joinNotes(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// supports reports whether channel ch sends to users of userType.
func (rs *RuleSet) supports(ch, userType string) bool {
	ut := rs.channels[ch].Resolved.UserTypes
	return len(ut) == 0 || slices.Contains(ut, userType)
}

// Switchable reports whether the user may set the switch for channel ch
// and event type eventType ("": every event type) in c; when not, why
// names the reason (an unknown event type or channel, or a locked one).
func (c Choices) Switchable(eventType, ch string) (ok bool, why string) {
	list := c.Channels
	if eventType != "" {
		i := slices.IndexFunc(c.Events, func(e EventChoices) bool { return e.EventType == eventType })
		if i < 0 {
			return false, fmt.Sprintf("no event type %q reaches you (see choices.events)", eventType)
		}
		list = c.Events[i].Channels
	}
	i := slices.IndexFunc(list, func(x Choice) bool { return x.Channel == ch })
	switch {
	case i < 0 && eventType == "":
		return false, fmt.Sprintf("no channel %q reaches you (see choices.channels)", ch)
	case i < 0:
		return false, fmt.Sprintf("event type %s sends you no channel %q", eventType, ch)
	case list[i].Locked:
		return false, "locked: " + list[i].Why
	}
	return true, ""
}
