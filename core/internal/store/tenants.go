package store

import (
	"errors"
	"math"
	"time"

	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/jackc/pgx/v5"
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

// APIKey is a stored API key (never the key itself: only its hash is kept).
type APIKey struct {
	KeyID     string     `json:"key_id"`
	TenantID  string     `json:"tenant_id"`
	ProjectID string     `json:"project_id,omitempty"`
	Name      string     `json:"name"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// Active reports whether the key authenticates at now.
func (k APIKey) Active(now time.Time) bool {
	return k.RevokedAt == nil && (k.ExpiresAt == nil || k.ExpiresAt.After(now))
}

// NewAPIKey says what key to create.
type NewAPIKey struct {
	TenantID string
	// ProjectID limits the key to one project of the tenant ("": every
	// project).
	ProjectID string
	Name      string
	// Key is the key itself; empty makes a random one (192 bits).
	Key string
	// ExpiresAt ends the key's life (nil: it never expires).
	ExpiresAt *time.Time
}

// ErrKeyTaken reports a given key that is already stored for another
// tenant or project.
var ErrKeyTaken = errors.New("this api key already exists; choose another")

// CreateKey stores a key and returns it with its secret, which is not
// stored. A given key must start with "hk_" and be at least 24 characters
// long (callers that take keys from people check KeyStrength too).
// Creating the same key again for the same tenant and project is a no-op.
func CreateKey(ctx context.Context, q Querier, nk NewAPIKey) (APIKey, string, error) {
	key := nk.Key
	if key == "" {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return APIKey{}, "", err
		}
		key = APIKeyPrefix + hex.EncodeToString(b)
	}
	if !strings.HasPrefix(key, APIKeyPrefix) || len(key) < 24 {
		return APIKey{}, "", fmt.Errorf("api key must start with %q and be at least 24 characters", APIKeyPrefix)
	}
	var proj *string
	if nk.ProjectID != "" {
		ok, err := ProjectExists(ctx, q, nk.TenantID, nk.ProjectID)
		if err != nil {
			return APIKey{}, "", err
		}
		if !ok {
			return APIKey{}, "", fmt.Errorf("tenant %s has no project %q (create it with `herald projects create`)", nk.TenantID, nk.ProjectID)
		}
		proj = &nk.ProjectID
	}
	hash := HashAPIKey(key)
	k := APIKey{KeyID: hex.EncodeToString(hash[:8]), TenantID: nk.TenantID, ProjectID: nk.ProjectID, Name: nk.Name, ExpiresAt: nk.ExpiresAt}
	err := q.QueryRow(ctx, `INSERT INTO api_keys (key_id, tenant_id, name, key_hash, project_id, expires_at) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (key_hash) DO NOTHING RETURNING created_at`, k.KeyID, nk.TenantID, nk.Name, hash, proj, nk.ExpiresAt).Scan(&k.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		// The key exists: fine when it is this tenant's and project's.
		var tenant string
		var project *string
		err = q.QueryRow(ctx, `SELECT tenant_id, project_id, created_at, expires_at FROM api_keys WHERE key_hash = $1`, hash).
			Scan(&tenant, &project, &k.CreatedAt, &k.ExpiresAt)
		if err != nil || tenant != nk.TenantID || (project == nil) != (proj == nil) || (project != nil && *project != nk.ProjectID) {
			return APIKey{}, "", ErrKeyTaken
		}
	}
	if err != nil {
		return APIKey{}, "", fmt.Errorf("create api key: %w", err)
	}
	return k, key, nil
}

// CreateAPIKey stores a key for the tenant and returns it (see CreateKey).
func CreateAPIKey(ctx context.Context, q Querier, tenantID, name, key string) (string, error) {
	return CreateProjectAPIKey(ctx, q, tenantID, "", name, key)
}

// CreateProjectAPIKey is CreateAPIKey for a key limited to project (""
// for every project of the tenant), which must exist.
func CreateProjectAPIKey(ctx context.Context, q Querier, tenantID, project, name, key string) (string, error) {
	_, secret, err := CreateKey(ctx, q, NewAPIKey{TenantID: tenantID, ProjectID: project, Name: name, Key: key})
	return secret, err
}

// ListAPIKeys returns the tenant's keys, newest first, revoked and expired
// ones included.
func ListAPIKeys(ctx context.Context, q Querier, tenantID string) ([]APIKey, error) {
	rows, err := q.Query(ctx, `SELECT key_id, tenant_id, coalesce(project_id, ''), name, created_at, expires_at, revoked_at
		FROM api_keys WHERE tenant_id = $1 ORDER BY created_at DESC, key_id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (APIKey, error) {
		var k APIKey
		err := r.Scan(&k.KeyID, &k.TenantID, &k.ProjectID, &k.Name, &k.CreatedAt, &k.ExpiresAt, &k.RevokedAt)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	if keys == nil {
		keys = []APIKey{}
	}
	return keys, nil
}

// RotateAPIKey replaces an active key of the tenant with a new random one
// (same name and project) and lets the old one work for grace more (zero:
// it is revoked at once). Run it in a transaction. It returns the new key
// and its secret, or ErrNotFound.
func RotateAPIKey(ctx context.Context, tx Querier, tenantID, keyID string, grace time.Duration) (APIKey, string, error) {
	var old APIKey
	var project *string
	err := tx.QueryRow(ctx, `SELECT key_id, name, project_id FROM api_keys
		WHERE tenant_id = $1 AND key_id = $2 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
		FOR UPDATE`, tenantID, keyID).Scan(&old.KeyID, &old.Name, &project)
	if errors.Is(err, pgx.ErrNoRows) {
		return APIKey{}, "", ErrNotFound
	}
	if err != nil {
		return APIKey{}, "", fmt.Errorf("rotate api key: %w", err)
	}
	nk := NewAPIKey{TenantID: tenantID, Name: old.Name}
	if project != nil {
		nk.ProjectID = *project
	}
	k, secret, err := CreateKey(ctx, tx, nk)
	if err != nil {
		return APIKey{}, "", err
	}
	if grace <= 0 {
		_, err = tx.Exec(ctx, `UPDATE api_keys SET revoked_at = now() WHERE tenant_id = $1 AND key_id = $2`, tenantID, keyID)
	} else {
		_, err = tx.Exec(ctx, `UPDATE api_keys SET expires_at = least(coalesce(expires_at, 'infinity'), now() + make_interval(secs => $3))
			WHERE tenant_id = $1 AND key_id = $2`, tenantID, keyID, grace.Seconds())
	}
	if err != nil {
		return APIKey{}, "", fmt.Errorf("rotate api key: %w", err)
	}
	return k, secret, nil
}

// MinKeyBits is the least estimated entropy a key chosen by a person must
// have (KeyStrength).
const MinKeyBits = 112

// KeyStrength estimates the entropy of a key someone chose, in bits: the
// Shannon entropy of its characters (after the "hk_" prefix) times its
// length. It is a guard against "hk_test_key_123", not a proof of
// randomness: a random key of 24 bytes, hex-encoded (what Herald makes),
// scores about 190.
func KeyStrength(key string) float64 {
	body := strings.TrimPrefix(key, APIKeyPrefix)
	if body == "" {
		return 0
	}
	counts := map[rune]int{}
	n := 0
	for _, r := range body {
		counts[r]++
		n++
	}
	var h float64
	for _, c := range counts {
		p := float64(c) / float64(n)
		h -= p * math.Log2(p)
	}
	return h * float64(n)
}

// APIKeyID is the id under which a key is stored (and revoked).
func APIKeyID(key string) string {
	h := HashAPIKey(key)
	return hex.EncodeToString(h[:8])
}
