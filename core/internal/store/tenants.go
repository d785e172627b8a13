package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// EnsureTenant creates the tenant if it does not exist.
func EnsureTenant(ctx context.Context, q Querier, tenantID, name string) error {
	if tenantID == "" {
		return errors.New("tenant id is required")
	}
	_, err := q.Exec(ctx, `INSERT INTO tenants (tenant_id, name) VALUES ($1, $2) ON CONFLICT (tenant_id) DO NOTHING`, tenantID, name)
	if err != nil {
		return fmt.Errorf("ensure tenant %s: %w", tenantID, err)
	}
	return nil
}

// APIKeyPrefix starts every API key.
const APIKeyPrefix = "hk_"

// HashAPIKey is how keys are stored: only their SHA-256 is kept.
func HashAPIKey(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

// CreateAPIKey stores a key for the tenant and returns it. When key is
// empty a random one is made; a given key must start with "hk_" and be at
// least 24 characters long.
func CreateAPIKey(ctx context.Context, q Querier, tenantID, name, key string) (string, error) {
	if key == "" {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		key = APIKeyPrefix + hex.EncodeToString(b)
	}
	if !strings.HasPrefix(key, APIKeyPrefix) || len(key) < 24 {
		return "", fmt.Errorf("api key must start with %q and be at least 24 characters", APIKeyPrefix)
	}
	hash := HashAPIKey(key)
	keyID := hex.EncodeToString(hash[:8])
	_, err := q.Exec(ctx, `INSERT INTO api_keys (key_id, tenant_id, name, key_hash) VALUES ($1, $2, $3, $4)
		ON CONFLICT (key_hash) DO NOTHING`, keyID, tenantID, name, hash)
	if err != nil {
		return "", fmt.Errorf("create api key: %w", err)
	}
	return key, nil
}

// TenantForAPIKey returns the tenant an unrevoked key belongs to, or
// ErrNotFound.
func TenantForAPIKey(ctx context.Context, q Querier, key string) (string, error) {
	var tenant string
	err := q.QueryRow(ctx, `SELECT tenant_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL`, HashAPIKey(key)).Scan(&tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("look up api key: %w", err)
	}
	return tenant, nil
}
