package store

import (
	"context"
	"fmt"

	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/jackc/pgx/v5"
)

// Batcher sends a batch of queries in one round trip (pools, connections
// and transactions do).
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// directoryUsers selects the users a decision may need ($1 tenant): those
// named ($2), the members of the groups ($3) and every active user of the
// broadcast types ($4).
const directoryUsers = `SELECT unnest($2::text[]) AS user_id
	UNION SELECT user_id FROM group_members WHERE tenant_id = $1 AND group_key = ANY($3)
	UNION SELECT user_id FROM recipients WHERE tenant_id = $1 AND active AND user_type = ANY($4)`

// LoadDirectory reads the directory data the decisions of a batch of
// events need: the groups in needs, their members, the users named
// directly, every active user of the broadcast types, and those users'
// devices, preferences and their groups' settings. The five queries go
// to the server in one round trip.
func LoadDirectory(ctx context.Context, q Batcher, tenantID string, needs rules.Needs) (*rules.Directory, error) {
	dir := &rules.Directory{}
	groups, userIDs, types := orEmpty(needs.GroupKeys), orEmpty(needs.UserIDs), orEmpty(needs.UserTypes)
	if len(groups) == 0 && len(userIDs) == 0 && len(types) == 0 {
		return dir, nil
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT group_key, group_type, max_recipients, quiet_start, quiet_end
		FROM groups WHERE tenant_id = $1 AND group_key = ANY($2) ORDER BY group_key`, tenantID, groups)
	b.Queue(`SELECT group_key, user_id, role FROM group_members
		WHERE tenant_id = $1 AND group_key = ANY($2) ORDER BY group_key, user_id`, tenantID, groups)
	b.Queue(`WITH ids AS (`+directoryUsers+`)
		SELECT r.user_id, r.user_type, r.email, r.phone, r.locale, r.time_zone, r.active, r.quiet_start, r.quiet_end, r.attributes,
			COALESCE((SELECT array_agg(token ORDER BY token) FROM recipient_devices d
			          WHERE d.tenant_id = r.tenant_id AND d.user_id = r.user_id), '{}')
		FROM recipients r JOIN ids ON r.user_id = ids.user_id
		WHERE r.tenant_id = $1 ORDER BY r.user_id`, tenantID, userIDs, groups, types)
	b.Queue(`WITH ids AS (`+directoryUsers+`)
		SELECT p.user_id, p.event_type, p.channel, p.enabled FROM user_preferences p JOIN ids ON p.user_id = ids.user_id
		WHERE p.tenant_id = $1 ORDER BY p.user_id, p.event_type, p.channel`, tenantID, userIDs, groups, types)
	b.Queue(`SELECT group_key, event_type, channel, enabled, roles FROM group_settings
		WHERE tenant_id = $1 AND group_key = ANY($2) ORDER BY group_key, event_type, channel`, tenantID, groups)
	br := q.SendBatch(ctx, b)
	defer br.Close()
	err := readRows(br, "groups", func(r pgx.Rows) error {
		var g rules.Group
		var qs, qe string
		err := r.Scan(&g.Key, &g.Type, &g.MaxRecipients, &qs, &qe)
		g.QuietHours = quietHours(qs, qe)
		dir.Groups = append(dir.Groups, g)
		return err
	})
	if err == nil {
		err = readRows(br, "members", func(r pgx.Rows) error {
			var m rules.Member
			err := r.Scan(&m.Group, &m.UserID, &m.Role)
			dir.Members = append(dir.Members, m)
			return err
		})
	}
	if err == nil {
		err = readRows(br, "recipients", func(rows pgx.Rows) error {
			var r rules.Recipient
			var qs, qe string
			err := rows.Scan(&r.UserID, &r.UserType, &r.Email, &r.Phone, &r.Locale, &r.TimeZone, &r.Active, &qs, &qe, &r.Attributes, &r.DeviceTokens)
			r.QuietHours = quietHours(qs, qe)
			if len(r.Attributes) == 0 {
				r.Attributes = nil
			}
			if len(r.DeviceTokens) == 0 {
				r.DeviceTokens = nil
			}
			dir.Recipients = append(dir.Recipients, r)
			return err
		})
	}
	if err == nil {
		err = readRows(br, "preferences", func(r pgx.Rows) error {
			var p rules.Preference
			err := r.Scan(&p.UserID, &p.EventType, &p.Channel, &p.Enabled)
			dir.Preferences = append(dir.Preferences, p)
			return err
		})
	}
	if err == nil {
		err = readRows(br, "group settings", func(r pgx.Rows) error {
			var gs rules.GroupSetting
			err := r.Scan(&gs.Group, &gs.EventType, &gs.Channel, &gs.Enabled, &gs.Roles)
			if len(gs.Roles) == 0 {
				gs.Roles = nil
			}
			dir.Settings = append(dir.Settings, gs)
			return err
		})
	}
	if err != nil {
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("load directory: %w", err)
	}
	return dir, nil
}

// readRows reads the next result of a batch, row by row.
func readRows(br pgx.BatchResults, what string, row func(pgx.Rows) error) error {
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("load %s: %w", what, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return fmt.Errorf("load %s: %w", what, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load %s: %w", what, err)
	}
	return nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
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
		roles := s.Roles
		if roles == nil {
			roles = []string{}
		}
		if _, err := q.Exec(ctx, `INSERT INTO group_settings (tenant_id, group_key, event_type, channel, enabled, roles) VALUES ($1,$2,$3,$4,$5,$6)
			ON CONFLICT (tenant_id, group_key, event_type, channel) DO UPDATE SET enabled = EXCLUDED.enabled, roles = EXCLUDED.roles`,
			tenantID, s.Group, s.EventType, s.Channel, s.Enabled, roles); err != nil {
			return fmt.Errorf("import setting of %s: %w", s.Group, err)
		}
	}
	return nil
}
