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
