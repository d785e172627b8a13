package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/core/internal/secret"
	"github.com/heraldhq/herald/sql/outbox"
)

func init() { commands = append(commands, newOutboxCmd) }

// newOutboxCmd is `herald outbox`: the outbox in a service's own
// database, which a `source` block of the daemon forwards from.
func newOutboxCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "Install the outbox in a service's own PostgreSQL database",
	}
	cmd.AddCommand(newOutboxInstallCmd(), newOutboxSQLCmd())
	return cmd
}

func newOutboxInstallCmd() *cobra.Command {
	var dbURL string
	cmd := &cobra.Command{
		Use:   "install --database-url URL",
		Short: "Create or upgrade herald_outbox and herald_enqueue in a service's database",
		Long: `Runs sql/outbox/install.sql (embedded; ` + "`herald outbox sql`" + ` prints it) in the
PostgreSQL database of --database-url (or HERALD_OUTBOX_DATABASE_URL; a
secret reference such as file:/run/secrets/orders-db.url is read): the
table herald_outbox, the function herald_enqueue with the signature,
checks and messages of Herald's own, and a NOTIFY on insert. It is one
transaction, installs what is missing and upgrades what an older Herald
installed; it refuses a Herald database and a newer outbox. The login
becomes the objects' owner; grant EXECUTE on herald_enqueue to the
service's login. Then name the database in a source block of the daemon
file (docs/producers.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dbURL == "" {
				dbURL = os.Getenv("HERALD_OUTBOX_DATABASE_URL")
			}
			if dbURL == "" {
				return &ExitError{Code: 2, Err: errors.New("--database-url is required: the service's database to install the outbox in")}
			}
			u, _, err := secret.Resolve(dbURL, ".")
			if err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("--database-url: %w", err)}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			v, err := InstallOutbox(ctx, u)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "outbox version %d installed: herald_outbox, herald_enqueue\n", v)
			return nil
		},
	}
	cmd.Flags().StringVar(&dbURL, "database-url", "", "the service's PostgreSQL `URL` (a secret reference is read)")
	return cmd
}

// InstallOutbox runs install.sql in the database of dbURL and returns the
// version it installed.
func InstallOutbox(ctx context.Context, dbURL string) (int, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, &ExitError{Code: 2, Err: fmt.Errorf("--database-url: %w", redactURLErr(err, dbURL))}
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// The simple protocol runs the file's statements (and its BEGIN and
	// COMMIT) as one script.
	if _, err := conn.PgConn().Exec(ctx, outbox.InstallSQL).ReadAll(); err != nil {
		return 0, fmt.Errorf("outbox install: %w", err)
	}
	var v int
	if err := conn.QueryRow(ctx, `SELECT version FROM public.herald_outbox_version`).Scan(&v); err != nil {
		return 0, fmt.Errorf("outbox install: %w", err)
	}
	return v, nil
}

// redactURLErr keeps the URL's password out of err's text.
func redactURLErr(err error, u string) error {
	if p := secret.URLPassword(u); p != "" {
		return errors.New(strings.ReplaceAll(err.Error(), p, "xxxxx"))
	}
	return err
}

func newOutboxSQLCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "sql",
		Short: "Print the SQL herald outbox install runs (for a team's own migrations)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), outbox.InstallSQL)
			return err
		},
	}
}
