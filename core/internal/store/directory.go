package store

import (
	"context"
	"fmt"
	"sort"

	"github.com/heraldhq/herald/core/internal/rules"
)

// LoadDirectory reads the directory data the decision for one event needs:
// the groups in needs, their members, the users named directly, every active
// user of the broadcast types, and those users' devices, preferences and
// their groups' settings.
func LoadDirectory(ctx context.Context, q Querier, tenantID string, needs rules.Needs) (*rules.Directory, error) {
	dir := &rules.Directory{}
	if len(needs.GroupKeys) > 0 {
		rows, err := q.Query(ctx, `SELECT group_key, group_type, max_recipients, quiet_start, quiet_end
			FROM groups WHERE tenant_id = $1 AND group_key = ANY($2) ORDER BY group_key`, tenantID, needs.GroupKeys)
		if err != nil {
			return nil, fmt.Errorf("load groups: %w", err)
		}
		for rows.Next() {
			var g rules.Group
			var qs, qe string
			if err := rows.Scan(&g.Key, &g.Type, &g.MaxRecipients, &qs, &qe); err != nil {
				rows.Close()
				return nil, fmt.Errorf("load groups: %w", err)
			}
			g.QuietHours = quietHours(qs, qe)
			dir.Groups = append(dir.Groups, g)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("load groups: %w", err)
		}
		rows, err = q.Query(ctx, `SELECT group_key, user_id, role FROM group_members
			WHERE tenant_id = $1 AND group_key = ANY($2) ORDER BY group_key, user_id`, tenantID, needs.GroupKeys)
		if err != nil {
			return nil, fmt.Errorf("load members: %w", err)
		}
		for rows.Next() {
			var m rules.Member
			if err := rows.Scan(&m.Group, &m.UserID, &m.Role); err != nil {
				rows.Close()
				return nil, fmt.Errorf("load members: %w", err)
			}
			dir.Members = append(dir.Members, m)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("load members: %w", err)
		}
	}
	ids := map[string]bool{}
	for _, id := range needs.UserIDs {
		ids[id] = true
	}
	for _, m := range dir.Members {
		ids[m.UserID] = true
	}
	userIDs := make([]string, 0, len(ids))
	for id := range ids {
		userIDs = append(userIDs, id)
	}
	sort.Strings(userIDs)
	types := needs.UserTypes
	if types == nil {
		types = []string{}
	}
	if len(userIDs) == 0 && len(types) == 0 {
		return dir, nil
	}
	rows, err := q.Query(ctx, `SELECT user_id, user_type, email, phone, locale, time_zone, active, quiet_start, quiet_end, attributes,
			COALESCE((SELECT array_agg(token ORDER BY token) FROM recipient_devices d
			          WHERE d.tenant_id = r.tenant_id AND d.user_id = r.user_id), '{}')
		FROM recipients r
		WHERE tenant_id = $1 AND (user_id = ANY($2) OR (active AND user_type = ANY($3)))
		ORDER BY user_id`, tenantID, userIDs, types)
	if err != nil {
		return nil, fmt.Errorf("load recipients: %w", err)
	}
	var loaded []string
	for rows.Next() {
		var r rules.Recipient
		var qs, qe string
		if err := rows.Scan(&r.UserID, &r.UserType, &r.Email, &r.Phone, &r.Locale, &r.TimeZone, &r.Active, &qs, &qe, &r.Attributes, &r.DeviceTokens); err != nil {
			rows.Close()
			return nil, fmt.Errorf("load recipients: %w", err)
		}
		r.QuietHours = quietHours(qs, qe)
		if len(r.Attributes) == 0 {
			r.Attributes = nil
		}
		if len(r.DeviceTokens) == 0 {
			r.DeviceTokens = nil
		}
		dir.Recipients = append(dir.Recipients, r)
		loaded = append(loaded, r.UserID)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load recipients: %w", err)
	}
	if len(loaded) > 0 {
		rows, err = q.Query(ctx, `SELECT user_id, event_type, channel, enabled FROM user_preferences
			WHERE tenant_id = $1 AND user_id = ANY($2) ORDER BY user_id, event_type, channel`, tenantID, loaded)
		if err != nil {
			return nil, fmt.Errorf("load preferences: %w", err)
		}
		for rows.Next() {
			var p rules.Preference
			if err := rows.Scan(&p.UserID, &p.EventType, &p.Channel, &p.Enabled); err != nil {
				rows.Close()
				return nil, fmt.Errorf("load preferences: %w", err)
			}
			dir.Preferences = append(dir.Preferences, p)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("load preferences: %w", err)
		}
	}
	if len(needs.GroupKeys) > 0 {
		rows, err = q.Query(ctx, `SELECT group_key, event_type, channel, enabled FROM group_settings
			WHERE tenant_id = $1 AND group_key = ANY($2) ORDER BY group_key, event_type, channel`, tenantID, needs.GroupKeys)
		if err != nil {
			return nil, fmt.Errorf("load group settings: %w", err)
		}
		for rows.Next() {
			var s rules.GroupSetting
			if err := rows.Scan(&s.Group, &s.EventType, &s.Channel, &s.Enabled); err != nil {
				rows.Close()
				return nil, fmt.Errorf("load group settings: %w", err)
			}
			dir.Settings = append(dir.Settings, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("load group settings: %w", err)
		}
	}
	return dir, nil
}

func quietHours(start, end string) *rules.QuietHours {
	if start == "" || end == "" {
		return nil
	}
	return &rules.QuietHours{Start: start, End: end}
}

// ImportDirectory upserts a directory snapshot (the DIR.json format) for a
// tenant in one transaction's worth of statements on q.
func ImportDirectory(ctx context.Context, q Querier, tenantID string, dir *rules.Directory) error {
	for _, r := range dir.Recipients {
		qs, qe := "", ""
		if r.QuietHours != nil {
			qs, qe = r.QuietHours.Start, r.QuietHours.End
		}
		attrs := r.Attributes
		if attrs == nil {
			attrs = map[string]string{}
		}
		if _, err := q.Exec(ctx, `INSERT INTO recipients (tenant_id, user_id, user_type, email, phone, locale, time_zone, active, quiet_start, quiet_end, attributes)
			VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)
			ON CONFLICT (tenant_id, user_id) DO UPDATE SET user_type = EXCLUDED.user_type, email = EXCLUDED.email,
			  phone = EXCLUDED.phone, locale = EXCLUDED.locale, time_zone = EXCLUDED.time_zone, active = EXCLUDED.active,
			  quiet_start = EXCLUDED.quiet_start, quiet_end = EXCLUDED.quiet_end, attributes = EXCLUDED.attributes`,
			tenantID, r.UserID, r.UserType, r.Email, r.Phone, r.Locale, r.TimeZone, r.Active, qs, qe, attrs); err != nil {
			return fmt.Errorf("import recipient %s: %w", r.UserID, err)
		}
		for _, tok := range r.DeviceTokens {
			if _, err := q.Exec(ctx, `INSERT INTO recipient_devices (tenant_id, user_id, token) VALUES ($1,$2,$3) ON CONFLICT DO NOTHING`,
				tenantID, r.UserID, tok); err != nil {
				return fmt.Errorf("import device of %s: %w", r.UserID, err)
			}
		}
	}
	for _, g := range dir.Groups {
		qs, qe := "", ""
		if g.QuietHours != nil {
			qs, qe = g.QuietHours.Start, g.QuietHours.End
		}
		if _, err := q.Exec(ctx, `INSERT INTO groups (tenant_id, group_key, group_type, max_recipients, quiet_start, quiet_end)
			VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT (tenant_id, group_key) DO UPDATE SET group_type = EXCLUDED.group_type,
			max_recipients = EXCLUDED.max_recipients, quiet_start = EXCLUDED.quiet_start, quiet_end = EXCLUDED.quiet_end`,
			tenantID, g.Key, g.Type, g.MaxRecipients, qs, qe); err != nil {
			return fmt.Errorf("import group %s: %w", g.Key, err)
		}
	}
	for _, m := range dir.Members {
		if _, err := q.Exec(ctx, `INSERT INTO group_members (tenant_id, group_key, user_id, role) VALUES ($1,$2,$3,$4)
			ON CONFLICT (tenant_id, group_key, user_id) DO UPDATE SET role = EXCLUDED.role`, tenantID, m.Group, m.UserID, m.Role); err != nil {
			return fmt.Errorf("import member %s of %s: %w", m.UserID, m.Group, err)
		}
	}
	for _, p := range dir.Preferences {
		if _, err := q.Exec(ctx, `INSERT INTO user_preferences (tenant_id, user_id, event_type, channel, enabled) VALUES ($1,$2,$3,$4,$5)
			ON CONFLICT (tenant_id, user_id, event_type, channel) DO UPDATE SET enabled = EXCLUDED.enabled`,
			tenantID, p.UserID, p.EventType, p.Channel, p.Enabled); err != nil {
			return fmt.Errorf("import preference of %s: %w", p.UserID, err)
		}
	}
	for _, s := range dir.Settings {
		if _, err := q.Exec(ctx, `INSERT INTO group_settings (tenant_id, group_key, event_type, channel, enabled) VALUES ($1,$2,$3,$4,$5)
			ON CONFLICT (tenant_id, group_key, event_type, channel) DO UPDATE SET enabled = EXCLUDED.enabled`,
			tenantID, s.Group, s.EventType, s.Channel, s.Enabled); err != nil {
			return fmt.Errorf("import setting of %s: %w", s.Group, err)
		}
	}
	return nil
}
