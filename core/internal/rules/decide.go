package rules

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/directory"
)

// Audience descriptions used in RecipientDecision.Via.
const (
	viaGroup    = "group "
	viaUser     = "user "
	viaUserType = "user_type "
	viaPayload  = "payload "
)

// Needs returns the directory data the decision for ev reads: group keys and
// user ids rendered from the payload, and broadcast user types. The caller
// loads exactly that into the Directory it passes to Decide.
func (rs *RuleSet) Needs(ev Event) (directory.Needs, error) {
	ce, err := rs.event(ev.Type)
	if err != nil {
		return directory.Needs{}, err
	}
	payload, err := decodePayload(ev.Payload)
	if err != nil {
		return directory.Needs{}, fmt.Errorf("rules: event %s: %w", ev.Type, err)
	}
	data := audienceData(ev, payload)
	var n directory.Needs
	for i, a := range ce.audiences {
		switch {
		case a.group != nil || a.groupsPath != nil:
			keys, err := a.groupKeys(data, payload)
			if err != nil {
				return directory.Needs{}, fmt.Errorf("rules: event %s: audience %d: %w", ev.Type, i, err)
			}
			n.GroupKeys = append(n.GroupKeys, keys...)
		case a.user != nil:
			id, err := renderKey(a.user, data)
			if err != nil {
				return directory.Needs{}, fmt.Errorf("rules: event %s: audience %d: %s: %w", ev.Type, i, KeyUser, err)
			}
			n.UserIDs = append(n.UserIDs, id)
		case a.spec.UserType != "":
			n.UserTypes = append(n.UserTypes, a.spec.UserType)
		case a.path != nil:
			ids, err := payloadUserIDs(payload, a.path)
			if err != nil {
				return directory.Needs{}, fmt.Errorf("rules: event %s: audience %d: %s: %w", ev.Type, i, KeyPayloadPath, err)
			}
			n.UserIDs = append(n.UserIDs, ids...)
		}
	}
	for _, ch := range ce.postChannels {
		if key, err := renderKey(ce.posts[ch], data); err == nil {
			n.GroupKeys = append(n.GroupKeys, key)
		}
	}
	n.GroupKeys = sortedUnique(n.GroupKeys)
	n.UserIDs = sortedUnique(n.UserIDs)
	n.UserTypes = sortedUnique(n.UserTypes)
	return n, nil
}

func sortedUnique(s []string) []string {
	sort.Strings(s)
	return slices.Compact(s)
}

// dirIndex is a Directory indexed for one decision.
type dirIndex struct {
	recipients map[string]*directory.Recipient
	byType     map[string][]string // user type → sorted user ids
	groups     map[string]*directory.Group
	members    map[string][]directory.Member // group key → members sorted by user id
	prefs      map[prefKey]bool
	settings   map[prefKey]groupSetting
}

// prefKey identifies a preference (owner = user id) or a group setting
// (owner = group key).
type prefKey struct{ owner, eventType, channel string }

