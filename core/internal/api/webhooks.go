package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/webhook"
	"github.com/jackc/pgx/v5"
)

// A tenant's webhook for delivery-status events (package statusev),
// managed with a tenant-wide API key:
//
//	GET    /v1/settings/webhook          {"url", "kinds", "enabled", "previous_secret_until"?, ...}
//	PUT    /v1/settings/webhook          {"url", "kinds", "enabled"?} → the webhook; "secret" once, when new
//	DELETE /v1/settings/webhook          204; what was owed to it is dropped
//	POST   /v1/settings/webhook/rotate   {"overlap"?: "24h"} → {"secret", "previous_secret_until"}
//	POST   /v1/webhooks/replay           {"from": RFC 3339} → {"replayed": n}

// WebhookPolicy is what the operator decides about tenants' webhooks.
type WebhookPolicy struct {
	// AllowLoopback accepts http:// webhooks on a loopback host
	// (status_events.webhook_allow_loopback).
	AllowLoopback bool
	// Retention is the replay window (status_events.retention).
	Retention time.Duration
}

// SetWebhooks sets the webhook policy; call it before Handler.
func (s *Server) SetWebhooks(p WebhookPolicy) { s.webhooks = p }

// maxRotationOverlap bounds how long a rotated secret keeps signing.
const maxRotationOverlap = 7 * 24 * time.Hour

// webhookError answers the error of a webhook handler's tenant
// transaction, if any: ErrNoWebhook as 404 "no webhook", anything else as
// a 500. It reports whether it answered.
func (s *Server) webhookError(w http.ResponseWriter, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, store.ErrNoWebhook):
		Problem(w, http.StatusNotFound, "no webhook", store.ErrNoWebhook.Error(), "")
	default:
		s.internal(w, err)
	}
	return true
}

type webhookSettings struct {
	URL     *string   `json:"url"`
	Kinds   *[]string `json:"kinds"`
	Enabled *bool     `json:"enabled"`
}

type webhookView struct {
	store.Webhook
	// Secret is shown once: when the webhook is made, or rotated.
	Secret string `json:"secret,omitempty"`
}

func (s *Server) getWebhook(w http.ResponseWriter, r *http.Request) {
	var hook store.Webhook
	err := s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		hook, err = store.GetWebhook(r.Context(), tx, principalOf(r).Tenant)
		return err
	})
	if s.webhookError(w, err) {
		return
	}
	WriteJSON(w, http.StatusOK, webhookView{Webhook: hook})
}

func (s *Server) putWebhook(w http.ResponseWriter, r *http.Request) {
	var req webhookSettings
	if !s.decode(w, r, &req) {
		return
	}
	if req.URL == nil {
		Problem(w, http.StatusBadRequest, "invalid webhook", "url is required", "url")
		return
	}
	u, err := webhook.CheckURL(*req.URL, s.webhooks.AllowLoopback)
	if err != nil {
		Problem(w, http.StatusBadRequest, "invalid webhook", "url "+err.Error(), "url")
		return
	}
	if req.Kinds == nil {
		Problem(w, http.StatusBadRequest, "invalid webhook", "kinds is required: the event kinds to POST, e.g. [\"delivery.sent\", \"delivery.failed\"]", "kinds")
		return
	}
	kinds, err := webhook.CheckKinds(*req.Kinds)
	if err != nil {
		Problem(w, http.StatusBadRequest, "invalid webhook", err.Error(), "kinds")
		return
	}
	enabled := req.Enabled == nil || *req.Enabled
	var out webhookView
	err = s.inTenant(r, func(tx pgx.Tx) error {
		tenant := principalOf(r).Tenant
		secret, err := store.PutWebhook(r.Context(), tx, tenant, u, kinds, enabled, webhook.NewSecret())
		if err != nil {
			return err
		}
		out.Secret = secret
		out.Webhook, err = store.GetWebhook(r.Context(), tx, tenant)
		return err
	})
	if s.webhookError(w, err) {
		return
	}
	status := http.StatusOK
	if out.Secret != "" {
		status = http.StatusCreated
	}
	WriteJSON(w, status, out)
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) {
	err := s.inTenant(r, func(tx pgx.Tx) error {
		found, err := store.DeleteWebhook(r.Context(), tx, principalOf(r).Tenant)
		if err == nil && !found {
			err = store.ErrNoWebhook
		}
		return err
	})
	if s.webhookError(w, err) {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type rotateSecretRequest struct {
	Overlap *string `json:"overlap"`
}

func (s *Server) rotateWebhook(w http.ResponseWriter, r *http.Request) {
	var req rotateSecretRequest
	if r.ContentLength != 0 && !s.decode(w, r, &req) {
		return
	}
	overlap := 24 * time.Hour
	if req.Overlap != nil {
		d, err := time.ParseDuration(*req.Overlap)
		if err != nil || d < 0 || d > maxRotationOverlap {
			Problem(w, http.StatusBadRequest, "invalid rotation",
				fmt.Sprintf("overlap must be a duration from 0s to %s (e.g. \"24h\"), got %q", maxRotationOverlap, *req.Overlap), "overlap")
			return
		}
		overlap = d
	}
	secret := webhook.NewSecret()
	var until time.Time
	err := s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		until, err = store.RotateWebhookSecret(r.Context(), tx, principalOf(r).Tenant, secret, overlap)
		return err
	})
	if s.webhookError(w, err) {
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"secret": secret, "previous_secret_until": until})
}

type replayRequest struct {
	From *string `json:"from"`
}

func (s *Server) replayWebhook(w http.ResponseWriter, r *http.Request) {
	var req replayRequest
	if !s.decode(w, r, &req) {
		return
	}
	if req.From == nil {
		Problem(w, http.StatusBadRequest, "invalid replay", "from is required: an RFC 3339 time, e.g. 2026-11-26T08:00:00Z", "from")
		return
	}
	from, err := time.Parse(time.RFC3339Nano, *req.From)
	if err != nil {
		Problem(w, http.StatusBadRequest, "invalid replay", fmt.Sprintf("from must be an RFC 3339 time, e.g. 2026-11-26T08:00:00Z, got %q", *req.From), "from")
		return
	}
	if from.After(time.Now()) {
		Problem(w, http.StatusBadRequest, "invalid replay", "from is in the future", "from")
		return
	}
	if s.webhooks.Retention > 0 && time.Since(from) > s.webhooks.Retention {
		Problem(w, http.StatusBadRequest, "invalid replay",
			fmt.Sprintf("from is older than the replay window (%s): events are kept that long", s.webhooks.Retention), "from")
		return
	}
	var n int64
	err = s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		n, err = store.ReplayWebhook(r.Context(), tx, principalOf(r).Tenant, from)
		return err
	})
	if errors.Is(err, store.ErrNoWebhook) {
		Problem(w, http.StatusConflict, "no webhook", "the tenant has no enabled webhook to replay to; PUT /v1/settings/webhook first", "")
		return
	}
	if s.webhookError(w, err) {
		return
	}
	WriteJSON(w, http.StatusAccepted, map[string]any{"replayed": n})
}
