package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/spf13/cobra"
)

// newDBProducerCmd is `herald db producer`: a login role for a service
// that enqueues events through herald_enqueue, granted one tenant or
// several.
func newDBProducerCmd() *cobra.Command {
	var cfgPath, password string
	var tenants []string
	cmd := &cobra.Command{
		Use:   "producer --tenant T [--tenant T2 ...] ROLE [--password P]",
		Short: "Create a login role for a service that enqueues events, granted the given tenants",
		Long: `Creates (or updates) the login role ROLE as a member of herald_producer and
grants it exactly the tenants named by --tenant (repeat the flag, or
separate them with commas): a tenant the role had before and that is not
named is taken away. Connected as ROLE, a service calls
herald_enqueue(tenant_id => ..., ...) inside its own transactions for any
of those tenants (sdk/producer does) and reads their events back; an event
for any other tenant is refused (SQLSTATE 42501), and the role may not
write any table directly. The password comes from --password or
HERALD_PRODUCER_PASSWORD (none: the role's password is left as it is).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var list []string
			for _, t := range tenants {
				for _, one := range strings.Split(t, ",") {
					if one = strings.TrimSpace(one); one != "" && !slices.Contains(list, one) {
						list = append(list, one)
					}
				}
			}
			if len(list) == 0 {
				return &ExitError{Code: 2, Err: errors.New("--tenant is required: the tenant (or tenants, --tenant A --tenant B) the role may enqueue for")}
			}
			if password == "" {
				password = os.Getenv("HERALD_PRODUCER_PASSWORD")
			}
			return withTx(cmd.Context(), cfgPath, func(ctx context.Context, q store.Querier) error {
				for _, t := range list {
					if err := store.EnsureTenant(ctx, q, t, ""); err != nil {
						return &ExitError{Code: 2, Err: fmt.Errorf("--tenant: %w", err)}
					}
				}
				if err := store.EnsureProducerRole(ctx, q, args[0], password, list); err != nil {
					return err
				}
				granted, err := store.ProducerTenants(ctx, q, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "producer role %s may enqueue events for tenants %s (through herald_enqueue)\n", args[0], strings.Join(granted, ", "))
				return nil
			})
		},
	}
	cmd.Flags().StringSliceVar(&tenants, "tenant", nil, "a tenant the role may enqueue for (repeat for several)")
	cmd.Flags().StringVar(&password, "password", "", "login password (env HERALD_PRODUCER_PASSWORD)")
	addConfigFlag(cmd, &cfgPath)
	return cmd
}