func indexDirectory(dir *directory.Directory) *dirIndex {
	ix := &dirIndex{
		recipients: map[string]*directory.Recipient{},
		byType:     map[string][]string{},
		groups:     map[string]*directory.Group{},
		members:    map[string][]directory.Member{},
		prefs:      map[prefKey]bool{},
		settings:   map[prefKey]groupSetting{},
	}
	if dir == nil {
		return ix
	}
	for i := range dir.Recipients {
		r := &dir.Recipients[i]
		if _, dup := ix.recipients[r.UserID]; !dup {
			ix.byType[r.UserType] = append(ix.byType[r.UserType], r.UserID)
		}
		ix.recipients[r.UserID] = r
	}
	for _, ids := range ix.byType {
		sort.Strings(ids)
	}
	for i := range dir.Groups {
		ix.groups[dir.Groups[i].Key] = &dir.Groups[i]
	}
	for _, m := range dir.Members {
		ix.members[m.Group] = append(ix.members[m.Group], m)
	}
	for _, ms := range ix.members {
		slices.SortFunc(ms, func(a, b directory.Member) int {
			if c := strings.Compare(a.UserID, b.UserID); c != 0 {
				return c
			}
			return strings.Compare(a.Role, b.Role)
		})
	}
	// Conflicting duplicate rows resolve to disabled, whatever their order.
	for _, p := range dir.Preferences {
		k := prefKey{p.UserID, p.EventType, p.Channel}
		if old, ok := ix.prefs[k]; ok {
			ix.prefs[k] = old && p.Enabled
			continue
		}
		ix.prefs[k] = p.Enabled
	}
	for _, s := range dir.Settings {
		k := prefKey{s.Group, s.EventType, s.Channel}
		gs := groupSetting{on: s.Enabled, roles: s.Roles}
		if old, ok := ix.settings[k]; ok {
			gs = old.merge(gs)
		}
		ix.settings[k] = gs
	}
	return ix
}

// reach records how audiences reached one user.
type reach struct {
	userID string
	via    []string
	roles  []string
	// groups through which the user was reached, in order, with the best
	// role priority the user had in each.
	groups   []string
	groupPri map[string]int
	// groupRoles are the roles the user was reached with, by group.
	groupRoles map[string][]string
	// direct is set when a non-group audience reached the user.
	direct bool
}

func (r *reach) addVia(v string) {
	if !slices.Contains(r.via, v) {
		r.via = append(r.via, v)
	}
}

// Decide computes who gets ev and on which channels, with a reason for every
// choice, from dir (a snapshot holding at least what Needs asked for) at
// time at. It does no I/O.
func (rs *RuleSet) Decide(ev Event, dir *directory.Directory, at time.Time) (Decision, error) {
	return rs.decideIndexed(ev, IndexDirectory(dir), at, true)
}

// DirectoryIndex is a Directory indexed for decisions. Build it once with
// IndexDirectory to decide many events against the same snapshot; it is
// read-only and safe to share.
type DirectoryIndex struct{ ix *dirIndex }

// IndexDirectory indexes dir for DecideIndexed.
func IndexDirectory(dir *directory.Directory) DirectoryIndex {
	return DirectoryIndex{indexDirectory(dir)}
}

// DecideIndexed is Decide against an indexed directory snapshot, for the
// relay's hot path: the same recipients, channels and reasons, without the
// fields only an explanation reads (Warnings, and each recipient's
// LocalTime and QuietHours).
func (rs *RuleSet) DecideIndexed(ev Event, dix DirectoryIndex, at time.Time) (Decision, error) {
	return rs.decideIndexed(ev, dix, at, false)
}

