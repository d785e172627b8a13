package store

import (
	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/core/internal/directory"
)

// The rows of the directory's tables and how a write merges into an
// existing row: one definition each, shared by `directory import`
// (ImportDirectory, through COPY) and the directory API (one entry at a
// time). A write that changes nothing leaves the row, its version and
// updated_at as they were.

var recipientCols = []string{"tenant_id", "user_id", "user_type", "email", "phone", "locale", "time_zone", "active", "quiet_start", "quiet_end", "attributes"}

func recipientRow(tenantID string, r directory.Recipient) []any {
	qs, qe := quietEnds(r.QuietHours)
	attrs := r.Attributes
	if attrs == nil {
		attrs = map[string]string{}
	}
	return []any{tenantID, r.UserID, r.UserType, r.Email, r.Phone, r.Locale, r.TimeZone, r.Active, qs, qe, attrs}
}

const recipientMerge = `ON CONFLICT (tenant_id, user_id) DO UPDATE SET user_type = EXCLUDED.user_type, email = EXCLUDED.email,
	  phone = EXCLUDED.phone, locale = EXCLUDED.locale, time_zone = EXCLUDED.time_zone, active = EXCLUDED.active,
	  quiet_start = EXCLUDED.quiet_start, quiet_end = EXCLUDED.quiet_end, attributes = EXCLUDED.attributes,
	  version = recipients.version + 1, updated_at = now()
	WHERE (recipients.user_type, recipients.email, recipients.phone, recipients.locale, recipients.time_zone, recipients.active,
	       recipients.quiet_start, recipients.quiet_end, recipients.attributes)
	  IS DISTINCT FROM (EXCLUDED.user_type, EXCLUDED.email, EXCLUDED.phone, EXCLUDED.locale, EXCLUDED.time_zone, EXCLUDED.active,
	       EXCLUDED.quiet_start, EXCLUDED.quiet_end, EXCLUDED.attributes)`

var deviceCols = []string{"tenant_id", "user_id", "token", "platform", "p256dh", "auth"}

func deviceRow(tenantID, userID string, d directory.Device) []any {
	return []any{tenantID, userID, d.Address(), d.Kind, d.P256dh, d.Auth}
}

const deviceMerge = `ON CONFLICT (tenant_id, user_id, token) DO UPDATE SET platform = EXCLUDED.platform, p256dh = EXCLUDED.p256dh, auth = EXCLUDED.auth`

var groupCols = []string{"tenant_id", "group_key", "group_type", "max_recipients", "quiet_start", "quiet_end", "destinations"}

func groupRow(tenantID string, g directory.Group) []any {
	qs, qe := quietEnds(g.QuietHours)
	dests := g.Destinations
	if dests == nil {
		dests = map[string]string{}
	}
	return []any{tenantID, g.Key, g.Type, g.MaxRecipients, qs, qe, dests}
}

const groupMerge = `ON CONFLICT (tenant_id, group_key) DO UPDATE SET group_type = EXCLUDED.group_type,
	  max_recipients = EXCLUDED.max_recipients, quiet_start = EXCLUDED.quiet_start, quiet_end = EXCLUDED.quiet_end,
	  destinations = EXCLUDED.destinations, version = groups.version + 1, updated_at = now()
	WHERE (groups.group_type, groups.max_recipients, groups.quiet_start, groups.quiet_end, groups.destinations)
	  IS DISTINCT FROM (EXCLUDED.group_type, EXCLUDED.max_recipients, EXCLUDED.quiet_start, EXCLUDED.quiet_end, EXCLUDED.destinations)`

// groupSelect is the columns scanGroup reads, in its order.
const groupSelect = `group_key, group_type, max_recipients, quiet_start, quiet_end, destinations`

// scanGroup reads a row of groupSelect's columns (plus extra, after them).
func scanGroup(r pgx.Row, extra ...any) (directory.Group, error) {
	var g directory.Group
	var qs, qe string
	err := r.Scan(append([]any{&g.Key, &g.Type, &g.MaxRecipients, &qs, &qe, &g.Destinations}, extra...)...)
	g.QuietHours = quietHours(qs, qe)
	if len(g.Destinations) == 0 {
		g.Destinations = nil
	}
	return g, err
}

var memberCols = []string{"tenant_id", "group_key", "user_id", "role"}

const memberMerge = `ON CONFLICT (tenant_id, group_key, user_id) DO UPDATE SET role = EXCLUDED.role`

var settingCols = []string{"tenant_id", "group_key", "event_type", "channel", "enabled", "roles"}

func settingRow(tenantID string, s directory.GroupSetting) []any {
	roles := s.Roles
	if roles == nil {
		roles = []string{}
	}
	return []any{tenantID, s.Group, s.EventType, s.Channel, s.Enabled, roles}
}

// settingMerge: a group's version covers its settings.
const settingMerge = `ON CONFLICT (tenant_id, group_key, event_type, channel) DO UPDATE SET enabled = EXCLUDED.enabled, roles = EXCLUDED.roles
	WHERE (group_settings.enabled, group_settings.roles) IS DISTINCT FROM (EXCLUDED.enabled, EXCLUDED.roles) RETURNING tenant_id, group_key`
