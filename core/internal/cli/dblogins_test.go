package cli

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// TestDBRolesCreatesPoolLogins runs `herald db roles` against a real
// database: it creates the users of database.api_url and
// database.admin_url as members of herald_api and herald_admin only, with
// generated passwords that go to the URLs' passfile (0600) and nowhere
// else; a second run keeps them, --rotate replaces them, and a URL naming
// the owner or a role that sees more is refused.
func TestDBRolesCreatesPoolLogins(t *testing.T) {
	// A private cluster: it checks passwords (scram-sha-256 over TCP) and
	// logs every statement, so that the test sees what reaches its log.
	pg := testenv.PrivatePostgres(t, testenv.PGOptions{})
	ctx := context.Background()
	ownerPass := testenv.RandomName("owner-")
	su, err := pgx.Connect(ctx, pg.SuperuserDSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE ROLE herald LOGIN CREATEROLE PASSWORD '" + ownerPass + "'",
		"CREATE DATABASE herald OWNER herald",
		"ALTER SYSTEM SET log_statement = 'all'",
		"SELECT pg_reload_conf()",
	} {
		if _, err := su.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	su.Close(ctx)
	dbURL := fmt.Sprintf("postgres://herald:%s@127.0.0.1:%d/herald?sslmode=disable", ownerPass, pg.Port)
	apiUser, adminUser, wide := "herald_api_login", "herald_admin_login", "herald_wide_login"
	dir := t.TempDir()
	passfile := filepath.Join(dir, "db-logins.pgpass")
	loginURL := func(user string) string {
		u, _ := url.Parse(dbURL)
		u.User = url.User(user)
		q := u.Query()
		q.Set("passfile", passfile)
		u.RawQuery = q.Encode()
		return u.String()
	}
	cfg := filepath.Join(dir, "herald.hcl")
	writeCfg := func(api, admin string) {
		body := "database {\n  url = \"" + dbURL + "\"\n  api_url = \"" + api + "\"\n  admin_url = \"" + admin + "\"\n}\n"
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg(loginURL(apiUser), loginURL(adminUser))
	if out, stderr, code := runHerald(t, "db", "roles", "--config", cfg); code != 0 {
		t.Fatalf("db roles: exit %d\n%s%s", code, out, stderr)
	}
	if out, stderr, code := runHerald(t, "migrate", "up", "--config", cfg); code != 0 {
		t.Fatalf("migrate up: exit %d\n%s%s", code, out, stderr)
	}
	// Again, now that the tables exist: the checks know their owner.
	if err := os.Remove(passfile); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runHerald(t, "db", "roles", "--config", cfg)
	if code != 0 {
		t.Fatalf("db roles: exit %d\n%s%s", code, out, stderr)
	}
	for _, want := range []string{"login " + apiUser + " (database.api_url): a member of herald_api only; a new password, written to " + passfile,
		"login " + adminUser + " (database.admin_url): a member of herald_admin only; a new password, written to " + passfile} {
		if !strings.Contains(out, want) {
			t.Errorf("db roles does not say %q:\n%s", want, out)
		}
	}
	fi, err := os.Stat(passfile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("passfile mode %v, want 0600", fi.Mode().Perm())
	}
	first, err := os.ReadFile(passfile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(first)), "\n")
	if len(lines) != 2 {
		t.Fatalf("passfile holds %d lines, want 2", len(lines))
	}
	for _, l := range lines {
		f := strings.Split(l, ":")
		if len(f) != 5 || f[0] != "*" || len(f[4]) < 40 {
			t.Fatalf("passfile line %q: want *:*:*:user:password with a long password", strings.Join(f[:min(4, len(f))], ":")+":...")
		}
		if strings.Contains(out+stderr, f[4]) {
			t.Errorf("db roles printed a password")
		}
	}

	// The logins work with the passfile's passwords, and the daemon's
	// checks accept them.
	for user, group := range map[string]string{apiUser: store.RoleAPI, adminUser: store.RoleAdmin} {
		pool, err := store.NewPoolWith(ctx, loginURL(user), store.PoolOptions{MaxConns: 1, Role: group})
		if err != nil {
			t.Fatal(err)
		}
		err = store.CheckLogin(ctx, pool, group, "test")
		ri, ierr := store.InspectRole(ctx, pool)
		pool.Close()
		if err != nil || ierr != nil {
			t.Fatalf("%s: %v %v", user, err, ierr)
		}
		if ri.Login != user || ri.LoginSuperuser || ri.LoginBypassRLS || ri.LoginOwnsTables {
			t.Errorf("%s: %+v", user, ri)
		}
		for _, other := range store.GroupRoles {
			if other != group && ri.LoginMember[other] {
				t.Errorf("%s is a member of %s", user, other)
			}
		}
	}

	// A second run keeps the passwords; --rotate replaces them, and the
	// old ones stop working.
	if out, stderr, code := runHerald(t, "db", "roles", "--config", cfg); code != 0 || !strings.Contains(out, "the password the passfile holds") {
		t.Fatalf("second db roles: exit %d\n%s%s", code, out, stderr)
	}
	if again, _ := os.ReadFile(passfile); string(again) != string(first) {
		t.Error("a second run changed the passfile")
	}
	if out, stderr, code := runHerald(t, "db", "roles", "--config", cfg, "--rotate"); code != 0 {
		t.Fatalf("db roles --rotate: exit %d\n%s%s", code, out, stderr)
	}
	rotated, _ := os.ReadFile(passfile)
	if string(rotated) == string(first) || len(strings.Split(strings.TrimSpace(string(rotated)), "\n")) != 2 {
		t.Fatalf("--rotate: passfile %d bytes, changed %v", len(rotated), string(rotated) != string(first))
	}
	oldPass := strings.Split(lines[0], ":")[4]
	oldUser := strings.Split(lines[0], ":")[3]
	u, _ := url.Parse(dbURL)
	u.User = url.UserPassword(oldUser, oldPass)
	if c, err := pgx.Connect(ctx, u.String()); err == nil {
		c.Close(ctx)
		t.Error("the password before --rotate still logs in")
	}
	// No password reached the server's statement log (log_statement =
	// all): they went as SCRAM verifiers.
	serverLog, err := os.ReadFile(filepath.Join(pg.Dir, "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(serverLog), "ALTER ROLE") {
		t.Fatalf("the server's log has no ALTER ROLE: is log_statement on?\n%s", serverLog)
	}
	for _, text := range []string{string(first), string(rotated)} {
		for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
			if p := strings.Split(l, ":")[4]; strings.Contains(string(serverLog), p) {
				t.Errorf("a login's password is in the server's log")
			}
		}
	}

	// Refused: the owner as a pool's login, and a role that may become
	// herald_worker.
	owner, _ := url.Parse(dbURL)
	writeCfg(dbURL, loginURL(adminUser))
	if out, stderr, code := runHerald(t, "db", "roles", "--config", cfg); code != 2 || !strings.Contains(stderr, "database.api_url logs in as \""+owner.User.Username()+"\", the tables' owner") {
		t.Errorf("the owner as api_url: exit %d\n%s%s", code, out, stderr)
	}
	ownerConn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer ownerConn.Close(ctx)
	if _, err := ownerConn.Exec(ctx, "CREATE ROLE "+wide+" LOGIN IN ROLE herald_worker"); err != nil {
		t.Fatal(err)
	}
	writeCfg(loginURL(wide), loginURL(adminUser))
	if out, stderr, code := runHerald(t, "db", "roles", "--config", cfg); code == 0 || !strings.Contains(stderr, "already exists and is a member of herald_worker") {
		t.Errorf("a member of herald_worker as api_url: exit %d\n%s%s", code, out, stderr)
	}
}

// TestWritePassfileEntryKeepsOtherLines: the entry of the user replaces
// its earlier wildcard line and goes first; other lines stay.
func TestWritePassfileEntryKeepsOtherLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pgpass")
	if err := os.WriteFile(p, []byte("db:5432:herald:other:x\n*:*:*:me:old\n# comment"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writePassfileEntry(p, "me", "n:e\\w"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if want := "*:*:*:me:n\\:e\\\\w\ndb:5432:herald:other:x\n# comment\n"; string(b) != want {
		t.Errorf("passfile = %q, want %q", b, want)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
}

// TestTokensIssueCarriesTheDeploymentAudience: `herald tokens issue` signs
// for the audience the daemon checks: the deployment's own when
// auth.audience is empty, the configured one otherwise.
func TestTokensIssueCarriesTheDeploymentAudience(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	if err := store.EnsureTenant(ctx, db.Pool, "demo", ""); err != nil {
		t.Fatal(err)
	}
	if err := store.AddTokenKey(ctx, db.Pool, store.TokenKey{TenantID: "demo", Kid: "k1", Alg: "HS256", Issuer: "https://demo.example",
		Key: []byte(strings.Repeat("k", 32))}); err != nil {
		t.Fatal(err)
	}
	own, err := store.DeploymentAudience(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for body, want := range map[string]string{"": own, "auth { audience = \"https://inbox.example\" }\n": "https://inbox.example"} {
		cfg := filepath.Join(dir, "herald.hcl")
		if err := os.WriteFile(cfg, []byte("database { url = \""+db.URL+"\" }\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
		out, stderr, code := runHerald(t, "tokens", "issue", "--config", cfg, "--tenant", "demo", "--kid", "k1", "--user", "u1", "--ttl", "1m")
		if code != 0 {
			t.Fatalf("tokens issue: exit %d\n%s%s", code, out, stderr)
		}
		var c jwt.RegisteredClaims
		if _, _, err := jwt.NewParser().ParseUnverified(strings.TrimSpace(out), &c); err != nil {
			t.Fatal(err)
		}
		if len(c.Audience) != 1 || c.Audience[0] != want {
			t.Errorf("config %q: aud %q, want %q", body, c.Audience, want)
		}
	}
}
