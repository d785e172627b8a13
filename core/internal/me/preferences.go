package me

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
)

// Preferences is the answer of GET and PUT /v1/me/preferences: the user's
// preferences document (what PUT takes back: its channels are the
// switches the user may change) and the choices the rules give them (what
// each switch is now, and which are locked and why). Version is the
// document's version, also the ETag ("<version>") that PUT's If-Match
// names.
type Preferences struct {
	UserID      string                    `json:"user_id"`
	UserType    string                    `json:"user_type"`
	Version     int64                     `json:"version"`
	Preferences directory.UserPreferences `json:"preferences"`
	Choices     rules.Choices             `json:"choices"`
}

// errStale is a PUT whose If-Match names a version that is no longer
// current.
var errStale = errors.New("stale version")

// current reads the user's preferences in tx, with the recipient row
// locked FOR UPDATE when lock is set, and splits their switches: those
// the rules let the user change, and the others (a switch an operator set
// for a locked channel, or for a channel or event type the rules no longer
// have), which the user neither sees nor replaces.
func (s *Server) current(ctx context.Context, tx pgx.Tx, u auth.User, lock bool) (p Preferences, kept []directory.ChannelPreference, err error) {
	q := `SELECT user_type FROM recipients WHERE tenant_id = $1 AND user_id = $2`
	if lock {
		q += ` FOR UPDATE`
	}
	if err = tx.QueryRow(ctx, q, u.Tenant, u.UserID).Scan(&p.UserType); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			err = store.ErrNotFound
		}
		return p, nil, err
	}
	p.UserID = u.UserID
	if p.Preferences, p.Version, err = store.GetPreferences(ctx, tx, u.Tenant, u.UserID); err != nil {
		return p, nil, err
	}
	all := p.Preferences.Channels
	prefs := make([]directory.Preference, len(all))
	for i, c := range all {
		prefs[i] = directory.Preference{UserID: u.UserID, EventType: c.EventType, Channel: c.Channel, Enabled: c.Enabled}
	}
	member, settings, err := groupsOf(ctx, tx, u)
	if err != nil {
		return p, nil, err
	}
	p.Choices = s.choices(p.UserType, prefs, member, settings)
	p.Preferences.Channels = []directory.ChannelPreference{}
	for _, c := range all {
		if ok, _ := p.Choices.Switchable(c.EventType, c.Channel); ok {
			p.Preferences.Channels = append(p.Preferences.Channels, c)
		} else {
			kept = append(kept, c)
		}
	}
	return p, kept, nil
}

// choices are the rules' choices for userType; with no rules loaded, none.
func (s *Server) choices(userType string, prefs []directory.Preference, member []directory.Member, settings []directory.GroupSetting) rules.Choices {
	rs := s.ruleset()
	if rs == nil {
		return rules.Choices{Channels: []rules.Choice{}, Events: []rules.EventChoices{}}
	}
	return rs.Choices(userType, prefs, member, settings)
}

// groupsOf reads the user's memberships and their groups' settings, which
// the choices' notes name when a group keeps an optional channel off.
func groupsOf(ctx context.Context, tx pgx.Tx, u auth.User) ([]directory.Member, []directory.GroupSetting, error) {
	rows, err := tx.Query(ctx, `SELECT group_key, role FROM group_members WHERE tenant_id = $1 AND user_id = $2 ORDER BY group_key`, u.Tenant, u.UserID)
	if err != nil {
		return nil, nil, err
	}
	member, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (directory.Member, error) {
		m := directory.Member{UserID: u.UserID}
		err := r.Scan(&m.Group, &m.Role)
		return m, err
	})
	if err != nil || len(member) == 0 {
		return nil, nil, err
	}
	rows, err = tx.Query(ctx, `SELECT s.group_key, s.event_type, s.channel, s.enabled, s.roles FROM group_settings s
		WHERE s.tenant_id = $1 AND s.group_key IN (SELECT group_key FROM group_members WHERE tenant_id = $1 AND user_id = $2)
		ORDER BY s.group_key, s.event_type, s.channel`, u.Tenant, u.UserID)
	if err != nil {
		return nil, nil, err
	}
	settings, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (directory.GroupSetting, error) {
		var gs directory.GroupSetting
		err := r.Scan(&gs.Group, &gs.EventType, &gs.Channel, &gs.Enabled, &gs.Roles)
		return gs, err
	})
	return member, settings, err
}

