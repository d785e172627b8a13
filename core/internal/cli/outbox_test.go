package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/secret"
	"github.com/heraldhq/herald/core/internal/source"
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

// herald doctor's source lines: ok with the backlog, warn with refused
// rows, FAIL for a database without the outbox and for one it cannot
// reach, without the URL's password.
func TestDoctorSources(t *testing.T) {
	ctx := context.Background()
	adminURL := testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL)
	mk := func(install bool) string {
		url, drop, err := store.CreateDatabase(ctx, adminURL, testenv.RandomName("herald_src_"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = drop(context.Background()) })
		if install {
			if _, err := InstallOutbox(ctx, url); err != nil {
				t.Fatal(err)
			}
		}
		return url
	}
	okURL, refusedURL, bareURL := mk(true), mk(true), mk(false)
	conn, err := pgx.Connect(ctx, refusedURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT herald_enqueue('acme', 'e1', 'T');
		UPDATE herald_outbox SET refused_at = now(), refusal = 'tenant_id: ...'`); err != nil {
		t.Fatal(err)
	}
	gone := strings.Replace(strings.Replace(okURL, "herald_src_", "herald_none_", 1), "herald:herald@", "herald:pw-0123456789@", 1)
	d := config.Daemon{Sources: map[string]source.Config{
		"a-ok":      {URL: okURL, Tenants: []string{"acme"}},
		"b-refused": {URL: refusedURL, Tenants: []string{"acme"}},
		"c-bare":    {URL: bareURL, Tenants: []string{"acme"}},
		"d-gone":    {URL: gone, Tenants: []string{"acme"}},
	}}
	dr := &doctor{timeout: 10 * time.Second, redact: secret.NewRedactor()}
	dr.redact.Add(d.SecretValues()...)
	dr.checkSources(ctx, d)
	var got []string
	for _, r := range dr.results {
		got = append(got, r.Status+" "+r.Check+": "+r.Detail)
	}
	all := strings.Join(got, "\n")
	if len(got) != 4 || !strings.HasPrefix(got[0], "ok source a-ok: outbox installed; 0 waiting") ||
		!strings.HasPrefix(got[1], "warn source b-refused: 1 row(s) refused") ||
		!strings.HasPrefix(got[2], checkFail+" source c-bare:") || !strings.Contains(got[2], "run herald outbox install") ||
		!strings.HasPrefix(got[3], checkFail+" source d-gone:") || strings.Contains(all, "pw-0123456789") {
		t.Fatalf("doctor's source lines:\n%s", all)
	}
}