// decideIndexed decides; explain also fills the explanation's fields.
func (rs *RuleSet) decideIndexed(ev Event, dix DirectoryIndex, at time.Time, explain bool) (Decision, error) {
	ix := dix.ix
	if ix == nil {
		ix = indexDirectory(nil)
	}
	ce, err := rs.event(ev.Type)
	if err != nil {
		return Decision{}, err
	}
	payload, err := decodePayload(ev.Payload)
	if err != nil {
		return Decision{}, fmt.Errorf("rules: event %s: %w", ev.Type, err)
	}
	data := audienceData(ev, payload)

	reached := map[string]*reach{}
	get := func(id string) *reach {
		r, ok := reached[id]
		if !ok {
			r = &reach{userID: id, groupPri: map[string]int{}, groupRoles: map[string][]string{}}
			reached[id] = r
		}
		return r
	}
	var outcomes []audienceOutcome
	for i, a := range ce.audiences {
		switch {
		case a.group != nil || a.groupsPath != nil:
			keys, err := a.groupKeys(data, payload)
			if err != nil {
				return Decision{}, fmt.Errorf("rules: event %s: audience %d: %w", ev.Type, i, err)
			}
			for _, key := range keys {
				var out audienceOutcome
				if explain {
					out = audienceOutcome{via: viaGroup + key, group: key, roles: a.spec.Roles}
				}
				for _, m := range ix.members[key] {
					pri := len(a.spec.Roles)
					if len(a.spec.Roles) > 0 {
						p, ok := a.rolePrio[m.Role]
						if !ok {
							continue
						}
						pri = p
					}
					if explain {
						out.ids = append(out.ids, m.UserID)
					}
					r := get(m.UserID)
					r.addVia(viaGroup + key)
					if !slices.Contains(r.roles, m.Role) && m.Role != "" {
						r.roles = append(r.roles, m.Role)
					}
					if m.Role != "" && !slices.Contains(r.groupRoles[key], m.Role) {
						r.groupRoles[key] = append(r.groupRoles[key], m.Role)
					}
					if old, ok := r.groupPri[key]; !ok {
						r.groups = append(r.groups, key)
						r.groupPri[key] = pri
					} else if pri < old {
						r.groupPri[key] = pri
					}
				}
				if explain {
					outcomes = append(outcomes, out)
				}
			}
		case a.user != nil:
			id, err := renderKey(a.user, data)
			if err != nil {
				return Decision{}, fmt.Errorf("rules: event %s: audience %d: %s: %w", ev.Type, i, KeyUser, err)
			}
			r := get(id)
			r.addVia(viaUser + id)
			r.direct = true
			if explain {
				outcomes = append(outcomes, audienceOutcome{via: viaUser + id, ids: []string{id}})
			}
		case a.spec.UserType != "":
			for _, id := range ix.byType[a.spec.UserType] {
				r := get(id)
				r.addVia(viaUserType + a.spec.UserType)
				r.direct = true
			}
			if explain {
				outcomes = append(outcomes, audienceOutcome{via: viaUserType + a.spec.UserType, ids: ix.byType[a.spec.UserType]})
			}
		case a.path != nil:
			ids, err := payloadUserIDs(payload, a.path)
			if err != nil {
				return Decision{}, fmt.Errorf("rules: event %s: audience %d: %s: %w", ev.Type, i, KeyPayloadPath, err)
			}
			for _, id := range ids {
				r := get(id)
				r.addVia(viaPayload + a.spec.PayloadPath)
				r.direct = true
			}
			if explain {
				outcomes = append(outcomes, audienceOutcome{via: viaPayload + a.spec.PayloadPath, ids: ids})
			}
		}
	}

	d := Decision{
		EventID:    ev.EventID,
		EventType:  ev.Type,
		Severity:   ce.spec.Severity,
		Shared:     ce.spec.Shared,
		Recipients: []RecipientDecision{},
	}
	ids := sortedKeys(reached)
	var active []*reach
	for _, id := range ids {
		r := reached[id]
		rec, ok := ix.recipients[id]
		switch {
		case !ok:
			d.Excluded = append(d.Excluded, Exclusion{UserID: id, Reason: "unknown user: not in the directory"})
		case !rec.Active:
			d.Excluded = append(d.Excluded, Exclusion{UserID: id, Reason: "inactive"})
		default:
			active = append(active, r)
		}
	}

	capped := rs.applyMaxRecipients(active, ix)
	for _, r := range active {
		if reasons, out := capped[r.userID]; out && !r.direct && len(reasons) == len(r.groups) {
			d.Excluded = append(d.Excluded, Exclusion{UserID: r.userID, Reason: strings.Join(reasons, "; ")})
			continue
		}
		d.Recipients = append(d.Recipients, rs.decideRecipient(ce, ix, r, at, explain))
	}
	slices.SortFunc(d.Excluded, func(a, b Exclusion) int { return strings.Compare(a.UserID, b.UserID) })
	d.Posts = posts(ce, ix, data)
	ce.applyDigest(&d, data, at, rs.recipientZone)
	ce.applyThrottle(&d, data)
	if explain {
		d.Warnings = audienceWarnings(outcomes, ix)
		d.Channels = rs.channelClasses(ce)
	}
	return d, nil
}