// etag is the ETag of version.
func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

func (s *Server) getPreferences(w http.ResponseWriter, r *http.Request) {
	u := userOf(r)
	var p Preferences
	err := s.inUserTx(r.Context(), u, func(tx pgx.Tx) error {
		var err error
		p, _, err = s.current(r.Context(), tx, u, false)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		notInDirectory(w)
	case err != nil:
		s.internal(w, err)
	default:
		w.Header().Set("ETag", etag(p.Version))
		api.WriteJSON(w, http.StatusOK, p)
	}
}

// etagPattern is an ETag etag writes: a positive version in quotes.
var etagPattern = regexp.MustCompile(`^"[1-9][0-9]{0,18}"$`)

// ifMatch reads the If-Match header: 0 when absent or "*", the version it
// names otherwise; anything else (a list, a weak or foreign ETag) is a 400
// naming the header.
func ifMatch(w http.ResponseWriter, r *http.Request) (int64, bool) {
	vals := r.Header.Values("If-Match")
	if len(vals) == 0 {
		return 0, true
	}
	v := strings.TrimSpace(vals[0])
	if len(vals) == 1 && v == "*" {
		return 0, true
	}
	var n int64
	var err error
	if len(vals) == 1 && etagPattern.MatchString(v) {
		n, err = strconv.ParseInt(v[1:len(v)-1], 10, 64)
	}
	if n < 1 || err != nil {
		api.Problem(w, http.StatusBadRequest, "invalid header", `If-Match must be one ETag of GET /v1/me/preferences, such as "3"`, "If-Match")
		return 0, false
	}
	return n, true
}

// putPreferences replaces the user's preferences document: their locale,
// time zone and quiet hours, and the switches they may change (every
// switch must be one the rules offer them unlocked: a switch for a
// mandatory channel, or for a channel or event type that does not reach
// them, is a 422 naming it). Switches they cannot see (an operator's, for
// a locked channel) stay as they are. With If-Match, the write happens
// only if the document is still at that version (412 otherwise).
func (s *Server) putPreferences(w http.ResponseWriter, r *http.Request) {
	u := userOf(r)
	want, ok := ifMatch(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var doc directory.UserPreferences
	if !decodeEntry(w, body, &doc) {
		return
	}
	if doc.QuietHours != nil {
		if _, _, err := doc.QuietHours.Minutes(); err != nil {
			var qe *directory.QuietHoursError
			errors.As(err, &qe)
			api.Problem(w, http.StatusBadRequest, "invalid body", "quiet_hours."+qe.Field+": "+qe.Msg, "quiet_hours."+qe.Field)
			return
		}
	}
	var out Preferences
	var refused directory.Problems
	err := s.inUserTx(r.Context(), u, func(tx pgx.Tx) error {
		refused = nil
		cur, kept, err := s.current(r.Context(), tx, u, true)
		if err != nil {
			return err
		}
		if want > 0 && cur.Version != want {
			out = cur
			return errStale
		}
		for i, c := range doc.Channels {
			if ok, why := cur.Choices.Switchable(c.EventType, c.Channel); !ok {
				field := fmt.Sprintf("channels[%d].channel", i)
				if strings.HasPrefix(why, "no event type") {
					field = fmt.Sprintf("channels[%d].event_type", i)
				}
				refused = append(refused, directory.Problem{Field: field, Msg: why})
			}
		}
		if len(refused) > 0 {
			return nil
		}
		next := doc
		next.Channels = append(append([]directory.ChannelPreference{}, doc.Channels...), kept...)
		if _, err := store.ReplacePreferences(r.Context(), tx, u.Tenant, u.UserID, next, cur.Version); err != nil {
			return err
		}
		out, _, err = s.current(r.Context(), tx, u, false)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		notInDirectory(w)
	case errors.Is(err, errStale):
		w.Header().Set("ETag", etag(out.Version))
		api.Problem(w, http.StatusPreconditionFailed, "preferences changed",
			fmt.Sprintf("the preferences are at version %d, not %d: another change came first; GET them again and reapply yours", out.Version, want), "If-Match")
	case err != nil:
		s.internal(w, err)
	case len(refused) > 0:
		writeProblems(w, http.StatusUnprocessableEntity, "switch not allowed", refused)
	default:
		w.Header().Set("ETag", etag(out.Version))
		api.WriteJSON(w, http.StatusOK, out)
	}
}
