package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/jackc/pgx/v5"
)

// StoredDevice is one push device of a recipient as the API shows it.
type StoredDevice struct {
	// ID names the device in the API (md5 of its address, migration
	// 0030): the same device registered again keeps its id.
	ID string `json:"device_id"`
	directory.Device
	CreatedAt time.Time `json:"created_at"`
}

// lockRecipient locks the recipient row of (tenantID, userID) for the rest
// of q's transaction (FOR SHARE: writers of the row wait, other device and
// preference writers do not) and reports ErrNotFound when the tenant has
// no such recipient. A concurrent delete of the recipient then cannot
// leave a device or preference behind.
func lockRecipient(ctx context.Context, q Querier, tenantID, userID string) error {
	var one int
	err := q.QueryRow(ctx, `SELECT 1 FROM recipients WHERE tenant_id = $1 AND user_id = $2 FOR SHARE`, tenantID, userID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("look up recipient: %w", err)
	}
	return nil
}

// AddDevice registers a push device for a recipient, or updates the web
// push keys of a subscription already registered at the same endpoint
// (and the kind of a token). d must have passed directory.CheckDevice
// (DecodeEntry does it). It returns the stored device and whether it is
// new, or ErrNotFound when the tenant has no recipient userID. Run it in a
// tenant transaction (InTenant).
func AddDevice(ctx context.Context, q Querier, tenantID, userID string, d directory.Device) (StoredDevice, bool, error) {
	if err := lockRecipient(ctx, q, tenantID, userID); err != nil {
		return StoredDevice{}, false, err
	}
	sd := StoredDevice{Device: d}
	var created bool
	err := q.QueryRow(ctx, `INSERT INTO recipient_devices (tenant_id, user_id, token, platform, p256dh, auth)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (tenant_id, user_id, token) DO UPDATE SET platform = EXCLUDED.platform, p256dh = EXCLUDED.p256dh, auth = EXCLUDED.auth
		RETURNING device_id, created_at, xmax = 0`, tenantID, userID, d.Address(), d.Kind, d.P256dh, d.Auth).
		Scan(&sd.ID, &sd.CreatedAt, &created)
	if err != nil {
		return StoredDevice{}, false, fmt.Errorf("add device: %w", err)
	}
	return sd, created, nil
}

// ListDevices returns a recipient's devices, oldest first (a token
// imported as a bare device_token has Kind ""), or ErrNotFound when the
// tenant has no recipient userID.
func ListDevices(ctx context.Context, q Querier, tenantID, userID string) ([]StoredDevice, error) {
	rows, err := q.Query(ctx, `SELECT d.device_id, d.platform, d.token, d.p256dh, d.auth, d.created_at
		FROM recipients r LEFT JOIN recipient_devices d ON d.tenant_id = r.tenant_id AND d.user_id = r.user_id
		WHERE r.tenant_id = $1 AND r.user_id = $2 ORDER BY d.created_at, d.device_id`, tenantID, userID)
	if err != nil {
		return nil, fmt.Errorf("list devices: %w", err)
	}
	defer rows.Close()
	found := false
	devs := []StoredDevice{}
	for rows.Next() {
		found = true
		var id, kind, token, p256dh, auth *string
		var at *time.Time
		if err := rows.Scan(&id, &kind, &token, &p256dh, &auth, &at); err != nil {
			return nil, fmt.Errorf("list devices: %w", err)
		}
		if id == nil {
			continue // the recipient, with no device
		}
		sd := StoredDevice{ID: *id, CreatedAt: *at, Device: directory.Device{Kind: *kind}}
		if *kind == directory.DeviceWebPush {
			sd.Endpoint, sd.P256dh, sd.Auth = *token, *p256dh, *auth
		} else {
			sd.Token = *token
		}
		devs = append(devs, sd)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list devices: %w", err)
	}
	if !found {
		return nil, ErrNotFound
	}
	return devs, nil
}

// RemoveDevice deletes one device of a recipient by its id, or returns
// ErrNotFound when the tenant's recipient userID has no such device.
func RemoveDevice(ctx context.Context, q Querier, tenantID, userID, deviceID string) error {
	tag, err := q.Exec(ctx, `DELETE FROM recipient_devices WHERE tenant_id = $1 AND user_id = $2 AND device_id = $3`,
		tenantID, userID, deviceID)
	if err != nil {
		return fmt.Errorf("remove device: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}