// posts addresses the event's place channels: each post's to template
// names a group, and the group's destination for the channel is where the
// post goes. A post that cannot be addressed carries its Error; the
// others and the recipients go on.
func posts(ce *compiledEvent, ix *dirIndex, data map[string]any) []PostDecision {
	var out []PostDecision
	for _, ch := range ce.postChannels {
		p := PostDecision{Channel: ch}
		key, err := renderKey(ce.posts[ch], data)
		switch {
		case err != nil:
			p.Error = fmt.Sprintf("%s %q: %v", KeyTo, ce.spec.Posts[ch].To, err)
		default:
			p.To = key
			g, ok := ix.groups[key]
			switch {
			case !ok:
				p.Error = "unknown destination: no group " + key + " in the directory"
			case g.Destinations[ch] == "":
				p.Error = fmt.Sprintf("unknown destination: group %s has no %s destination (its destinations in the directory)", key, ch)
			default:
				p.Address = g.Destinations[ch]
			}
		}
		out = append(out, p)
	}
	return out
}

// PlaceRecipient is who a post to the place key is rendered for: the
// place's key as its id, no user type and no addresses, and the rules'
// default locale and zone (a place has no preferences or quiet hours).
// A template that reads a person's field fails for the post alone.
func (rs *RuleSet) PlaceRecipient(key string) directory.Recipient {
	return directory.Recipient{UserID: key, Locale: rs.spec.Defaults.Locale, TimeZone: rs.spec.Defaults.TimeZone, Active: true}
}

// channelClasses lists the class, intrusiveness and user types of every
// channel ce considers, with the source that won each.
func (rs *RuleSet) channelClasses(ce *compiledEvent) []ChannelClass {
	out := make([]ChannelClass, 0, len(ce.considered))
	for _, name := range ce.considered {
		r := rs.channels[name].Resolved
		out = append(out, ChannelClass{
			Channel: name, Class: r.ClassName(), ClassFrom: r.ClassFrom,
			Intrusive: r.Intrusive, IntrusiveFrom: r.IntrusiveFrom,
			UserTypes: slices.Clone(r.UserTypes), UserTypesFrom: r.UserTypesFrom,
		})
	}
	return out
}

// applyMaxRecipients ranks the active users reached through each capped
// group (role priority, then user id) and returns, for every user cut by a
// group, one reason per cutting group.
func (rs *RuleSet) applyMaxRecipients(active []*reach, ix *dirIndex) map[string][]string {
	byGroup := map[string][]*reach{}
	for _, r := range active {
		for _, g := range r.groups {
			byGroup[g] = append(byGroup[g], r)
		}
	}
	out := map[string][]string{}
	for _, key := range sortedKeys(byGroup) {
		g, ok := ix.groups[key]
		if !ok || g.MaxRecipients <= 0 || len(byGroup[key]) <= g.MaxRecipients {
			continue
		}
		members := byGroup[key]
		slices.SortFunc(members, func(a, b *reach) int {
			if c := a.groupPri[key] - b.groupPri[key]; c != 0 {
				return c
			}
			return strings.Compare(a.userID, b.userID)
		})
		for _, r := range members[g.MaxRecipients:] {
			out[r.userID] = append(out[r.userID], fmt.Sprintf("over max_recipients %d of group %s", g.MaxRecipients, key))
		}
	}
	return out
}

