package rules

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/heraldhq/herald/core/internal/directory"
)

// audienceOutcome is what one audience of a decision reached.
type audienceOutcome struct {
	via   string   // "group restaurant:5", "user 42", ...
	group string   // the group key, for group audiences
	roles []string // the role filter, for group audiences
	ids   []string // users reached
}

// audienceWarnings names the audiences that reached no active user of the
// directory, with the reason.
func audienceWarnings(outs []audienceOutcome, ix *dirIndex) []string {
	var ws []string
	for _, o := range outs {
		active, known := 0, 0
		for _, id := range o.ids {
			if r, ok := ix.recipients[id]; ok {
				known++
				if r.Active {
					active++
				}
			}
		}
		if active > 0 {
			continue
		}
		var why string
		switch {
		case o.group != "" && len(ix.members[o.group]) == 0 && ix.groups[o.group] == nil:
			why = "group " + o.group + " is not in the directory"
		case o.group != "" && len(ix.members[o.group]) == 0:
			why = "group " + o.group + " has no members"
		case o.group != "" && len(o.ids) == 0:
			why = fmt.Sprintf("no member of group %s has one of the roles %s", o.group, strings.Join(o.roles, ", "))
		case len(o.ids) == 0 && strings.HasPrefix(o.via, viaUserType):
			why = "no user of type " + strings.TrimPrefix(o.via, viaUserType) + " in the directory"
		case len(o.ids) == 0:
			why = "the payload lists no user ids"
		case known == 0:
			why = "not in the directory: " + strings.Join(o.ids, ", ")
		default:
			why = "every user reached is inactive"
		}
		ws = append(ws, fmt.Sprintf("audience %s matched nobody to notify: %s", o.via, why))
	}
	return ws
}

// UserExplanation says what a decision did for one user, or why no
// audience reached them.
type UserExplanation struct {
	UserID string `json:"user_id"`
	// Recipient is the user's directory entry (nil: not in the directory).
	Recipient *directory.Recipient `json:"recipient,omitempty"`
	// Audiences checks every audience of the rule against the user.
	Audiences []AudienceCheck `json:"audiences"`
	// Decision is the user's channels when they are notified.
	Decision *RecipientDecision `json:"decision,omitempty"`
	// Excluded is why an audience reached them but they are not notified.
	Excluded string `json:"excluded,omitempty"`
	// Summary is one line: notified on N channels, or why not.
	Summary string `json:"summary"`
	// Channels are the rule's channels with their class and its source,
	// as in Decision.
	Channels []ChannelClass `json:"channels,omitempty"`
}

// AudienceCheck is one audience of a rule, checked against one user.
type AudienceCheck struct {
	Audience string `json:"audience"`
	Reached  bool   `json:"reached"`
	Why      string `json:"why"`
}

