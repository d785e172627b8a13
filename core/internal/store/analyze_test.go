package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestAnalyzeStaleRefreshesGrownTables: a table that grew past the
// threshold since its last analyze is analyzed, once; a second round finds
// nothing to do, and a concurrent daemon skips the round.
func TestAnalyzeStaleRefreshesGrownTables(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO recipients (tenant_id, user_id, user_type)
		SELECT 't', 'u' || i, 'CUSTOMER' FROM generate_series(1, 2000) i`); err != nil {
		t.Fatal(err)
	}
	var got []string
	testenv.Eventually(t, 20*time.Second, func() bool {
		tables, err := store.AnalyzeStale(ctx, db.Pool)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, tables...)
		return slices.Contains(got, "recipients")
	}, "recipients never analyzed after 2,000 inserts (analyzed: %v)", got)
	var reltuples float64
	if err := db.Pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE relname = 'recipients'`).Scan(&reltuples); err != nil {
		t.Fatal(err)
	}
	if reltuples != 2000 {
		t.Fatalf("statistics know of %.0f recipients, want 2000", reltuples)
	}
	if tables, err := store.AnalyzeStale(ctx, db.Pool); err != nil || slices.Contains(tables, "recipients") {
		t.Fatalf("second round analyzed %v (%v); recipients is fresh", tables, err)
	}

	// Another daemon holding the round: this one skips it.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(0x6865726c6461)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO groups (tenant_id, group_key, group_type)
		SELECT 't', 'g' || i, 'team' FROM generate_series(1, 2000) i`); err != nil {
		t.Fatal(err)
	}
	if tables, err := store.AnalyzeStale(ctx, db.Pool); err != nil || len(tables) != 0 {
		t.Fatalf("analyzed %v (%v) while another daemon held the round", tables, err)
	}
}
