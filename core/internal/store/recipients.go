package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/jackc/pgx/v5"
)

// StoredRecipient is a recipient as the directory API shows it: the
// directory entry (with its devices) and the row's version and time of
// last write.
type StoredRecipient struct {
	directory.Recipient
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
}

// recipientSelect reads recipients with their devices (as LoadDirectory
// does), their version and updated_at; the caller adds WHERE and ORDER.
const recipientSelect = `SELECT r.user_id, r.user_type, r.email, r.phone, r.locale, r.time_zone, r.active, r.quiet_start, r.quiet_end, r.attributes,
		COALESCE((SELECT jsonb_agg(jsonb_build_object('kind', d.platform, 'token', d.token, 'p256dh', d.p256dh, 'auth', d.auth)
		                           ORDER BY d.token) FROM recipient_devices d
		          WHERE d.tenant_id = r.tenant_id AND d.user_id = r.user_id), '[]'),
		r.version, r.updated_at
	FROM recipients r`

func scanRecipient(rows pgx.Row) (StoredRecipient, error) {
	var sr StoredRecipient
	r := &sr.Recipient
	var qs, qe string
	var devs []directory.Device
	err := rows.Scan(&r.UserID, &r.UserType, &r.Email, &r.Phone, &r.Locale, &r.TimeZone, &r.Active, &qs, &qe, &r.Attributes, &devs,
		&sr.Version, &sr.UpdatedAt)
	r.QuietHours = quietHours(qs, qe)
	r.DeviceTokens, r.Devices = splitDevices(devs)
	if len(r.Attributes) == 0 {
		r.Attributes = nil
	}
	return sr, err
}

// GetRecipient returns one recipient of the tenant, or ErrNotFound.
// forUpdate locks the row to the end of q's transaction (a read before a
// patch).
func GetRecipient(ctx context.Context, q Querier, tenantID, userID string, forUpdate bool) (StoredRecipient, error) {
	sql := recipientSelect + ` WHERE r.tenant_id = $1 AND r.user_id = $2`
	if forUpdate {
		sql += ` FOR UPDATE OF r`
	}
	sr, err := scanRecipient(q.QueryRow(ctx, sql, tenantID, userID))
	if errors.Is(err, pgx.ErrNoRows) {
		return sr, ErrNotFound
	}
	if err != nil {
		return sr, fmt.Errorf("get recipient: %w", err)
	}
	return sr, nil
}

// PutRecipient creates or replaces one recipient (the row `directory
// import` writes, merged the same way) and adds the devices it lists
// (devices are removed one by one, RemoveDevice). r must have passed
// directory.DecodeEntry. With ifVersion > 0 the recipient must exist at
// that version: ErrNotFound when it does not exist, ErrVersionMismatch
// (and the current version) when another write came first, and nothing
// is written. It returns the version after the write (unchanged when the
// entry was already so) and whether the recipient is new. Run it in a
// tenant transaction.
func PutRecipient(ctx context.Context, q Querier, tenantID string, r directory.Recipient, ifVersion int64) (int64, bool, error) {
	if ifVersion > 0 {
		var v int64
		err := q.QueryRow(ctx, `SELECT version FROM recipients WHERE tenant_id = $1 AND user_id = $2 FOR UPDATE`, tenantID, r.UserID).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, false, ErrNotFound
		}
		if err != nil {
			return 0, false, fmt.Errorf("put recipient: %w", err)
		}
		if v != ifVersion {
			return v, false, ErrVersionMismatch
		}
	}
	version, created, err := upsertOne(ctx, q, "recipients", recipientCols, recipientRow(tenantID, r), recipientMerge+` RETURNING version, xmax = 0`,
		`SELECT version FROM recipients WHERE tenant_id = $1 AND user_id = $2`, tenantID, r.UserID)
	if err != nil {
		return 0, false, fmt.Errorf("put recipient: %w", err)
	}
	for _, tok := range r.DeviceTokens {
		if _, err := q.Exec(ctx, insertValues("recipient_devices", deviceCols)+` `+deviceMerge, tenantID, r.UserID, tok, "", "", ""); err != nil {
			return 0, false, fmt.Errorf("put recipient: device: %w", err)
		}
	}
	for _, d := range r.Devices {
		if _, err := q.Exec(ctx, insertValues("recipient_devices", deviceCols)+` `+deviceMerge, deviceRow(tenantID, r.UserID, d)...); err != nil {
			return 0, false, fmt.Errorf("put recipient: device: %w", err)
		}
	}
	return version, created, nil
}

// insertValues is INSERT INTO table (cols) VALUES ($1, ...).
func insertValues(table string, cols []string) string {
	ps := make([]string, len(cols))
	for i := range cols {
		ps[i] = fmt.Sprintf("$%d", i+1)
	}
	return `INSERT INTO ` + table + ` (` + strings.Join(cols, ", ") + `) VALUES (` + strings.Join(ps, ", ") + `)`
}

// upsertOne inserts one row with merge (which returns version and
// whether the row is new) and, when the merge changed nothing (no row
// returned), reads the version with current and its arguments.
func upsertOne(ctx context.Context, q Querier, table string, cols []string, row []any, merge, current string, args ...any) (int64, bool, error) {
	var version int64
	var created bool
	err := q.QueryRow(ctx, insertValues(table, cols)+` `+merge, row...).Scan(&version, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		err = q.QueryRow(ctx, current, args...).Scan(&version)
	}
	return version, created, err
}

// RecipientFilter selects recipients to list; zero fields select all.
type RecipientFilter struct {
	UserType string
	// Group: members of this group only.
	Group string
	// Active: only active (true) or inactive (false) recipients.
	Active *bool
	// UpdatedSince: only recipients written at or after it.
	UpdatedSince time.Time
}

// ListRecipients returns up to limit recipients of the tenant that f
// selects, ordered by user id, after the user id after ("" from the
// first).
func ListRecipients(ctx context.Context, q Querier, tenantID string, f RecipientFilter, after string, limit int) ([]StoredRecipient, error) {
	var active any
	if f.Active != nil {
		active = *f.Active
	}
	var since any
	if !f.UpdatedSince.IsZero() {
		since = f.UpdatedSince
	}
	rows, err := q.Query(ctx, recipientSelect+` WHERE r.tenant_id = $1 AND r.user_id > $2
		AND ($3 = '' OR r.user_type = $3)
		AND ($4 = '' OR EXISTS (SELECT 1 FROM group_members m WHERE m.tenant_id = r.tenant_id AND m.group_key = $4 AND m.user_id = r.user_id))
		AND ($5::bool IS NULL OR r.active = $5)
		AND ($6::timestamptz IS NULL OR r.updated_at >= $6)
		ORDER BY r.user_id LIMIT $7`, tenantID, after, f.UserType, f.Group, active, since, limit)
	if err != nil {
		return nil, fmt.Errorf("list recipients: %w", err)
	}
	defer rows.Close()
	out := []StoredRecipient{}
	for rows.Next() {
		sr, err := scanRecipient(rows)
		if err != nil {
			return nil, fmt.Errorf("list recipients: %w", err)
		}
		out = append(out, sr)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list recipients: %w", err)
	}
	return out, nil
}
