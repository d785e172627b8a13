package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/core/internal/origins"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/spf13/cobra"
)

// newTenantOriginsCmd is `herald tenants origins`: the browser origins a
// tenant's own front ends run on (package cors).
func newTenantOriginsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "origins", Short: "Manage the browser origins a tenant allows (CORS, live sessions, framing the hosted inbox)"}

	var acfg, atenant string
	var frame bool
	add := &cobra.Command{
		Use:   "add --tenant T [--frame] ORIGIN",
		Short: "Allow a browser origin to call the end-user API (and, with --frame, embed /inbox?tenant=T)",
		Long: fmt.Sprintf(`Allows ORIGIN (scheme://host[:port], e.g. https://app.example.com) for
tenant T: the public API answers it CORS on the inbox, live-ticket and
/v1/me endpoints for T's users' tokens, and the live gateway accepts its
WebSockets. With --frame it may also embed the hosted inbox page
(/inbox?tenant=T). The origin is stored as browsers send it (lower case,
punycode, no default port); https, or http for localhost. A tenant lists at
most %d origins. Adding a listed origin again sets its --frame.`, origins.MaxPerTenant),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if atenant == "" {
				return &ExitError{Code: 2, Err: errors.New("--tenant is required")}
			}
			if err := store.ValidID("tenant", atenant); err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("--tenant: %w", err)}
			}
			if _, err := origins.Normalize(args[0]); err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("ORIGIN %w", err)}
			}
			return withTx(cmd.Context(), acfg, func(ctx context.Context, q store.Querier) error {
				if err := tenantExists(ctx, q, atenant); err != nil {
					return err
				}
				n, err := store.AddOrigin(ctx, q, atenant, args[0], frame)
				if err != nil {
					return &ExitError{Code: 2, Err: err}
				}
				what := "calls"
				if frame {
					what = "calls and frames"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "origin %s allowed for tenant %s (%s)\n", n, atenant, what)
				return nil
			})
		},
	}
	add.Flags().StringVar(&atenant, "tenant", "", "tenant id")
	add.Flags().BoolVar(&frame, "frame", false, "also let the origin embed the hosted inbox page")
	addConfigFlag(add, &acfg)

	var rcfg, rtenant string
	remove := &cobra.Command{
		Use:   "remove --tenant T ORIGIN",
		Short: "Stop allowing a browser origin (within a few seconds on every daemon)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rtenant == "" {
				return &ExitError{Code: 2, Err: errors.New("--tenant is required")}
			}
			if _, err := origins.Normalize(args[0]); err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("ORIGIN %w", err)}
			}
			return withPool(cmd.Context(), rcfg, func(ctx context.Context, q store.Querier) error {
				found, err := store.RemoveOrigin(ctx, q, rtenant, args[0])
				if err != nil {
					return err
				}
				if !found {
					return &ExitError{Code: 2, Err: fmt.Errorf("ORIGIN: tenant %s does not list %s", rtenant, args[0])}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "origin %s no longer allowed for tenant %s\n", args[0], rtenant)
				return nil
			})
		},
	}
	remove.Flags().StringVar(&rtenant, "tenant", "", "tenant id")
	addConfigFlag(remove, &rcfg)

	var lcfg, ltenant string
	list := &cobra.Command{
		Use:   "list --tenant T",
		Short: "List the browser origins a tenant allows",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if ltenant == "" {
				return &ExitError{Code: 2, Err: errors.New("--tenant is required")}
			}
			return withPool(cmd.Context(), lcfg, func(ctx context.Context, q store.Querier) error {
				list, err := store.ListOrigins(ctx, q, ltenant)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "%-50s %-5s %s\n", "ORIGIN", "FRAME", "CREATED")
				for _, o := range list {
					fmt.Fprintf(w, "%-50s %-5t %s\n", o.Origin, o.Frame, o.CreatedAt.UTC().Format(time.DateTime))
				}
				return nil
			})
		},
	}
	list.Flags().StringVar(&ltenant, "tenant", "", "tenant id")
	addConfigFlag(list, &lcfg)
	cmd.AddCommand(add, remove, list)
	return cmd
}

// tenantExists is an exit-2 error naming --tenant when there is no such
// tenant.
func tenantExists(ctx context.Context, q store.Querier, tenant string) error {
	var ok bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE tenant_id = $1)`, tenant).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return &ExitError{Code: 2, Err: fmt.Errorf("--tenant: no tenant %q (herald tenants create %s)", tenant, tenant)}
	}
	return nil
}
