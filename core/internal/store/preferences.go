package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/jackc/pgx/v5"
)

// ErrVersionMismatch reports a write based on a version of a row that is
// no longer current: another writer came first. The caller reads the row
// again and decides (the API answers 412 Precondition Failed).
var ErrVersionMismatch = errors.New("the entry changed since the version this write was based on")

// GetPreferences returns a recipient's preferences document (locale, time
// zone, quiet hours and channel switches, ordered by event type then
// channel) and the recipient's version, or ErrNotFound when the tenant
// has no recipient userID.
func GetPreferences(ctx context.Context, q Querier, tenantID, userID string) (directory.UserPreferences, int64, error) {
	var p directory.UserPreferences
	var qs, qe string
	var version int64
	err := q.QueryRow(ctx, `SELECT locale, time_zone, quiet_start, quiet_end, version FROM recipients
		WHERE tenant_id = $1 AND user_id = $2`, tenantID, userID).Scan(&p.Locale, &p.TimeZone, &qs, &qe, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, 0, ErrNotFound
	}
	if err != nil {
		return p, 0, fmt.Errorf("get preferences: %w", err)
	}
	p.QuietHours = quietHours(qs, qe)
	rows, err := q.Query(ctx, `SELECT event_type, channel, enabled FROM user_preferences
		WHERE tenant_id = $1 AND user_id = $2 ORDER BY event_type, channel`, tenantID, userID)
	if err != nil {
		return p, 0, fmt.Errorf("get preferences: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c directory.ChannelPreference
		if err := rows.Scan(&c.EventType, &c.Channel, &c.Enabled); err != nil {
			return p, 0, fmt.Errorf("get preferences: %w", err)
		}
		p.Channels = append(p.Channels, c)
	}
	if err := rows.Err(); err != nil {
		return p, 0, fmt.Errorf("get preferences: %w", err)
	}
	return p, version, nil
}

// ReplacePreferences makes p a recipient's whole preferences document:
// their locale, time zone and quiet hours, and exactly p.Channels as their
// switches. p must have passed directory.DecodeEntry. With ifVersion > 0
// it writes only if the recipient's version is still ifVersion, else
// ErrVersionMismatch; 0 writes whatever the version. It returns the
// recipient's version after the write (bumped only when something
// changed), or ErrNotFound when the tenant has no recipient userID. The
// recipient's row stays locked to the end of q's transaction, so two
// writers of one user's preferences take turns. Run it in a tenant
// transaction (InTenant).
func ReplacePreferences(ctx context.Context, q Querier, tenantID, userID string, p directory.UserPreferences, ifVersion int64) (int64, error) {
	var version int64
	err := q.QueryRow(ctx, `SELECT version FROM recipients WHERE tenant_id = $1 AND user_id = $2 FOR UPDATE`,
		tenantID, userID).Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("replace preferences: %w", err)
	}
	if ifVersion > 0 && version != ifVersion {
		return version, ErrVersionMismatch
	}
	events := make([]string, len(p.Channels))
	channels := make([]string, len(p.Channels))
	enabled := make([]bool, len(p.Channels))
	for i, c := range p.Channels {
		events[i], channels[i], enabled[i] = c.EventType, c.Channel, c.Enabled
	}
	qs, qe := quietEnds(p.QuietHours)
	// Only what differs is written: switches gone, added or flipped, and
	// the recipient's columns; the version moves when anything did.
	del, err := q.Exec(ctx, `DELETE FROM user_preferences p WHERE p.tenant_id = $1 AND p.user_id = $2
		AND (p.event_type, p.channel) NOT IN (SELECT * FROM unnest($3::text[], $4::text[]))`, tenantID, userID, events, channels)
	if err != nil {
		return 0, fmt.Errorf("replace preferences: %w", err)
	}
	ins, err := q.Exec(ctx, `INSERT INTO user_preferences (tenant_id, user_id, event_type, channel, enabled)
		SELECT $1, $2, w.event_type, w.channel, w.enabled FROM unnest($3::text[], $4::text[], $5::bool[]) AS w(event_type, channel, enabled)
		ON CONFLICT (tenant_id, user_id, event_type, channel) DO UPDATE SET enabled = EXCLUDED.enabled
		WHERE user_preferences.enabled <> EXCLUDED.enabled`, tenantID, userID, events, channels, enabled)
	if err != nil {
		return 0, fmt.Errorf("replace preferences: %w", err)
	}
	switches := del.RowsAffected()+ins.RowsAffected() > 0
	err = q.QueryRow(ctx, `UPDATE recipients SET locale = $3, time_zone = $4, quiet_start = $5, quiet_end = $6,
			version = version + 1, updated_at = now()
		WHERE tenant_id = $1 AND user_id = $2 AND ($7 OR (locale, time_zone, quiet_start, quiet_end) IS DISTINCT FROM ($3, $4, $5, $6))
		RETURNING version`, tenantID, userID, p.Locale, p.TimeZone, qs, qe, switches).Scan(&version)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("replace preferences: %w", err)
	}
	return version, nil
}
