// Package store is Herald's PostgreSQL layer: migrations, the directory
// loader and the queries of the outbox, relay, publisher and listeners.
package store

import (
	"context"
	"database/sql"
	"fmt"
	"io"

	"github.com/heraldhq/herald/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver for goose
	"github.com/pressly/goose/v3"
)

// Querier is what queries need: a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var _ Querier = (*pgxpool.Pool)(nil)

func newProvider(db *sql.DB) (*goose.Provider, error) {
	return goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
}

// withProvider opens databaseURL for the length of fn, with the migration
// provider over it.
func withProvider(databaseURL string, fn func(p *goose.Provider) error) error {
	db, err := sql.Open("pgx", databaseURL)
	if err != nil {
		return fmt.Errorf("migrate: open: %w", err)
	}
	defer db.Close()
	p, err := newProvider(db)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return fn(p)
}

// Migrate runs a migration command ("up", "down" or "status") against
// databaseURL, printing status lines to w when w is not nil.
func Migrate(ctx context.Context, databaseURL, command string) error {
	return MigrateTo(ctx, databaseURL, command, nil)
}

// MigrateTo is Migrate with an output writer for "status" and "up".
func MigrateTo(ctx context.Context, databaseURL, command string, w io.Writer) error {
	return withProvider(databaseURL, func(p *goose.Provider) error { return migrateWith(ctx, p, command, w) })
}

func migrateWith(ctx context.Context, p *goose.Provider, command string, w io.Writer) error {
	switch command {
	case "up":
		return migrateUp(ctx, p, 0, w)
	case "down":
		if _, err := p.Down(ctx); err != nil {
			return fmt.Errorf("migrate down: %w", err)
		}
	case "status":
		st, err := p.Status(ctx)
		if err != nil {
			return fmt.Errorf("migrate status: %w", err)
		}
		if w != nil {
			for _, s := range st {
				applied := "pending"
				if s.State == goose.StateApplied {
					applied = "applied " + s.AppliedAt.Format("2006-01-02 15:04:05")
				}
				fmt.Fprintf(w, "%-40s %s\n", s.Source.Path, applied)
			}
		}
	default:
		return fmt.Errorf("migrate: unknown command %q (want up, down or status)", command)
	}
	return nil
}

// MigrateUpTo applies the migrations up to version (every one when version
// is 0) to databaseURL. The benchmark uses it to measure an older schema
// with the same binary.
func MigrateUpTo(ctx context.Context, databaseURL string, version int64) error {
	return MigrateUp(ctx, databaseURL, version, nil)
}

// MigrateUp applies the migrations up to version (every one when version
// is 0) to databaseURL, printing each one applied and its duration to w
// when w is not nil (`herald migrate up --to`: an operator can apply a long
// migration on its own, in a window of its choosing).
func MigrateUp(ctx context.Context, databaseURL string, version int64, w io.Writer) error {
	return withProvider(databaseURL, func(p *goose.Provider) error { return migrateUp(ctx, p, version, w) })
}

func migrateUp(ctx context.Context, p *goose.Provider, version int64, w io.Writer) error {
	var latest int64
	for _, s := range p.ListSources() {
		latest = max(latest, s.Version)
	}
	if version < 0 || version > latest {
		return fmt.Errorf("migrate up: --to %d: no such migration (this herald has 1 to %d)", version, latest)
	}
	var res []*goose.MigrationResult
	var err error
	if version == 0 {
		res, err = p.Up(ctx)
	} else {
		res, err = p.UpTo(ctx, version)
	}
	if err != nil {
		if version > 0 {
			return fmt.Errorf("migrate up to %d: %w", version, err)
		}
		return fmt.Errorf("migrate up: %w", err)
	}
	if w != nil {
		for _, r := range res {
			fmt.Fprintf(w, "applied %s (%s)\n", r.Source.Path, r.Duration)
		}
		if len(res) == 0 {
			fmt.Fprintln(w, "no migrations to apply")
		}
	}
	return nil
}

// NewPool opens a pool to databaseURL with maxConns connections, as the
// URL's login role. Sessions name themselves "herald" and the server ends a
// transaction left idle for a minute (a stuck or vanished client must not
// hold row locks forever). NewPoolWith also sets a role.
func NewPool(ctx context.Context, databaseURL string, maxConns int) (*pgxpool.Pool, error) {
	return NewPoolWith(ctx, databaseURL, PoolOptions{MaxConns: maxConns})
}

// MigrationLevel reports the highest migration version applied to the
// database at databaseURL and the highest one embedded in this binary
// (`herald doctor`). A database goose never touched is at version 0.
func MigrationLevel(ctx context.Context, databaseURL string) (applied, latest int64, err error) {
	db, err := sql.Open("pgx", databaseURL)
	if err != nil {
		return 0, 0, fmt.Errorf("migrate: open: %w", err)
	}
	defer db.Close()
	p, err := newProvider(db)
	if err != nil {
		return 0, 0, fmt.Errorf("migrate: %w", err)
	}
	for _, s := range p.ListSources() {
		latest = max(latest, s.Version)
	}
	var table sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('goose_db_version')::text`).Scan(&table); err != nil {
		return 0, latest, fmt.Errorf("migrate: %w", err)
	}
	if !table.Valid {
		return 0, latest, nil
	}
	applied, err = p.GetDBVersion(ctx)
	if err != nil {
		return 0, latest, fmt.Errorf("migrate: version: %w", err)
	}
	return applied, latest, nil
}
