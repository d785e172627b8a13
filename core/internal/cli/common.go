package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/secret"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
)

// defaultConfigPath is used when --config is not given: $HERALD_CONFIG, or
// no file (defaults and environment only).
func defaultConfigPath() string { return os.Getenv("HERALD_CONFIG") }

// addConfigFlag adds --config to cmd.
func addConfigFlag(cmd *cobra.Command, path *string) {
	cmd.Flags().StringVarP(path, "config", "c", defaultConfigPath(), "daemon config file (.hcl or .yaml); env HERALD_CONFIG")
}

// loadDaemon loads the daemon config, naming the file in errors.
func loadDaemon(path string) (config.Daemon, error) {
	d, err := config.LoadDaemon(path)
	if err != nil {
		return d, &ExitError{Code: 2, Err: err}
	}
	return d, nil
}

// connect opens a pool to the configured database, refusing one that
// carries no Herald schema (errNoSchema) before a command's first query
// would fail on a missing table.
func connect(ctx context.Context, d config.Daemon) (*pgxpool.Pool, error) {
	pool, err := store.NewPool(ctx, d.Database.URL, d.Database.MaxConns)
	if err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	var migrated bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&migrated); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if !migrated {
		pool.Close()
		return nil, &ExitError{Code: 2, Err: fmt.Errorf("%w (%s)", errNoSchema, secret.RedactURL(d.Database.URL))}
	}
	return pool, nil
}

// errNoSchema is what a command says when its database has no Herald
// schema: never migrated, or another database than the one meant.
var errNoSchema = errors.New("this database has no Herald schema: run herald migrate up, or check HERALD_DATABASE_URL")

// undefinedTable is PostgreSQL's SQLSTATE undefined_table.
const undefinedTable = "42P01"

// withSchemaHint turns an undefined_table error (a database migrated
// part of the way, or down again: connect lets it through) into
// errNoSchema naming the relation; other errors pass unchanged.
func withSchemaHint(err error) error {
	var pe *pgconn.PgError
	if err == nil || errors.Is(err, errNoSchema) || !errors.As(err, &pe) || pe.Code != undefinedTable {
		return err
	}
	return fmt.Errorf("%w (%s)", errNoSchema, pe.Message)
}

// newLoggerTo returns the daemon's logger, writing to w.
func newLoggerTo(d config.Daemon, w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "herald",
		Level:      hclog.LevelFromString(d.Log.Level),
		JSONFormat: d.Log.JSON,
		Output:     w,
	})
}