func (rs *RuleSet) decideRecipient(ce *compiledEvent, ix *dirIndex, r *reach, at time.Time, explain bool) RecipientDecision {
	rec := *ix.recipients[r.userID]
	rd := RecipientDecision{
		Recipient: rec,
		Via:       slices.Clone(r.via),
		Channels:  []ChannelDecision{},
		Dropped:   []ChannelDecision{},
	}
	if len(r.roles) > 0 {
		rd.Role = r.roles[0]
	}
	// The quiet-hours window is looked up once, when a channel needs it
	// or the explanation shows it.
	var (
		qw     *window
		qloc   *time.Location
		qwhose string
		qdone  bool
	)
	quiet := func() {
		if !qdone {
			qw, qloc, qwhose = rs.quietWindow(ix, r, rec)
			qdone = true
		}
	}
	if explain {
		quiet()
		rd.LocalTime = at.In(qloc).Format("2006-01-02 15:04 Mon") + " " + qloc.String()
		if qw != nil {
			rd.QuietHours = qw.text + ", " + qwhose
		}
	}
	keep := func(cd ChannelDecision) { rd.Channels = append(rd.Channels, cd) }
	drop := func(cd ChannelDecision, why string) {
		cd.Reason = "dropped: " + why
		rd.Dropped = append(rd.Dropped, cd)
	}
	evType := ce.spec.Type
	for _, ch := range ce.considered {
		cfg := rs.channels[ch]
		cd := ChannelDecision{Channel: ch, Mandatory: ce.mandatory[ch]}
		if ut := cfg.Resolved.UserTypes; len(ut) > 0 && !slices.Contains(ut, rec.UserType) {
			drop(cd, "not supported for user type "+rec.UserType+" ("+userTypesSource(cfg.Resolved.UserTypesFrom)+")")
			continue
		}
		if cd.Mandatory {
			cd.Reason = "mandatory"
		} else {
			gOK, gWhy := rs.groupEnabled(ix, r, rec.UserType, evType, ch)
			uOK, uWhy := rs.userEnabled(ix, rec, evType, ch)
			if !gOK || !uOK {
				var whys []string
				if !gOK {
					whys = append(whys, gWhy...)
				}
				if !uOK && !slices.Contains(whys, uWhy) {
					whys = append(whys, uWhy)
				}
				drop(cd, strings.Join(whys, " and "))
				continue
			}
			cd.Reason = "optional: " + strings.Join(append(gWhy, uWhy), "; ")
			if roles := ce.spec.Restrict[ch]; len(roles) > 0 && !anyIn(r.roles, roles) {
				drop(cd, fmt.Sprintf("%s restricted to roles %s (the rule's restrict)", ch, strings.Join(roles, ", ")))
				continue
			}
		}
		// quietAt says whether quiet hours hold the channel at t: until
		// when, why, and whether the rule drops it then (a mandatory
		// channel is deferred instead).
		mode := ce.spec.QuietHours
		if m, ok := ce.spec.QuietHoursByChannel[ch]; ok {
			mode = m
		}
		quietAt := func(t time.Time) (time.Time, string, bool) {
			if !cfg.Resolved.Intrusive || mode == QuietIgnore {
				return time.Time{}, "", false
			}
			quiet()
			if qw == nil {
				return time.Time{}, "", false
			}
			local := t.In(qloc)
			if !qw.contains(local) {
				return time.Time{}, "", false
			}
			qh := fmt.Sprintf("quiet hours %s %s, %s; local time %s", qw.text, qloc, qwhose, local.Format("15:04"))
			return qw.endAfter(local), qh, mode == QuietDrop && !cd.Mandatory
		}
		if es, ok := ce.escalations[ch]; ok {
			// An escalation is sent only when it is due: quiet hours are
			// those of that time, not of now.
			e, why := escalate(es, at, quietAt)
			if why != "" {
				drop(cd, why)
				continue
			}
			cd.Escalation = e
			cd.Reason += "; " + e.reason()
			keep(cd)
			continue
		}
		if until, qh, dropIt := quietAt(at); qh != "" {
			if dropIt {
				drop(cd, qh)
				continue
			}
			cd.Deferred = true
			cd.DeferUntil = until
			cd.Reason = fmt.Sprintf("deferred until %s (%s)", cd.DeferUntil.Format(time.RFC3339), qh)
			if mode == QuietDrop {
				cd.Reason += "; mandatory, so deferred instead of dropped"
			}
		}
		keep(cd)
	}
	return rd
}

