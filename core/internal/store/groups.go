package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/jackc/pgx/v5"
)

// StoredGroup is a group as the directory API shows it: the directory
// entry and the row's version (which also covers the group's settings)
// and time of last write.
type StoredGroup struct {
	directory.Group
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
}

// groupVersion reads (and, with lock, locks) a group's version, or
// ErrNotFound.
func groupVersion(ctx context.Context, q Querier, tenantID, key, lock string) (int64, error) {
	var v int64
	err := q.QueryRow(ctx, `SELECT version FROM groups WHERE tenant_id = $1 AND group_key = $2 `+lock, tenantID, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("look up group: %w", err)
	}
	return v, nil
}

// checkVersion locks the row and compares its version with ifVersion
// (when > 0).
func checkGroupVersion(ctx context.Context, q Querier, tenantID, key string, ifVersion int64) (int64, error) {
	v, err := groupVersion(ctx, q, tenantID, key, "FOR UPDATE")
	if err != nil {
		return 0, err
	}
	if ifVersion > 0 && v != ifVersion {
		return v, ErrVersionMismatch
	}
	return v, nil
}

// GetGroup returns one group of the tenant, or ErrNotFound.
func GetGroup(ctx context.Context, q Querier, tenantID, key string) (StoredGroup, error) {
	var sg StoredGroup
	g, err := scanGroup(q.QueryRow(ctx, `SELECT `+groupSelect+`, version, updated_at
		FROM groups WHERE tenant_id = $1 AND group_key = $2`, tenantID, key), &sg.Version, &sg.UpdatedAt)
	sg.Group = g
	if errors.Is(err, pgx.ErrNoRows) {
		return sg, ErrNotFound
	}
	if err != nil {
		return sg, fmt.Errorf("get group: %w", err)
	}
	return sg, nil
}

// PutGroup creates or replaces one group (the row `directory import`
// writes). With ifVersion > 0 the group must exist at that version
// (ErrNotFound, ErrVersionMismatch). It returns the version after the
// write and whether the group is new.
func PutGroup(ctx context.Context, q Querier, tenantID string, g directory.Group, ifVersion int64) (int64, bool, error) {
	if ifVersion > 0 {
		if v, err := checkGroupVersion(ctx, q, tenantID, g.Key, ifVersion); err != nil {
			return v, false, err
		}
	}
	v, created, err := upsertOne(ctx, q, "groups", groupCols, groupRow(tenantID, g), groupMerge+` RETURNING version, xmax = 0`,
		`SELECT version FROM groups WHERE tenant_id = $1 AND group_key = $2`, tenantID, g.Key)
	if err != nil {
		return 0, false, fmt.Errorf("put group: %w", err)
	}
	return v, created, nil
}

// DeleteGroup deletes a group with its memberships and settings, in q's
// transaction: the next event addressed to the group reaches nobody. With
// ifVersion > 0 the group must still be at that version. ErrNotFound when
// the tenant has no such group.
func DeleteGroup(ctx context.Context, q Querier, tenantID, key string, ifVersion int64) error {
	if _, err := checkGroupVersion(ctx, q, tenantID, key, ifVersion); err != nil {
		return err
	}
	for _, table := range []string{"group_members", "group_settings", "groups"} {
		if _, err := q.Exec(ctx, `DELETE FROM `+table+` WHERE tenant_id = $1 AND group_key = $2`, tenantID, key); err != nil {
			return fmt.Errorf("delete group: %s: %w", table, err)
		}
	}
	return nil
}

