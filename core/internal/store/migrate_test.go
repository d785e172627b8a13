package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

func TestMigrateStatusAfterUp(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	var out strings.Builder
	if err := store.MigrateTo(context.Background(), db.URL, "status", &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "0001_create_core_tables.sql") || strings.Contains(out.String(), "pending") {
		t.Fatalf("status after up:\n%s", out.String())
	}
	var n int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM deliveries").Scan(&n); err != nil {
		t.Fatalf("deliveries table: %v", err)
	}
}

// TestMigrateUpTo applies the migrations in two steps, as an operator
// staging a long migration would (`herald migrate up --to`), and refuses
// a version this binary does not have.
func TestMigrateUpTo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.PostgresAt(t, 16).URL
	var out strings.Builder
	if err := store.MigrateUp(ctx, url, 17, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "applied 0017_keep_hot_tables_flat.sql (") || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("up --to 17 from 16 printed:\n%s", out.String())
	}
	applied, latest, err := store.MigrationLevel(ctx, url)
	if err != nil || applied != 17 {
		t.Fatalf("after up --to 17 the database is at %d (err %v)", applied, err)
	}
	err = store.MigrateUp(ctx, url, latest+1, nil)
	if err == nil || !strings.Contains(err.Error(), "no such migration") {
		t.Fatalf("up --to %d: %v", latest+1, err)
	}
	out.Reset()
	if err := store.MigrateUp(ctx, url, 0, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "applied 0018_") || strings.Contains(out.String(), "0017_") {
		t.Fatalf("up after --to 17 printed:\n%s", out.String())
	}
	if applied, _, err := store.MigrationLevel(ctx, url); err != nil || applied != latest {
		t.Fatalf("after up the database is at %d, want %d (err %v)", applied, latest, err)
	}
}