// userTypesSource says whose list of user types left a recipient out.
func userTypesSource(from string) string {
	if from == channel.FromRules {
		return "the channel's user_types, set in rules"
	}
	return "the channel's user types, " + from
}

func anyIn(have, want []string) bool {
	for _, h := range have {
		if slices.Contains(want, h) {
			return true
		}
	}
	return false
}

// defaultEnabled reports whether an optional channel is on for a user type
// when no group setting or user preference says.
func (rs *RuleSet) defaultEnabled(userType, ch string) bool {
	d, ok := rs.spec.Defaults.UserTypes[userType]
	if !ok || !d.EnabledSet {
		return true
	}
	return slices.Contains(d.Enabled, ch)
}

// defaultSource names the default defaultEnabled applied: the user type's
// (the rules' defaults for the type list its channels) or the global one
// (every optional channel on).
func (rs *RuleSet) defaultSource(userType string) string {
	if d, ok := rs.spec.Defaults.UserTypes[userType]; ok && d.EnabledSet {
		return "default for user type " + userType + " (default)"
	}
	return "global default (default)"
}

// groupEnabled reports whether any group that reached the user enables ch
// (event-type setting, then channel setting, then the user type's
// default); users reached by no group use the user type's default. When
// disabled it returns one reason per group.
func (rs *RuleSet) groupEnabled(ix *dirIndex, r *reach, userType, evType, ch string) (bool, []string) {
	if len(r.groups) == 0 {
		if rs.defaultEnabled(userType, ch) {
			return true, nil // the user's side names the same default
		}
		return false, []string{"disabled by " + rs.defaultSource(userType)}
	}
	var whys []string
	for _, g := range r.groups {
		if s, ok := ix.settings[prefKey{g, evType, ch}]; ok {
			if s.enables(r.groupRoles[g]) {
				return true, []string{fmt.Sprintf("group: %s setting for %s (explicit)", g, evType)}
			}
			whys = append(whys, s.why(fmt.Sprintf("by group %s setting for %s", g, evType))+" (explicit)")
			continue
		}
		if s, ok := ix.settings[prefKey{g, "", ch}]; ok {
			if s.enables(r.groupRoles[g]) {
				return true, []string{"group: " + g + " setting (explicit)"}
			}
			whys = append(whys, s.why("by group "+g+" setting")+" (explicit)")
			continue
		}
		if rs.defaultEnabled(userType, ch) {
			return true, []string{"group: no setting, " + rs.defaultSource(userType)}
		}
		why := "disabled by " + rs.defaultSource(userType)
		if !slices.Contains(whys, why) {
			whys = append(whys, why)
		}
	}
	return false, whys
}

// userEnabled applies the user's preference (event type first) or the
// user type's default. The reason names the source: "disabled by ..." when
// off, the source alone when on.
func (rs *RuleSet) userEnabled(ix *dirIndex, rec directory.Recipient, evType, ch string) (bool, string) {
	src := ""
	on, ok := ix.prefs[prefKey{rec.UserID, evType, ch}]
	switch {
	case ok:
		src = "preference for " + evType + " (explicit)"
	default:
		if on, ok = ix.prefs[prefKey{rec.UserID, "", ch}]; ok {
			src = "preference (explicit)"
		} else {
			on = rs.defaultEnabled(rec.UserType, ch)
			if on {
				return true, "user: no preference, " + rs.defaultSource(rec.UserType)
			}
			return false, "disabled by " + rs.defaultSource(rec.UserType)
		}
	}
	if !on {
		return false, "disabled by user " + src
	}
	return true, "user: " + src
}