// GetGroupSettings returns a group's settings document (ordered by event
// type, then channel) and the group's version, or ErrNotFound.
func GetGroupSettings(ctx context.Context, q Querier, tenantID, key string) (directory.GroupSettings, int64, error) {
	var gs directory.GroupSettings
	v, err := groupVersion(ctx, q, tenantID, key, "")
	if err != nil {
		return gs, 0, err
	}
	rows, err := q.Query(ctx, `SELECT event_type, channel, enabled, roles FROM group_settings
		WHERE tenant_id = $1 AND group_key = $2 ORDER BY event_type, channel`, tenantID, key)
	if err != nil {
		return gs, 0, fmt.Errorf("get group settings: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c directory.GroupChannelSetting
		if err := rows.Scan(&c.EventType, &c.Channel, &c.Enabled, &c.Roles); err != nil {
			return gs, 0, fmt.Errorf("get group settings: %w", err)
		}
		if len(c.Roles) == 0 {
			c.Roles = nil
		}
		gs.Channels = append(gs.Channels, c)
	}
	if err := rows.Err(); err != nil {
		return gs, 0, fmt.Errorf("get group settings: %w", err)
	}
	return gs, v, nil
}

// ReplaceGroupSettings makes s a group's whole settings document, as
// ReplacePreferences does for a user: ifVersion > 0 must be the group's
// version (ErrVersionMismatch), ErrNotFound when there is no such group,
// and the version after the write is returned (moved only on a change).
func ReplaceGroupSettings(ctx context.Context, q Querier, tenantID, key string, s directory.GroupSettings, ifVersion int64) (int64, error) {
	v, err := checkGroupVersion(ctx, q, tenantID, key, ifVersion)
	if err != nil {
		return v, err
	}
	n := len(s.Channels)
	events, channels, enabled, roles := make([]string, n), make([]string, n), make([]bool, n), make([]string, n)
	for i, c := range s.Channels {
		events[i], channels[i], enabled[i] = c.EventType, c.Channel, c.Enabled
		// Roles travel as one text each (arrays of arrays must be
		// rectangular): joined with a character no role holds.
		roles[i] = joinRoles(c.Roles)
	}
	del, err := q.Exec(ctx, `DELETE FROM group_settings s WHERE s.tenant_id = $1 AND s.group_key = $2
		AND (s.event_type, s.channel) NOT IN (SELECT * FROM unnest($3::text[], $4::text[]))`, tenantID, key, events, channels)
	if err != nil {
		return 0, fmt.Errorf("replace group settings: %w", err)
	}
	ins, err := q.Exec(ctx, `INSERT INTO group_settings (tenant_id, group_key, event_type, channel, enabled, roles)
		SELECT $1, $2, w.event_type, w.channel, w.enabled, CASE WHEN w.roles = '' THEN '{}'::text[] ELSE string_to_array(w.roles, E'\x1f') END
		FROM unnest($3::text[], $4::text[], $5::bool[], $6::text[]) AS w(event_type, channel, enabled, roles)
		ON CONFLICT (tenant_id, group_key, event_type, channel) DO UPDATE SET enabled = EXCLUDED.enabled, roles = EXCLUDED.roles
		WHERE (group_settings.enabled, group_settings.roles) IS DISTINCT FROM (EXCLUDED.enabled, EXCLUDED.roles)`,
		tenantID, key, events, channels, enabled, roles)
	if err != nil {
		return 0, fmt.Errorf("replace group settings: %w", err)
	}
	if del.RowsAffected()+ins.RowsAffected() == 0 {
		return v, nil
	}
	err = q.QueryRow(ctx, `UPDATE groups SET version = version + 1, updated_at = now() WHERE tenant_id = $1 AND group_key = $2
		RETURNING version`, tenantID, key).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("replace group settings: %w", err)
	}
	return v, nil
}

func joinRoles(roles []string) string {
	s := ""
	for i, r := range roles {
		if i > 0 {
			s += "\x1f"
		}
		s += r
	}
	return s
}

// StoredMember is a membership as the directory API shows it.
type StoredMember struct {
	UserID string `json:"user_id"`
	Role   string `json:"role"`
}

// PutMember places a recipient in a group with a role (or changes the
// role), locking both rows against a concurrent delete. It returns
// whether the membership is new. ErrNotFound names what is missing: err
// wraps ErrNotFound with "group" or "recipient".
func PutMember(ctx context.Context, q Querier, tenantID, key, userID, role string) (bool, error) {
	if _, err := groupVersion(ctx, q, tenantID, key, "FOR SHARE"); err != nil {
		return false, wrapMissing(err, "group")
	}
	if err := lockRecipient(ctx, q, tenantID, userID); err != nil {
		return false, wrapMissing(err, "recipient")
	}
	var created bool
	err := q.QueryRow(ctx, insertValues("group_members", memberCols)+` `+memberMerge+` RETURNING xmax = 0`, tenantID, key, userID, role).Scan(&created)
	if err != nil {
		return false, fmt.Errorf("put member: %w", err)
	}
	return created, nil
}

// MissingError is ErrNotFound naming what is missing ("group",
// "recipient").
type MissingError struct{ What string }

func (e *MissingError) Error() string { return "no such " + e.What }

// Is makes errors.Is(err, ErrNotFound) hold.
func (e *MissingError) Is(target error) bool { return target == ErrNotFound }

func wrapMissing(err error, what string) error {
	if errors.Is(err, ErrNotFound) {
		return &MissingError{What: what}
	}
	return err
}

// RemoveMember takes a recipient out of a group; the next event addressed
// to the group does not reach them. ErrNotFound when they are not a member.
func RemoveMember(ctx context.Context, q Querier, tenantID, key, userID string) error {
	tag, err := q.Exec(ctx, `DELETE FROM group_members WHERE tenant_id = $1 AND group_key = $2 AND user_id = $3`, tenantID, key, userID)
	if err != nil {
		return fmt.Errorf("remove member: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// ListMembers returns up to limit members of a group ordered by user id,
// after the user id after; ErrNotFound when the tenant has no such group.
func ListMembers(ctx context.Context, q Querier, tenantID, key, after string, limit int) ([]StoredMember, error) {
	if _, err := groupVersion(ctx, q, tenantID, key, ""); err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `SELECT user_id, role FROM group_members WHERE tenant_id = $1 AND group_key = $2 AND user_id > $3
		ORDER BY user_id LIMIT $4`, tenantID, key, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	defer rows.Close()
	out := []StoredMember{}
	for rows.Next() {
		var m StoredMember
		if err := rows.Scan(&m.UserID, &m.Role); err != nil {
			return nil, fmt.Errorf("list members: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	return out, nil
}
