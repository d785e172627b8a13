package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/jackc/pgx/v5"
)

// ExportDirectory reads a tenant's whole directory in the form
// `herald directory import` reads: every list sorted by its key, devices
// of no kind as device_tokens and the others as devices, empty
// attributes, quiet hours and roles left out. Run it in one transaction
// (repeatable read) for a consistent snapshot. ImportDirectory of the
// result, with PruneDirectory, changes nothing.
func ExportDirectory(ctx context.Context, q interface {
	Querier
	Batcher
}, tenantID string) (*directory.Directory, error) {
	dir := &directory.Directory{}
	rows, err := q.Query(ctx, `SELECT r.user_id, r.user_type, r.email, r.phone, r.locale, r.time_zone, r.active, r.quiet_start, r.quiet_end, r.attributes,
			COALESCE((SELECT jsonb_agg(jsonb_build_object('kind', d.platform, 'token', d.token, 'p256dh', d.p256dh, 'auth', d.auth)
			                           ORDER BY d.token) FROM recipient_devices d
			          WHERE d.tenant_id = r.tenant_id AND d.user_id = r.user_id), '[]')
		FROM recipients r WHERE r.tenant_id = $1 ORDER BY r.user_id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("export recipients: %w", err)
	}
	dir.Recipients, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (directory.Recipient, error) {
		var r directory.Recipient
		var qs, qe string
		var devs []directory.Device
		err := row.Scan(&r.UserID, &r.UserType, &r.Email, &r.Phone, &r.Locale, &r.TimeZone, &r.Active, &qs, &qe, &r.Attributes, &devs)
		r.QuietHours = quietHours(qs, qe)
		r.DeviceTokens, r.Devices = splitDevices(devs)
		if len(r.Attributes) == 0 {
			r.Attributes = nil
		}
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("export recipients: %w", err)
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT `+groupSelect+` FROM groups WHERE tenant_id = $1 ORDER BY group_key`, tenantID)
	b.Queue(`SELECT group_key, user_id, role FROM group_members WHERE tenant_id = $1 ORDER BY group_key, user_id`, tenantID)
	b.Queue(`SELECT user_id, event_type, channel, enabled FROM user_preferences WHERE tenant_id = $1 ORDER BY user_id, event_type, channel`, tenantID)
	b.Queue(`SELECT group_key, event_type, channel, enabled, roles FROM group_settings WHERE tenant_id = $1 ORDER BY group_key, event_type, channel`, tenantID)
	br := q.SendBatch(ctx, b)
	defer br.Close()
	err = readRows(br, "groups", func(r pgx.Rows) error {
		g, err := scanGroup(r)
		dir.Groups = append(dir.Groups, g)
		return err
	})
	if err == nil {
		err = readRows(br, "members", func(r pgx.Rows) error {
			var m directory.Member
			err := r.Scan(&m.Group, &m.UserID, &m.Role)
			dir.Members = append(dir.Members, m)
			return err
		})
	}
	if err == nil {
		err = readPreferences(br, dir)
	}
	if err == nil {
		err = readGroupSettings(br, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("export directory: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("export directory: %w", err)
	}
	return dir, nil
}

// Pruned lists, per table, the keys of the rows PruneDirectory deleted:
// user ids, "user_id token" for devices, group keys, "group user_id" for
// members, "user_id event_type channel" and "group event_type channel"
// for preferences and settings (an empty event type shows as "*").
type Pruned struct {
	Recipients  []string `json:"recipients"`
	Devices     []string `json:"devices"`
	Groups      []string `json:"groups"`
	Members     []string `json:"members"`
	Preferences []string `json:"preferences"`
	Settings    []string `json:"settings"`
}

// Total is how many rows were deleted.
func (p Pruned) Total() int {
	return len(p.Recipients) + len(p.Devices) + len(p.Groups) + len(p.Members) + len(p.Preferences) + len(p.Settings)
}

// PruneDirectory deletes every row of the tenant's directory that dir
// does not list: recipients, devices (a device token or web push endpoint
// the recipient no longer lists), groups, memberships, preferences and
// group settings. Run in the transaction of the ImportDirectory of the
// same dir, it makes the tenant's directory equal to dir. Stored
// notifications and deliveries are not touched (EraseRecipient does
// that).
func PruneDirectory(ctx context.Context, q Querier, tenantID string, dir *directory.Directory) (Pruned, error) {
	var users, devUsers, devTokens, groups, mGroups, mUsers, pUsers, pTypes, pChans, sGroups, sTypes, sChans []string
	for _, r := range dir.Recipients {
		users = append(users, r.UserID)
		for _, tok := range r.DeviceTokens {
			devUsers, devTokens = append(devUsers, r.UserID), append(devTokens, tok)
		}
		for _, d := range r.Devices {
			devUsers, devTokens = append(devUsers, r.UserID), append(devTokens, d.Address())
		}
	}
	for _, g := range dir.Groups {
		groups = append(groups, g.Key)
	}
	for _, m := range dir.Members {
		mGroups, mUsers = append(mGroups, m.Group), append(mUsers, m.UserID)
	}
	for _, p := range dir.Preferences {
		pUsers, pTypes, pChans = append(pUsers, p.UserID), append(pTypes, p.EventType), append(pChans, p.Channel)
	}
	for _, s := range dir.Settings {
		sGroups, sTypes, sChans = append(sGroups, s.Group), append(sTypes, s.EventType), append(sChans, s.Channel)
	}
	var p Pruned
	// Children before parents, each DELETE returning the keys it removed.
	steps := []struct {
		into *[]string
		sql  string
		args []any
	}{
		{&p.Members, `DELETE FROM group_members t WHERE t.tenant_id = $1 AND NOT EXISTS (
			SELECT 1 FROM unnest($2::text[], $3::text[]) AS k(g, u) WHERE k.g = t.group_key AND k.u = t.user_id)
			RETURNING t.group_key || ' ' || t.user_id`, []any{orEmpty(mGroups), orEmpty(mUsers)}},
		{&p.Settings, `DELETE FROM group_settings t WHERE t.tenant_id = $1 AND NOT EXISTS (
			SELECT 1 FROM unnest($2::text[], $3::text[], $4::text[]) AS k(g, e, c) WHERE k.g = t.group_key AND k.e = t.event_type AND k.c = t.channel)
			RETURNING t.group_key || ' ' || CASE WHEN t.event_type = '' THEN '*' ELSE t.event_type END || ' ' || t.channel`,
			[]any{orEmpty(sGroups), orEmpty(sTypes), orEmpty(sChans)}},
		{&p.Preferences, `DELETE FROM user_preferences t WHERE t.tenant_id = $1 AND NOT EXISTS (
			SELECT 1 FROM unnest($2::text[], $3::text[], $4::text[]) AS k(u, e, c) WHERE k.u = t.user_id AND k.e = t.event_type AND k.c = t.channel)
			RETURNING t.user_id || ' ' || CASE WHEN t.event_type = '' THEN '*' ELSE t.event_type END || ' ' || t.channel`,
			[]any{orEmpty(pUsers), orEmpty(pTypes), orEmpty(pChans)}},
		{&p.Devices, `DELETE FROM recipient_devices t WHERE t.tenant_id = $1 AND NOT EXISTS (
			SELECT 1 FROM unnest($2::text[], $3::text[]) AS k(u, tok) WHERE k.u = t.user_id AND k.tok = t.token)
			RETURNING t.user_id || ' ' || t.token`, []any{orEmpty(devUsers), orEmpty(devTokens)}},
		{&p.Groups, `DELETE FROM groups t WHERE t.tenant_id = $1 AND t.group_key <> ALL ($2::text[]) RETURNING t.group_key`, []any{orEmpty(groups)}},
		{&p.Recipients, `DELETE FROM recipients t WHERE t.tenant_id = $1 AND t.user_id <> ALL ($2::text[]) RETURNING t.user_id`, []any{orEmpty(users)}},
	}
	for _, st := range steps {
		rows, err := q.Query(ctx, st.sql, append([]any{tenantID}, st.args...)...)
		if err != nil {
			return p, fmt.Errorf("prune directory: %w", err)
		}
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return p, fmt.Errorf("prune directory: %w", err)
		}
		slices.Sort(keys)
		*st.into = keys
	}
	return p, nil
}
