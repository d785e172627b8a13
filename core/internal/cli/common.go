package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/store"
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

// connect opens a pool to the configured database.
func connect(ctx context.Context, d config.Daemon) (*pgxpool.Pool, error) {
	pool, err := store.NewPool(ctx, d.Database.URL, d.Database.MaxConns)
	if err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return pool, nil
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
