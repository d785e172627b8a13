package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/webhook"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
)

// newTenantWebhookCmd is `herald tenants webhook`: the tenant's webhook
// for delivery-status events (package statusev), as PUT/GET/DELETE
// /v1/settings/webhook manage it.
func newTenantWebhookCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "webhook", Short: "Manage the webhook a tenant's delivery-status events are POSTed to"}
	var cfg, tenant string
	// run checks --tenant, loads the config and runs fn in a transaction
	// with the tenant's existence checked.
	run := func(ctx context.Context, fn func(context.Context, pgx.Tx, bool) error) error {
		if tenant == "" {
			return &ExitError{Code: 2, Err: errors.New("--tenant is required")}
		}
		if err := store.ValidID("tenant", tenant); err != nil {
			return &ExitError{Code: 2, Err: fmt.Errorf("--tenant: %w", err)}
		}
		return withConfigTx(ctx, cfg, func(ctx context.Context, d *config.Daemon, tx pgx.Tx) error {
			if err := tenantExists(ctx, tx, tenant); err != nil {
				return err
			}
			return fn(ctx, tx, d.StatusEvents.WebhookAllowLoopback)
		})
	}
	noWebhook := func(err error) error {
		if errors.Is(err, store.ErrNoWebhook) {
			return &ExitError{Code: 2, Err: fmt.Errorf("--tenant: tenant %s has no webhook (herald tenants webhook set)", tenant)}
		}
		return err
	}

	var url, kinds string
	var disabled bool
	set := &cobra.Command{
		Use:   "set --tenant T --url URL --kinds K1,K2",
		Short: "Create or change a tenant's webhook (a new one's secret is printed once)",
		Long: `Sets tenant T's webhook: Herald POSTs each event of the kinds listed to URL,
signed as Standard Webhooks sign (docs/api.md, "Status events"). Kinds: ` + strings.Join(webhook.Kinds, ", ") + `.
URL is https (http only for a loopback host when status_events.webhook_allow_loopback
is set); private and reserved addresses are refused. A new webhook's secret is
printed once; a change keeps it (herald tenants webhook rotate makes a new one).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd.Context(), func(ctx context.Context, tx pgx.Tx, loopback bool) error {
				u, err := webhook.CheckURL(url, loopback)
				if err != nil {
					return &ExitError{Code: 2, Err: fmt.Errorf("--url %w", err)}
				}
				var list []string
				if kinds != "" {
					list = strings.Split(kinds, ",")
				}
				ks, err := webhook.CheckKinds(list)
				if err != nil {
					return &ExitError{Code: 2, Err: fmt.Errorf("--kinds: %w", err)}
				}
				secret, err := store.PutWebhook(ctx, tx, tenant, u, ks, !disabled, webhook.NewSecret())
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "webhook of tenant %s: %s (%s)\n", tenant, u, strings.Join(ks, ", "))
				if secret != "" {
					fmt.Fprintf(w, "secret (shown once): %s\n", secret)
				}
				return nil
			})
		},
	}
	set.Flags().StringVar(&url, "url", "", "the webhook URL (https)")
	set.Flags().StringVar(&kinds, "kinds", "", "comma-separated event kinds")
	set.Flags().BoolVar(&disabled, "disabled", false, "keep the webhook but send it nothing")

	show := &cobra.Command{
		Use:   "show --tenant T",
		Short: "Show a tenant's webhook (never its secret) and what it still owes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd.Context(), func(ctx context.Context, tx pgx.Tx, _ bool) error {
				h, err := store.GetWebhook(ctx, tx, tenant)
				if err != nil {
					return noWebhook(err)
				}
				var owed, failed int64
				if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE webhook_due_at IS NOT NULL),
						count(*) FILTER (WHERE webhook_due_at IS NULL AND webhook_delivered_at IS NULL AND webhook_attempts > 0)
					FROM status_events WHERE tenant_id = $1`, tenant).Scan(&owed, &failed); err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "url:      %s\nkinds:    %s\nenabled:  %t\n", h.URL, strings.Join(h.Kinds, ", "), h.Enabled)
				if h.PreviousUntil != nil {
					fmt.Fprintf(w, "previous secret signs too until %s\n", h.PreviousUntil.UTC().Format(time.RFC3339))
				}
				fmt.Fprintf(w, "owed:     %d events (due or waiting for a retry)\ngiven up: %d events\n", owed, failed)
				return nil
			})
		},
	}

	var overlap time.Duration
	rotate := &cobra.Command{
		Use:   "rotate --tenant T [--overlap 24h]",
		Short: "Give a tenant's webhook a new secret (printed once); the old one signs too for --overlap",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if overlap < 0 || overlap > 7*24*time.Hour {
				return &ExitError{Code: 2, Err: fmt.Errorf("--overlap must be from 0s to 168h, got %s", overlap)}
			}
			return run(cmd.Context(), func(ctx context.Context, tx pgx.Tx, _ bool) error {
				secret := webhook.NewSecret()
				until, err := store.RotateWebhookSecret(ctx, tx, tenant, secret, overlap)
				if err != nil {
					return noWebhook(err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "secret (shown once): %s\nthe previous secret signs too until %s\n", secret, until.UTC().Format(time.RFC3339))
				return nil
			})
		},
	}
	rotate.Flags().DurationVar(&overlap, "overlap", 24*time.Hour, "how long the previous secret keeps signing")

	remove := &cobra.Command{
		Use:   "remove --tenant T",
		Short: "Remove a tenant's webhook; what it still owed is dropped",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd.Context(), func(ctx context.Context, tx pgx.Tx, _ bool) error {
				found, err := store.DeleteWebhook(ctx, tx, tenant)
				if err != nil {
					return err
				}
				if !found {
					return noWebhook(store.ErrNoWebhook)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "webhook of tenant %s removed\n", tenant)
				return nil
			})
		},
	}
	for _, c := range []*cobra.Command{set, show, rotate, remove} {
		c.Flags().StringVar(&tenant, "tenant", "", "tenant id")
		addConfigFlag(c, &cfg)
	}
	cmd.AddCommand(set, show, rotate, remove)
	return cmd
}
