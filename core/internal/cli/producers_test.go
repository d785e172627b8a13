package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// `herald db producer` grants exactly the tenants named (a flag each, or a
// list), creating them, and says which the role now has; without --tenant
// it names the flag.
func TestDBProducerGrantsTheTenantsNamed(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	cfg := filepath.Join(t.TempDir(), "herald.hcl")
	if err := os.WriteFile(cfg, []byte("database { url = \""+db.URL+"\" }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	role := "svc_" + strings.TrimPrefix(db.Name, "herald_test_")
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), `DELETE FROM herald_producer_roles WHERE role_name = $1`, role)
		_, _ = db.Pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	out, errOut, code := runHerald(t, "db", "producer", "--config", cfg, "--tenant", "acme", "--tenant", "globex,initech", role)
	if code != 0 || !strings.Contains(out, "producer role "+role+" may enqueue events for tenants acme, globex, initech") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = runHerald(t, "db", "producer", "--config", cfg, "--tenant", "globex", role)
	if code != 0 || !strings.Contains(out, "tenants globex (") {
		t.Fatalf("regrant: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got, err := store.ProducerTenants(ctx, db.Pool, role); err != nil || strings.Join(got, ",") != "globex" {
		t.Fatalf("tenants %v, %v; want only globex", got, err)
	}
	_, errOut, code = runHerald(t, "db", "producer", "--config", cfg, role)
	if code != 2 || !strings.Contains(errOut, "--tenant is required") {
		t.Fatalf("without --tenant: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = runHerald(t, "db", "producer", "--config", cfg, "--tenant", "no/slash", role)
	if code != 2 || !strings.Contains(errOut, "--tenant: tenant id") {
		t.Fatalf("a malformed tenant: exit %d, stderr %q", code, errOut)
	}
}