// ExplainUser explains the decision for ev for one user, including the
// user no audience reached: every audience says why it did or did not
// reach them (not a member, unknown group, a role outside the filter, a
// different user type, not in the payload's list), and a reached user's
// channels or exclusion (inactive, over max_recipients) follow. dir must
// hold the user (add their id to Needs.UserIDs when loading it).
func (rs *RuleSet) ExplainUser(ev Event, dir *directory.Directory, at time.Time, userID string) (UserExplanation, error) {
	ix := indexDirectory(dir)
	d, err := rs.decideIndexed(ev, DirectoryIndex{ix}, at, true)
	if err != nil {
		return UserExplanation{}, err
	}
	ce, err := rs.event(ev.Type)
	if err != nil {
		return UserExplanation{}, err
	}
	payload, err := decodePayload(ev.Payload)
	if err != nil {
		return UserExplanation{}, fmt.Errorf("rules: event %s: %w", ev.Type, err)
	}
	data := audienceData(ev, payload)
	ue := UserExplanation{UserID: userID, Audiences: []AudienceCheck{}}
	rec := ix.recipients[userID]
	if rec != nil {
		c := *rec
		ue.Recipient = &c
	}
	for i, a := range ce.audiences {
		var ac AudienceCheck
		switch {
		case a.group != nil || a.groupsPath != nil:
			keys, err := a.groupKeys(data, payload)
			if err != nil {
				return UserExplanation{}, fmt.Errorf("rules: event %s: audience %d: %w", ev.Type, i, err)
			}
			if len(keys) == 0 {
				ue.Audiences = append(ue.Audiences, AudienceCheck{
					Audience: "groups " + a.spec.GroupsPath,
					Why:      "the payload lists no group",
				})
			}
			for _, key := range keys {
				ue.Audiences = append(ue.Audiences, groupCheck(ix, key, a.spec.Roles, userID))
			}
			continue
		case a.user != nil:
			id, err := renderKey(a.user, data)
			if err != nil {
				return UserExplanation{}, fmt.Errorf("rules: event %s: audience %d: %s: %w", ev.Type, i, KeyUser, err)
			}
			ac.Audience = viaUser + id
			if id == userID {
				ac.Reached, ac.Why = true, "the user named"
			} else {
				ac.Why = fmt.Sprintf("names user %q, not this user", id)
			}
		case a.spec.UserType != "":
			ac.Audience = viaUserType + a.spec.UserType
			switch {
			case rec == nil:
				ac.Why = "the user is not in the directory"
			case rec.UserType == a.spec.UserType:
				ac.Reached, ac.Why = true, "user type "+rec.UserType
			default:
				ac.Why = fmt.Sprintf("user type %s, not %s", rec.UserType, a.spec.UserType)
			}
		case a.path != nil:
			ac.Audience = viaPayload + a.spec.PayloadPath
			ids, err := payloadUserIDs(payload, a.path)
			if err != nil {
				return UserExplanation{}, fmt.Errorf("rules: event %s: audience %d: %s: %w", ev.Type, i, KeyPayloadPath, err)
			}
			if slices.Contains(ids, userID) {
				ac.Reached, ac.Why = true, "listed in the payload"
			} else {
				ac.Why = fmt.Sprintf("not among the %d user ids the payload lists", len(ids))
			}
		}
		ue.Audiences = append(ue.Audiences, ac)
	}
	for i := range d.Recipients {
		if d.Recipients[i].Recipient.UserID == userID {
			rd := d.Recipients[i]
			ue.Decision = &rd
		}
	}
	for _, e := range d.Excluded {
		if e.UserID == userID {
			ue.Excluded = e.Reason
		}
	}
	switch {
	case ue.Decision != nil:
		n := len(ue.Decision.Channels)
		ue.Summary = fmt.Sprintf("notified: inbox and %d %s, %d dropped", n, plural(n, "channel", "channels"), len(ue.Decision.Dropped))
	case ue.Excluded != "":
		ue.Summary = "not notified: reached, but " + ue.Excluded
	case rec == nil:
		ue.Summary = "not notified: user " + userID + " is not in the directory, and no audience names them"
	default:
		ue.Summary = "not notified: no audience of " + ev.Type + " reached the user"
	}
	ue.Channels = d.Channels
	return ue, nil
}

// groupCheck says whether a group audience of key (with its role filter)
// reached userID, and why.
func groupCheck(ix *dirIndex, key string, roles []string, userID string) AudienceCheck {
	ac := AudienceCheck{Audience: viaGroup + key}
	if len(roles) > 0 {
		ac.Audience += " roles " + strings.Join(roles, ", ")
	}
	var role string
	member := false
	for _, m := range ix.members[key] {
		if m.UserID == userID {
			member, role = true, m.Role
			if len(roles) == 0 || slices.Contains(roles, m.Role) {
				break
			}
		}
	}
	switch {
	case ix.groups[key] == nil && len(ix.members[key]) == 0:
		ac.Why = "group " + key + " is not in the directory"
	case !member:
		ac.Why = "not a member of group " + key
	case len(roles) > 0 && !slices.Contains(roles, role):
		ac.Why = fmt.Sprintf("member of %s with role %q, not one of %s", key, role, strings.Join(roles, ", "))
	default:
		ac.Reached = true
		ac.Why = "member of " + key
		if role != "" {
			ac.Why += " with role " + role
		}
	}
	return ac
}
