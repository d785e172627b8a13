package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// EnsureTenant creates the tenant, with its default project, if it does
// not exist.
func EnsureTenant(ctx context.Context, q Querier, tenantID, name string) error {
	if err := ValidID("tenant", tenantID); err != nil {
		return err
	}
	_, err := q.Exec(ctx, `WITH t AS (INSERT INTO tenants (tenant_id, name) VALUES ($1, $2) ON CONFLICT (tenant_id) DO NOTHING)
		INSERT INTO projects (tenant_id, project_id, name) VALUES ($1, $3, $3) ON CONFLICT (tenant_id, project_id) DO NOTHING`,
		tenantID, name, DefaultProject)
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
// least 24 characters long. A key made with CreateProjectAPIKey is limited
// to one project.
func CreateAPIKey(ctx context.Context, q Querier, tenantID, name, key string) (string, error) {
	return CreateProjectAPIKey(ctx, q, tenantID, "", name, key)
}

// CreateProjectAPIKey is CreateAPIKey for a key limited to project (""
// for every project of the tenant), which must exist.
func CreateProjectAPIKey(ctx context.Context, q Querier, tenantID, project, name, key string) (string, error) {
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
	var proj *string
	if project != "" {
		ok, err := ProjectExists(ctx, q, tenantID, project)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", fmt.Errorf("tenant %s has no project %q (create it with `herald projects create`)", tenantID, project)
		}
		proj = &project
	}
	hash := HashAPIKey(key)
	keyID := hex.EncodeToString(hash[:8])
	_, err := q.Exec(ctx, `INSERT INTO api_keys (key_id, tenant_id, name, key_hash, project_id) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (key_hash) DO NOTHING`, keyID, tenantID, name, hash, proj)
	if err != nil {
		return "", fmt.Errorf("create api key: %w", err)
	}
	return key, nil
}

// APIKeyID is the id under which a key is stored (and revoked).
func APIKeyID(key string) string {
	h := HashAPIKey(key)
	return hex.EncodeToString(h[:8])
}
