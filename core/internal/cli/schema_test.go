package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestCommandsOnADatabaseWithoutHeraldSchema: pointed at an empty
// database (HERALD_DATABASE_URL naming the wrong one, or migrate up not
// run yet), the commands that read Herald's tables say so and what to do,
// instead of PostgreSQL's `relation "token_keys" does not exist`.
func TestCommandsOnADatabaseWithoutHeraldSchema(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adminURL := testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL)
	dbURL, drop, err := store.CreateDatabase(ctx, adminURL, testenv.RandomName("herald_test_empty_"))
	if err != nil {
		if testing.Short() {
			t.Skipf("PostgreSQL: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := drop(context.Background()); err != nil {
			t.Log(err)
		}
	})
	cfg := filepath.Join(t.TempDir(), "herald.hcl")
	if err := os.WriteFile(cfg, []byte("database { url = \""+dbURL+"\" }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const want = "this database has no Herald schema: run herald migrate up, or check HERALD_DATABASE_URL"
	for name, args := range map[string][]string{
		"tokens keys list": {"tokens", "keys", "list", "--tenant", "demo"},
		"apikeys list":     {"apikeys", "list", "--tenant", "demo"},
		"retention status": {"retention", "status"},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			root := NewRoot()
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(append(args, "--config", cfg))
			err := root.ExecuteContext(ctx)
			if !errors.Is(err, errNoSchema) || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v, want %q", err, want)
			}
			if strings.Contains(err.Error(), "herald:herald@") {
				t.Errorf("the error shows the database password: %v", err)
			}
			var ee *ExitError
			if !errors.As(err, &ee) || ee.Code != 2 {
				t.Errorf("exit error %+v, want code 2", ee)
			}
		})
	}

	// A query that reaches a missing table anyway (a schema migrated down
	// again: the version table is there) gets the same words in Main.
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_, qerr := conn.Exec(ctx, `SELECT 1 FROM token_keys`)
	if qerr == nil {
		t.Fatal("token_keys exists in an empty database")
	}
	got := withSchemaHint(qerr)
	if !errors.Is(got, errNoSchema) || !strings.Contains(got.Error(), want) || !strings.Contains(got.Error(), `"token_keys"`) {
		t.Errorf("withSchemaHint(%v) = %v, want %q naming token_keys", qerr, got, want)
	}
	if other := errors.New("boom"); withSchemaHint(other) != other {
		t.Error("withSchemaHint changed an unrelated error")
	}
}
