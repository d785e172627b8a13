package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sql/outbox"
)

// herald outbox install creates the outbox in a service's database, again
// (an upgrade in place), from a secret file; a missing or bad URL is an
// exit 2 naming --database-url without its password; herald outbox sql
// prints the file it runs.
func TestOutboxInstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, drop, err := store.CreateDatabase(ctx, testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL), testenv.RandomName("herald_src_"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = drop(context.Background()) })
	secretFile := filepath.Join(t.TempDir(), "orders.url")
	if err := os.WriteFile(secretFile, []byte(url+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{url, "file:" + secretFile} {
		out, errOut, code := runHerald(t, "outbox", "install", "--database-url", arg)
		if code != 0 || !strings.Contains(out, "outbox version 1 installed") {
			t.Fatalf("install %s: exit %d, %q %q", arg, code, out, errOut)
		}
	}
	out, _, code := runHerald(t, "outbox", "sql")
	if code != 0 || out != outbox.InstallSQL {
		t.Fatalf("outbox sql: exit %d, %d bytes", code, len(out))
	}
	if _, errOut, code := runHerald(t, "outbox", "install"); code != 2 || !strings.Contains(errOut, "--database-url is required") {
		t.Fatalf("without a URL: exit %d, %q", code, errOut)
	}
	bad := strings.Replace(url, "herald_src_", "herald_none_", 1)
	bad = strings.Replace(bad, "herald:herald@", "herald:pw-0123456789@", 1)
	_, errOut, code := runHerald(t, "outbox", "install", "--database-url", bad)
	if code != 2 || !strings.Contains(errOut, "--database-url") || strings.Contains(errOut, "pw-0123456789") {
		t.Fatalf("unreachable database: exit %d, %q", code, errOut)
	}
}
