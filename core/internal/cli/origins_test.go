package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// `herald tenants origins add|remove|list` keeps a tenant's list in the
// browser's form, refuses what is not an origin naming the argument or
// flag, and stops at the cap the database keeps.
func TestTenantOrigins(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	cfg := filepath.Join(t.TempDir(), "herald.hcl")
	if err := os.WriteFile(cfg, []byte("database { url = \""+db.URL+"\" }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"acme", "globex"} {
		if err := store.EnsureTenant(ctx, db.Pool, id, ""); err != nil {
			t.Fatal(err)
		}
	}
	run := func(wantCode int, wantOut string, args ...string) {
		t.Helper()
		out, errOut, code := runHerald(t, append([]string{"tenants", "origins"}, append(args, "--config", cfg)...)...)
		if code != wantCode || !strings.Contains(out+errOut, wantOut) {
			t.Fatalf("herald tenants origins %v: exit %d, stdout %q, stderr %q; want exit %d saying %q", args, code, out, errOut, wantCode, wantOut)
		}
	}
	run(0, "origin https://xn--bcher-kva.example:8443 allowed for tenant acme (calls)", "add", "--tenant", "acme", "HTTPS://Bücher.example:8443")
	run(0, "origin https://app.example.com allowed for tenant acme (calls and frames)", "add", "--tenant", "acme", "--frame", "https://app.example.com:443")
	run(0, "origin https://app.example.com allowed for tenant acme (calls)", "add", "--tenant", "acme", "https://app.example.com")
	run(2, "ORIGIN \"https://app.example.com/\" has a path", "add", "--tenant", "acme", "https://app.example.com/")
	run(2, "ORIGIN \"null\" is the origin of sandboxed frames", "add", "--tenant", "acme", "null")
	run(2, "has a wildcard", "add", "--tenant", "acme", "https://*.example.com")
	run(2, "http is allowed for localhost only", "add", "--tenant", "acme", "http://app.example.com")
	run(2, "--tenant: no tenant \"initech\"", "add", "--tenant", "initech", "https://app.example.com")
	run(2, "--tenant is required", "add", "https://app.example.com")
	run(0, "https://app.example.com", "list", "--tenant", "acme")
	got, err := store.ListOrigins(ctx, db.Pool, "acme")
	if err != nil || len(got) != 2 || got[0].Origin != "https://app.example.com" || got[0].Frame || got[1].Origin != "https://xn--bcher-kva.example:8443" {
		t.Fatalf("acme lists %+v, %v", got, err)
	}
	if other, _ := store.ListOrigins(ctx, db.Pool, "globex"); len(other) != 0 {
		t.Fatalf("globex lists %+v", other)
	}
	run(0, "no longer allowed", "remove", "--tenant", "acme", "https://app.example.com")
	run(2, "ORIGIN: tenant acme does not list https://app.example.com", "remove", "--tenant", "acme", "https://app.example.com")
	for i := range 49 {
		if _, err := store.AddOrigin(ctx, db.Pool, "acme", fmt.Sprintf("https://a%d.example.com", i), false); err != nil {
			t.Fatalf("origin %d: %v", i, err)
		}
	}
	run(2, "a tenant lists at most 50 origins", "add", "--tenant", "acme", "https://one-too-many.example.com")
}
