package store

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/core/internal/secret"
)

// CreateDatabase creates the database name on the server of adminURL,
// connecting as adminURL's role (which must be allowed to create
// databases), and returns the URL of the new database (adminURL with its
// path replaced) and a function that drops it, closing its remaining
// connections by force. Tests (testenv.Postgres) and the benchmark's
// scratch databases both make theirs here.
func CreateDatabase(ctx context.Context, adminURL, name string) (dbURL string, drop func(context.Context) error, err error) {
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("create database: parse admin url %s: %w", secret.RedactURL(adminURL), err)
	}
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("create database: connect %s: %w", secret.RedactURL(adminURL), err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	u.Path = "/" + name
	drop = func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			return fmt.Errorf("drop database %s: connect: %w", name, err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	return u.String(), drop, nil
}
