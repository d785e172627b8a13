package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Webhook is a tenant's webhook for delivery-status events (migration
// 0080), as GET /v1/settings/webhook shows it: never its secrets.
type Webhook struct {
	URL     string   `json:"url"`
	Kinds   []string `json:"kinds"`
	Enabled bool     `json:"enabled"`
	// PreviousUntil is when the secret replaced by the last rotation stops
	// signing too (nil: no overlap under way).
	PreviousUntil *time.Time `json:"previous_secret_until,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
}

// WebhookSecrets are the secrets a webhook's messages are signed with
// now: the current one, and the previous one during a rotation's overlap.
type WebhookSecrets struct {
	URL     string
	Kinds   []string
	Enabled bool
	Secrets []string
}

// ErrNoWebhook is the error of reading, rotating or replaying the webhook
// of a tenant that has none.
var ErrNoWebhook = errors.New("the tenant has no webhook; PUT /v1/settings/webhook (or herald tenants webhook set) makes one")

// GetWebhook returns the tenant's webhook, or ErrNoWebhook.
func GetWebhook(ctx context.Context, q Querier, tenant string) (Webhook, error) {
	var w Webhook
	err := q.QueryRow(ctx, `SELECT url, kinds, enabled, CASE WHEN previous_until > now() THEN previous_until END, created_at, updated_at
		FROM tenant_webhooks WHERE tenant_id = $1`, tenant).Scan(&w.URL, &w.Kinds, &w.Enabled, &w.PreviousUntil, &w.CreatedAt, &w.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Webhook{}, ErrNoWebhook
	}
	if err != nil {
		return Webhook{}, fmt.Errorf("read webhook: %w", err)
	}
	return w, nil
}

// PutWebhook sets the tenant's webhook URL, kinds and enabled flag
// (checked by the caller: webhook.CheckURL, webhook.CheckKinds). A new
// webhook gets newSecret, which PutWebhook returns; an existing one keeps
// its secrets and PutWebhook returns "".
func PutWebhook(ctx context.Context, q Querier, tenant, url string, kinds []string, enabled bool, newSecret string) (string, error) {
	var inserted bool
	err := q.QueryRow(ctx, `INSERT INTO tenant_webhooks (tenant_id, url, kinds, enabled, secret) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (tenant_id) DO UPDATE SET url = EXCLUDED.url, kinds = EXCLUDED.kinds, enabled = EXCLUDED.enabled, updated_at = now()
		RETURNING xmax = 0`, tenant, url, kinds, enabled, newSecret).Scan(&inserted)
	if err != nil {
		return "", fmt.Errorf("write webhook: %w", err)
	}
	if inserted {
		return newSecret, nil
	}
	return "", nil
}

// RotateWebhookSecret makes newSecret the tenant's signing secret; the
// one it replaces keeps signing too until overlap has passed (0: stops at
// once). ErrNoWebhook when the tenant has none.
func RotateWebhookSecret(ctx context.Context, q Querier, tenant, newSecret string, overlap time.Duration) (time.Time, error) {
	var until time.Time
	err := q.QueryRow(ctx, `UPDATE tenant_webhooks SET previous_secret = CASE WHEN $3::interval > '0'::interval THEN secret END,
			previous_until = now() + $3::interval, secret = $2, updated_at = now()
		WHERE tenant_id = $1 RETURNING previous_until`, tenant, newSecret, overlap).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, ErrNoWebhook
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("rotate webhook secret: %w", err)
	}
	return until, nil
}

// DeleteWebhook removes the tenant's webhook and stops what is owed to it;
// it reports whether there was one.
func DeleteWebhook(ctx context.Context, q Querier, tenant string) (bool, error) {
	tag, err := q.Exec(ctx, `DELETE FROM tenant_webhooks WHERE tenant_id = $1`, tenant)
	if err != nil {
		return false, fmt.Errorf("remove webhook: %w", err)
	}
	if _, err := q.Exec(ctx, `UPDATE status_events SET webhook_due_at = NULL, webhook_last_error = 'webhook removed'
		WHERE tenant_id = $1 AND webhook_due_at IS NOT NULL`, tenant); err != nil {
		return false, fmt.Errorf("remove webhook: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// WebhookSecretsOf returns what signs and addresses the tenant's
// messages now, or ErrNoWebhook.
func WebhookSecretsOf(ctx context.Context, q Querier, tenant string) (WebhookSecrets, error) {
	var w WebhookSecrets
	var cur string
	var prev *string
	err := q.QueryRow(ctx, `SELECT url, kinds, enabled, secret, CASE WHEN previous_until > now() THEN previous_secret END
		FROM tenant_webhooks WHERE tenant_id = $1`, tenant).Scan(&w.URL, &w.Kinds, &w.Enabled, &cur, &prev)
	if errors.Is(err, pgx.ErrNoRows) {
		return WebhookSecrets{}, ErrNoWebhook
	}
	if err != nil {
		return WebhookSecrets{}, fmt.Errorf("read webhook: %w", err)
	}
	w.Secrets = []string{cur}
	if prev != nil {
		w.Secrets = append(w.Secrets, *prev)
	}
	return w, nil
}

// ReplayWebhook marks the tenant's recorded events since from (of the
// kinds its webhook wants) owed to its webhook again, attempts reset, and
// returns how many. Events older than the replay window are gone already.
func ReplayWebhook(ctx context.Context, q Querier, tenant string, from time.Time) (int64, error) {
	var kinds []string
	var enabled bool
	err := q.QueryRow(ctx, `SELECT kinds, enabled FROM tenant_webhooks WHERE tenant_id = $1`, tenant).Scan(&kinds, &enabled)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !enabled) {
		return 0, ErrNoWebhook
	}
	if err != nil {
		return 0, fmt.Errorf("replay: %w", err)
	}
	tag, err := q.Exec(ctx, `UPDATE status_events SET webhook_due_at = now(), webhook_attempts = 0, webhook_last_error = '',
			webhook_lease_until = NULL
		WHERE tenant_id = $1 AND occurred_at >= $2 AND kind = ANY ($3)`, tenant, from, kinds)
	if err != nil {
		return 0, fmt.Errorf("replay: %w", err)
	}
	return tag.RowsAffected(), nil
}