// quietWindow picks the recipient's quiet hours (their own, then the first
// reaching group's, then the user type's default, then the global default)
// and their zone (bad or empty zones fall back to the defaults' zone), and
// says whose window it is.
func (rs *RuleSet) quietWindow(ix *dirIndex, r *reach, rec directory.Recipient) (*window, *time.Location, string) {
	loc := rs.recipientZone(rec)
	if rec.QuietHours != nil {
		if w, err := parseWindow(*rec.QuietHours); err == nil {
			return w, loc, "the user's own window (explicit)"
		}
	}
	for _, key := range r.groups {
		if g, ok := ix.groups[key]; ok && g.QuietHours != nil {
			if w, err := parseWindow(*g.QuietHours); err == nil {
				return w, loc, "group " + key + "'s window (explicit)"
			}
		}
	}
	if w := rs.typeQH[rec.UserType]; w != nil {
		return w, loc, "the default window for user type " + rec.UserType + " (default)"
	}
	return rs.defaultQH, loc, "the global default window (default)"
}

// recipientZone is rec's time zone: their own, or the defaults' zone when
// they have none or a bad one.
func (rs *RuleSet) recipientZone(rec directory.Recipient) *time.Location {
	if rec.TimeZone != "" {
		if l := loadZone(rec.TimeZone); l != nil {
			return l
		}
	}
	return rs.defaultZone
}

// groupSetting is a group's switch for a channel, optionally limited to
// some roles of the group's members.
type groupSetting struct {
	on    bool
	roles []string
}

// enables reports whether the setting enables the channel for a member
// reached with roles.
func (s groupSetting) enables(roles []string) bool {
	if !s.on {
		return false
	}
	if len(s.roles) == 0 {
		return true
	}
	for _, r := range roles {
		if slices.Contains(s.roles, r) {
			return true
		}
	}
	return false
}

// why says why the setting did not enable the channel; by names whose
// setting it is ("by group restaurant:5").
func (s groupSetting) why(by string) string {
	if s.on && len(s.roles) > 0 {
		return "enabled " + by + " only for roles " + strings.Join(s.roles, ", ")
	}
	return "disabled " + by
}

// merge resolves two rows for the same group, event type and channel:
// conflicting rows resolve to disabled, and role limits narrow.
func (s groupSetting) merge(o groupSetting) groupSetting {
	out := groupSetting{on: s.on && o.on}
	switch {
	case len(s.roles) == 0:
		out.roles = o.roles
	case len(o.roles) == 0:
		out.roles = s.roles
	default:
		for _, r := range s.roles {
			if slices.Contains(o.roles, r) {
				out.roles = append(out.roles, r)
			}
		}
		if len(out.roles) == 0 {
			out.on = false
		}
	}
	return out
}

// groupKeys returns the group keys of a group audience: Group rendered
// once, or, with GroupsPath, one key per item of the payload's list (each
// item a key, or .item of Group rendered per item). Repeats are dropped.
func (a compiledAudience) groupKeys(data map[string]any, payload any) ([]string, error) {
	if a.groupsPath == nil {
		key, err := renderKey(a.group, data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", KeyGroup, err)
		}
		return []string{key}, nil
	}
	list, err := payloadList(payload, a.groupsPath)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyGroupsPath, err)
	}
	keys := make([]string, 0, len(list))
	for i, x := range list {
		var key string
		if a.group != nil {
			d := make(map[string]any, len(data)+1)
			for k, v := range data {
				d[k] = v
			}
			d["item"] = x
			if key, err = renderKey(a.group, d); err != nil {
				return nil, fmt.Errorf("%s: item %d: %w", KeyGroup, i, err)
			}
		} else if key, err = groupKeyOf(x); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", strings.Join(a.groupsPath, "."), i, err)
		}
		if !slices.Contains(keys, key) {
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// groupKeyOf is a groups_path item as a group key: a non-empty string or a
// number.
func groupKeyOf(x any) (string, error) {
	if _, isObject := x.(map[string]any); !isObject {
		if key, err := userIDOf(x); err == nil {
			return key, nil
		}
	}
	return "", fmt.Errorf("not a group key (want a non-empty string or a number; with group, items may be anything .item can read): %v", x)
}
