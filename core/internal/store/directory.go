package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/core/internal/directory"
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
func LoadDirectory(ctx context.Context, q Batcher, tenantID string, needs directory.Needs) (*directory.Directory, error) {
	dir := &directory.Directory{}
	groups, userIDs, types := orEmpty(needs.GroupKeys), orEmpty(needs.UserIDs), orEmpty(needs.UserTypes)
	if len(groups) == 0 && len(userIDs) == 0 && len(types) == 0 {
		return dir, nil
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT `+groupSelect+`
		FROM groups WHERE tenant_id = $1 AND group_key = ANY($2) ORDER BY group_key`, tenantID, groups)
	b.Queue(`SELECT group_key, user_id, role FROM group_members
		WHERE tenant_id = $1 AND group_key = ANY($2) ORDER BY group_key, user_id`, tenantID, groups)
	b.Queue(`WITH ids AS (`+directoryUsers+`)
		SELECT r.user_id, r.user_type, r.email, r.phone, r.locale, r.time_zone, r.active, r.quiet_start, r.quiet_end, r.attributes,
			COALESCE((SELECT jsonb_agg(jsonb_build_object('kind', d.platform, 'token', d.token, 'p256dh', d.p256dh, 'auth', d.auth)
			                           ORDER BY d.token) FROM recipient_devices d
			          WHERE d.tenant_id = r.tenant_id AND d.user_id = r.user_id), '[]')
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
		err = readRows(br, "recipients", func(rows pgx.Rows) error {
			var r directory.Recipient
			var qs, qe string
			var devs []directory.Device
			err := rows.Scan(&r.UserID, &r.UserType, &r.Email, &r.Phone, &r.Locale, &r.TimeZone, &r.Active, &qs, &qe, &r.Attributes, &devs)
			r.QuietHours = quietHours(qs, qe)
			r.DeviceTokens, r.Devices = splitDevices(devs)
			if len(r.Attributes) == 0 {
				r.Attributes = nil
			}
			dir.Recipients = append(dir.Recipients, r)
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

func quietHours(start, end string) *directory.QuietHours {
	if start == "" || end == "" {
		return nil
	}
	return &directory.QuietHours{Start: start, End: end}
}

// TxBeginner begins a transaction: a pool begins one, a transaction a
// savepoint.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ImportDirectory upserts a directory snapshot (the DIR.json format) for a
// tenant, all of it or nothing: in one transaction of its own (a savepoint
// when q is a transaction), each table through COPY into a temporary
// table and one INSERT ... ON CONFLICT DO UPDATE from it. Devices are
// added, never removed. Rows that exist and are not in dir stay.
func ImportDirectory(ctx context.Context, q TxBeginner, tenantID string, dir *directory.Directory) error {
	return ImportDirectoryProgress(ctx, q, tenantID, dir, nil)
}

// ImportDirectoryProgress is ImportDirectory that adds every row it has
// sent to done (when not nil), for a progress bar: ImportRows(dir) in all.
func ImportDirectoryProgress(ctx context.Context, q TxBeginner, tenantID string, dir *directory.Directory, done *atomic.Int64) error {
	tx, err := q.Begin(ctx)
	if err != nil {
		return fmt.Errorf("import directory: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	count := func() {
		if done != nil {
			done.Add(1)
		}
	}
	devices := deviceRows(dir)
	steps := []struct {
		what, table string
		cols        []string
		n           int
		row         func(i int) []any
		merge       string
	}{
		{"recipients", "recipients", recipientCols, len(dir.Recipients),
			func(i int) []any { return recipientRow(tenantID, dir.Recipients[i]) }, recipientMerge},
		{"devices", "recipient_devices", deviceCols, devices, nil, deviceMerge},
		{"groups", "groups", groupCols, len(dir.Groups),
			func(i int) []any { return groupRow(tenantID, dir.Groups[i]) }, groupMerge},
		{"members", "group_members", memberCols, len(dir.Members), func(i int) []any {
			m := dir.Members[i]
			return []any{tenantID, m.Group, m.UserID, m.Role}
		}, memberMerge},
		{"preferences", "user_preferences", []string{"tenant_id", "user_id", "event_type", "channel", "enabled"},
			len(dir.Preferences), func(i int) []any {
				p := dir.Preferences[i]
				return []any{tenantID, p.UserID, p.EventType, p.Channel, p.Enabled}
			},
			// A recipient's version covers their preferences.
			`ON CONFLICT (tenant_id, user_id, event_type, channel) DO UPDATE SET enabled = EXCLUDED.enabled
			WHERE user_preferences.enabled <> EXCLUDED.enabled RETURNING tenant_id, user_id`},
		{"settings", "group_settings", settingCols, len(dir.Settings),
			func(i int) []any { return settingRow(tenantID, dir.Settings[i]) }, settingMerge},
	}
	// Devices: one row per token, flattened.
	var devRows [][]any
	for _, r := range dir.Recipients {
		for _, tok := range r.DeviceTokens {
			devRows = append(devRows, []any{tenantID, r.UserID, tok, "", "", ""})
		}
		for _, d := range r.Devices {
			devRows = append(devRows, deviceRow(tenantID, r.UserID, d))
		}
	}
	steps[1].row = func(i int) []any { return devRows[i] }

	for _, st := range steps {
		if st.n == 0 {
			continue
		}
		tmp := "herald_import_" + st.table
		// A temporary table of the same columns, gone at commit. A key
		// twice in one import fails the INSERT (ON CONFLICT DO UPDATE
		// cannot touch a row twice); the parser refuses duplicates first.
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS `+tmp+` (LIKE `+st.table+` INCLUDING DEFAULTS) ON COMMIT DROP`); err != nil {
			return fmt.Errorf("import %s: %w", st.what, err)
		}
		if _, err := tx.Exec(ctx, `TRUNCATE `+tmp); err != nil {
			return fmt.Errorf("import %s: %w", st.what, err)
		}
		i := 0
		src := pgx.CopyFromFunc(func() ([]any, error) {
			if i >= st.n {
				return nil, nil
			}
			row := st.row(i)
			i++
			count()
			return row, nil
		})
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{tmp}, st.cols, src); err != nil {
			return fmt.Errorf("import %s: %w", st.what, err)
		}
		cols := strings.Join(st.cols, ", ")
		insert := `INSERT INTO ` + st.table + ` (` + cols + `) SELECT ` + cols + ` FROM ` + tmp + ` ` + st.merge
		switch st.table {
		case "user_preferences":
			insert = `WITH changed AS (` + insert + `)
				UPDATE recipients r SET version = r.version + 1, updated_at = now()
				FROM (SELECT DISTINCT tenant_id, user_id FROM changed) c WHERE r.tenant_id = c.tenant_id AND r.user_id = c.user_id`
		case "group_settings":
			insert = `WITH changed AS (` + insert + `)
				UPDATE groups g SET version = g.version + 1, updated_at = now()
				FROM (SELECT DISTINCT tenant_id, group_key FROM changed) c WHERE g.tenant_id = c.tenant_id AND g.group_key = c.group_key`
		}
		if _, err := tx.Exec(ctx, insert); err != nil {
			return fmt.Errorf("import %s: %w", st.what, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("import directory: %w", err)
	}
	return nil
}

// ImportRows is how many rows ImportDirectoryProgress writes for dir, the
// total its done counter reaches: one for each recipient, group, member,
// preference and setting, and one for each device, whether declared as a
// bare token (device_tokens) or with its kind (devices).
func ImportRows(dir *directory.Directory) int {
	return len(dir.Recipients) + deviceRows(dir) + len(dir.Groups) + len(dir.Members) + len(dir.Preferences) + len(dir.Settings)
}

// deviceRows is how many recipient_devices rows dir holds.
func deviceRows(dir *directory.Directory) int {
	n := 0
	for _, r := range dir.Recipients {
		n += len(r.DeviceTokens) + len(r.Devices)
	}
	return n
}

func quietEnds(q *directory.QuietHours) (string, string) {
	if q == nil {
		return "", ""
	}
	return q.Start, q.End
}

// ExistingDirectoryKeys returns which of groups and users the tenant's
// directory already has (for references a directory file makes to
// entries it does not declare).
func ExistingDirectoryKeys(ctx context.Context, q Querier, tenantID string, groups, users []string) (map[string]bool, map[string]bool, error) {
	kg, ku := map[string]bool{}, map[string]bool{}
	rows, err := q.Query(ctx, `SELECT 'g', group_key FROM groups WHERE tenant_id = $1 AND group_key = ANY($2)
		UNION ALL SELECT 'u', user_id FROM recipients WHERE tenant_id = $1 AND user_id = ANY($3)`, tenantID, orEmpty(groups), orEmpty(users))
	if err != nil {
		return nil, nil, fmt.Errorf("look up directory keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind, key string
		if err := rows.Scan(&kind, &key); err != nil {
			return nil, nil, fmt.Errorf("look up directory keys: %w", err)
		}
		if kind == "g" {
			kg[key] = true
		} else {
			ku[key] = true
		}
	}
	return kg, ku, rows.Err()
}

// StoredEvent is an outbox event as `GET /admin/v1/events/{tenant}/{event_id}/explain`
// recomputes its decision: the event, its status and when it was
// processed.
type StoredEvent struct {
	// Event holds the event's identity and content; ID, ProjectID,
	// Attempts and the trace context are not read.
	Event       EventRow
	Status      string
	ProcessedAt *time.Time
}

// LoadStoredEvent reads one event of a tenant, or ErrNotFound.
func LoadStoredEvent(ctx context.Context, q Querier, tenantID, eventID string) (StoredEvent, error) {
	var se StoredEvent
	err := q.QueryRow(ctx, `SELECT tenant_id, event_id, event_type, aggregate_type, aggregate_id, payload, created_at, status, processed_at
		FROM event_outbox WHERE tenant_id = $1 AND event_id = $2`, tenantID, eventID).
		Scan(&se.Event.TenantID, &se.Event.EventID, &se.Event.Type, &se.Event.AggregateType, &se.Event.AggregateID,
			&se.Event.Payload, &se.Event.CreatedAt, &se.Status, &se.ProcessedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return se, ErrNotFound
	}
	if err != nil {
		return se, fmt.Errorf("load event: %w", err)
	}
	return se, nil
}

// splitDevices turns the rows of recipient_devices into the directory's
// two forms: tokens of no kind (imported as device_tokens) and devices
// with their kind; a web push subscription's token is its endpoint.
func splitDevices(rows []directory.Device) (tokens []string, devs []directory.Device) {
	for _, d := range rows {
		switch d.Kind {
		case "":
			tokens = append(tokens, d.Token)
		case directory.DeviceWebPush:
			devs = append(devs, directory.Device{Kind: d.Kind, Endpoint: d.Token, P256dh: d.P256dh, Auth: d.Auth})
		default:
			devs = append(devs, directory.Device{Kind: d.Kind, Token: d.Token})
		}
	}
	return tokens, devs
}

// RemoveDevices deletes devices of one user that a provider reported gone
// (sdk.Result.GoneDevices: tokens, or web push endpoints), so no later
// delivery tries them. It returns how many rows it deleted; an address
// the user does not have is ignored.
func RemoveDevices(ctx context.Context, q Querier, tenantID, userID string, addresses []string) (int64, error) {
	if len(addresses) == 0 {
		return 0, nil
	}
	tag, err := q.Exec(ctx, `DELETE FROM recipient_devices WHERE tenant_id = $1 AND user_id = $2 AND token = ANY($3)`,
		tenantID, userID, addresses)
	if err != nil {
		return 0, fmt.Errorf("remove gone devices: %w", err)
	}
	return tag.RowsAffected(), nil
}

// readPreferences appends the batch's next result, user_id, event_type,
// channel, enabled rows, to dir.Preferences (load and export read alike).
func readPreferences(br pgx.BatchResults, dir *directory.Directory) error {
	return readRows(br, "preferences", func(r pgx.Rows) error {
		var p directory.Preference
		err := r.Scan(&p.UserID, &p.EventType, &p.Channel, &p.Enabled)
		dir.Preferences = append(dir.Preferences, p)
		return err
	})
}

// readGroupSettings appends the batch's next result, group_key,
// event_type, channel, enabled, roles rows, to dir.Settings.
func readGroupSettings(br pgx.BatchResults, dir *directory.Directory) error {
	return readRows(br, "group settings", func(r pgx.Rows) error {
		var gs directory.GroupSetting
		err := r.Scan(&gs.Group, &gs.EventType, &gs.Channel, &gs.Enabled, &gs.Roles)
		if len(gs.Roles) == 0 {
			gs.Roles = nil
		}
		dir.Settings = append(dir.Settings, gs)
		return err
	})
}
