package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// TokenKey is a key a tenant's backend signs its users' tokens with.
type TokenKey struct {
	TenantID string
	// Kid names the key in a token's header.
	Kid string
	// Alg is the only algorithm the key verifies: HS256, RS256, ES256 or
	// EdDSA.
	Alg string
	// Issuer is the iss claim tokens under this key carry.
	Issuer string
	// Key is the HS256 secret, or the public key in PKIX DER.
	Key       []byte
	CreatedAt time.Time
	RevokedAt *time.Time
}

// AddTokenKey stores a tenant's token key; a kid the tenant already has
// is refused.
func AddTokenKey(ctx context.Context, q Querier, k TokenKey) error {
	tag, err := q.Exec(ctx, `INSERT INTO token_keys (tenant_id, kid, alg, issuer, key) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (tenant_id, kid) DO NOTHING`, k.TenantID, k.Kid, k.Alg, k.Issuer, k.Key)
	if err != nil {
		return fmt.Errorf("add token key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("add token key: tenant %s already has a key %q (revoke it and pick another kid)", k.TenantID, k.Kid)
	}
	return nil
}

// GetTokenKey returns the tenant's unrevoked key kid, or ErrNotFound.
func GetTokenKey(ctx context.Context, q Querier, tenantID, kid string) (TokenKey, error) {
	k := TokenKey{TenantID: tenantID, Kid: kid}
	err := q.QueryRow(ctx, `SELECT alg, issuer, key, created_at FROM token_keys
		WHERE tenant_id = $1 AND kid = $2 AND revoked_at IS NULL`, tenantID, kid).Scan(&k.Alg, &k.Issuer, &k.Key, &k.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return k, ErrNotFound
	}
	if err != nil {
		return k, fmt.Errorf("get token key: %w", err)
	}
	return k, nil
}

// ListTokenKeys returns the tenant's keys (without the key material).
func ListTokenKeys(ctx context.Context, q Querier, tenantID string) ([]TokenKey, error) {
	rows, err := q.Query(ctx, `SELECT tenant_id, kid, alg, issuer, created_at, revoked_at FROM token_keys
		WHERE tenant_id = $1 ORDER BY created_at, kid`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list token keys: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (TokenKey, error) {
		var k TokenKey
		return k, r.Scan(&k.TenantID, &k.Kid, &k.Alg, &k.Issuer, &k.CreatedAt, &k.RevokedAt)
	})
}

// RevokeTokenKey revokes a tenant's key: tokens under it are refused from
// the next request on (verifiers cache keys for at most a second).
func RevokeTokenKey(ctx context.Context, q Querier, tenantID, kid string) error {
	tag, err := q.Exec(ctx, `UPDATE token_keys SET revoked_at = now() WHERE tenant_id = $1 AND kid = $2 AND revoked_at IS NULL`, tenantID, kid)
	if err != nil {
		return fmt.Errorf("revoke token key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// Ticket is who a live-session ticket was issued to.
type Ticket struct {
	TenantID, UserID, UserType, ProjectID string
}

// CreateTicket stores a one-time ticket (only its hash) valid for ttl, in
// a transaction of t's tenant, and clears the tenant's expired ones.
func CreateTicket(ctx context.Context, tx Querier, ticket string, t Ticket, ttl time.Duration) (time.Time, error) {
	h := sha256.Sum256([]byte(ticket))
	var exp time.Time
	err := tx.QueryRow(ctx, `WITH gone AS (DELETE FROM live_tickets WHERE tenant_id = $2 AND expires_at < now())
		INSERT INTO live_tickets (ticket_hash, tenant_id, user_id, user_type, project_id, expires_at)
		VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6)) RETURNING expires_at`,
		h[:], t.TenantID, t.UserID, t.UserType, t.ProjectID, ttl.Seconds()).Scan(&exp)
	if err != nil {
		return time.Time{}, fmt.Errorf("create ticket: %w", err)
	}
	return exp, nil
}

// RedeemTicket takes a ticket once (herald_redeem_ticket): a second
// redemption, an unknown or an expired ticket is ErrNotFound.
func RedeemTicket(ctx context.Context, q Querier, ticket string) (Ticket, error) {
	h := sha256.Sum256([]byte(ticket))
	var t Ticket
	err := q.QueryRow(ctx, `SELECT tenant_id, user_id, user_type, project_id FROM herald_redeem_ticket($1)`, h[:]).
		Scan(&t.TenantID, &t.UserID, &t.UserType, &t.ProjectID)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, ErrNotFound
	}
	if err != nil {
		return t, fmt.Errorf("redeem ticket: %w", err)
	}
	return t, nil
}
