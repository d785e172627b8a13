package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/core/internal/secret"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
)

func init() {
	commands = append(commands, newDBCmd, newProjectsCmd, newAdminsCmd)
}

// newDBCmd is `herald db roles` and `herald db producer` (producers.go):
// the database roles row-level security is built on.
func newDBCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "db", Short: "Database roles for tenant isolation"}

	var cfgPath, adminURL, owner string
	var rotate bool
	roles := &cobra.Command{
		Use:   "roles [--admin-url URL] [--owner ROLE] [--rotate]",
		Short: "Create Herald's group roles and the API's and superadmin's login roles",
		Long: `Creates Herald's group roles (herald_api, herald_worker, herald_admin,
herald_producer) where they are missing and makes the role that owns
Herald's tables (the login role of database.url, or --owner) a member of
herald_api, herald_worker and herald_admin, so that the pipeline can run as
herald_worker.

It then creates the login roles the API's and the superadmin's pools log in
as: the user of database.api_url, a member of herald_api only, and the user
of database.admin_url, a member of herald_admin only (not superusers, no
BYPASSRLS, not the owner; an existing role that is any of these is refused).
Each gets the password its URL gives; or, when the URL gives none, the one
its passfile holds (the URL's passfile parameter, PGPASSFILE or ~/.pgpass);
or, when the URL names a passfile that holds none (or with --rotate), a new
random one written there (mode 0600; the file's owner is kept). Passwords
reach PostgreSQL as SCRAM verifiers only and are never printed.

Run it once per PostgreSQL cluster, before 'herald migrate up', and again
to rotate the logins' passwords, with a role that may create roles:
database.url when its role has CREATEROLE, or --admin-url (a superuser)
otherwise. The migrations create the group roles too when their role may,
never the login roles.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := loadDaemon(cfgPath)
			if err != nil {
				return err
			}
			target := adminURL
			if target == "" {
				target = d.Database.URL
			}
			if owner == "" {
				u, err := pgx.ParseConfig(d.Database.URL)
				if err != nil {
					return &ExitError{Code: 2, Err: fmt.Errorf("database.url: %w", err)}
				}
				owner = u.User
			}
			conn, err := pgx.Connect(cmd.Context(), target)
			if err != nil {
				return fmt.Errorf("connect to %s: %w", secret.RedactURL(target), err)
			}
			defer conn.Close(context.WithoutCancel(cmd.Context()))
			if err := store.EnsureRoles(cmd.Context(), conn, owner); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "roles ready: %v; %s is a member of herald_api, herald_worker and herald_admin\n", store.GroupRoles, owner)
			for _, l := range []poolLogin{{"database.api_url", d.Database.APIURL, store.RoleAPI}, {"database.admin_url", d.Database.AdminURL, store.RoleAdmin}} {
				if err := ensurePoolLogin(cmd.Context(), conn, l, owner, rotate, cmd.OutOrStdout()); err != nil {
					return err
				}
			}
			return nil
		},
	}
	roles.Flags().BoolVar(&rotate, "rotate", false, "give the logins new random passwords even when their passfile holds some")
	roles.Flags().StringVar(&adminURL, "admin-url", "", "connect as this (superuser) URL instead of database.url")
	roles.Flags().StringVar(&owner, "owner", "", "the role that owns Herald's tables (default: database.url's user)")
	addConfigFlag(roles, &cfgPath)
	cmd.AddCommand(roles)

	cmd.AddCommand(newDBProducerCmd())
	return cmd
}

func newProjectsCmd() *cobra.Command {
	var cfgPath, tenant, name string
	cmd := &cobra.Command{Use: "projects", Short: "Manage projects (an optional scope under a tenant)"}
	create := &cobra.Command{
		Use:   "create --tenant T PROJECT_ID [--name N]",
		Short: "Create a project of a tenant (no-op when it exists)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tenant == "" {
				return &ExitError{Code: 2, Err: errors.New("--tenant is required")}
			}
			return withTx(cmd.Context(), cfgPath, func(ctx context.Context, q store.Querier) error {
				if err := store.EnsureTenant(ctx, q, tenant, ""); err != nil {
					return &ExitError{Code: 2, Err: fmt.Errorf("--tenant: %w", err)}
				}
				if err := store.EnsureProject(ctx, q, tenant, args[0], name); err != nil {
					return &ExitError{Code: 2, Err: err}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "project %s/%s ready\n", tenant, args[0])
				return nil
			})
		},
	}
	create.Flags().StringVar(&tenant, "tenant", "", "tenant id")
	create.Flags().StringVar(&name, "name", "", "display name")
	addConfigFlag(create, &cfgPath)
	cmd.AddCommand(create)
	return cmd
}

func newAdminsCmd() *cobra.Command {
	var cfgPath, name string
	cmd := &cobra.Command{Use: "admins", Short: "Manage superadmin credentials (read-only access across tenants)"}
	create := &cobra.Command{
		Use:   "create [--name N]",
		Short: "Create a superadmin credential and print it once (only its hash is stored)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPool(cmd.Context(), cfgPath, func(ctx context.Context, q store.Querier) error {
				id, key, err := store.CreateAdmin(ctx, q, name)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "superadmin %s created; the credential below is shown once, store it now:\n", id)
				fmt.Fprintln(cmd.OutOrStdout(), key)
				return nil
			})
		},
	}
	create.Flags().StringVar(&name, "name", "", "who holds it")
	addConfigFlag(create, &cfgPath)
	var rcfg string
	revoke := &cobra.Command{
		Use:   "revoke ADMIN_ID",
		Short: "Revoke a superadmin credential (refused from the next request on)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPool(cmd.Context(), rcfg, func(ctx context.Context, q store.Querier) error {
				if err := store.RevokeAdmin(ctx, q, args[0]); err != nil {
					if errors.Is(err, store.ErrNotFound) {
						return &ExitError{Code: 2, Err: fmt.Errorf("ADMIN_ID: no unrevoked superadmin %q", args[0])}
					}
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "superadmin %s revoked\n", args[0])
				return nil
			})
		},
	}
	addConfigFlag(revoke, &rcfg)
	cmd.AddCommand(create, revoke)
	return cmd
}
