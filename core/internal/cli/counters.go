package cli

import (
	"context"
	"fmt"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/spf13/cobra"
)

func init() {
	commands = append(commands, newCountersCmd)
}

func newCountersCmd() *cobra.Command {
	var cfgPath, tenant string
	cmd := &cobra.Command{Use: "counters", Short: "Unread counters of the inbox"}
	repair := &cobra.Command{
		Use:   "repair [--tenant T]",
		Short: "Recompute unread counters from the notifications and report the drift fixed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if tenant != "" {
				if err := store.ValidID("tenant", tenant); err != nil {
					return &ExitError{Code: 2, Err: fmt.Errorf("--tenant: %w", err)}
				}
			}
			return withTx(cmd.Context(), cfgPath, func(ctx context.Context, q store.Querier) error {
				drift, err := store.RepairCounters(ctx, q, tenant)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				for _, d := range drift {
					fmt.Fprintf(w, "%s/%s/%s: %d -> %d\n", d.TenantID, d.ProjectID, d.UserID, d.Was, d.Is)
				}
				fmt.Fprintf(w, "%d counters fixed\n", len(drift))
				return nil
			})
		},
	}
	repair.Flags().StringVar(&tenant, "tenant", "", "only this tenant")
	addConfigFlag(repair, &cfgPath)
	cmd.AddCommand(repair)
	return cmd
}
