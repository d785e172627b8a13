// Package testenv gives tests real servers and real plugin binaries: a fresh
// PostgreSQL database with migrations applied, an isolated RabbitMQ vhost,
// the plugin binaries built once per test process, and Eventually for waiting
// on conditions with a deadline.
//
// Servers are found through the same environment variables the scripts use
// (HERALD_PG_ADMIN_URL, HERALD_AMQP_URL). When a server does not answer the
// test fails, unless -short is set, in which case it is skipped.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Default server addresses, the same as scripts/servers.sh uses.
const (
	DefaultPGAdminURL = "postgres://herald:herald@127.0.0.1:5432/herald?sslmode=disable"
	DefaultAMQPURL    = "amqp://guest:guest@127.0.0.1:5672/"
)

// Env returns the environment variable key, or def when it is unset.
func Env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// RandomName returns prefix followed by 12 random hex characters.
func RandomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func unavailable(t testing.TB, what string, err error) {
	t.Helper()
	if testing.Short() {
		t.Skipf("%s unavailable in -short mode: %v", what, err)
	}
	t.Fatalf("%s unavailable (start it with scripts/servers.sh up): %v", what, err)
}

// DB is a fresh database for one test.
type DB struct {
	// URL connects to the database.
	URL string
	// Name is the database name.
	Name string
	// Pool is connected to the database.
	Pool *pgxpool.Pool
	// APIURL and AdminURL connect to the database as the test logins of
	// the API's and the superadmin's pools (database.api_url and
	// database.admin_url): roles that are only members of herald_api and
	// of herald_admin, as `herald db roles` makes them.
	APIURL, AdminURL string
}

// The test logins (cluster-wide, as roles are): what `herald db roles`
// makes from database.api_url and database.admin_url. Their password is a
// test fixture, not a secret.
const (
	TestAPILogin      = "herald_test_api_login"
	TestAdminLogin    = "herald_test_admin_login"
	testLoginPassword = "herald-test-login-password"
)

var (
	loginsMu    sync.Mutex
	loginsReady bool
)

// ensureTestLogins creates the test logins once per test process (and
// once per cluster: a login that already works is left alone, so test
// processes running at once do not update the same roles).
func ensureTestLogins(ctx context.Context, adminURL, dbURL string) error {
	loginsMu.Lock()
	defer loginsMu.Unlock()
	if loginsReady {
		return nil
	}
	for _, l := range []struct{ name, group string }{{TestAPILogin, store.RoleAPI}, {TestAdminLogin, store.RoleAdmin}} {
		if c, err := pgx.Connect(ctx, LoginURL(dbURL, l.name)); err == nil {
			_ = c.Close(ctx)
			if err := grantToAdmin(ctx, adminURL, l.name); err != nil {
				return err
			}
			continue
		}
		verifier, err := store.LoginVerifier(testLoginPassword)
		if err != nil {
			return err
		}
		// Another test process may be making the same role: try again.
		for attempt := 0; ; attempt++ {
			c, err := pgx.Connect(ctx, adminURL)
			if err != nil {
				return err
			}
			err = store.EnsureLoginRole(ctx, c, l.name, l.group, verifier)
			_ = c.Close(ctx)
			if err == nil {
				break
			}
			if attempt == 4 {
				return fmt.Errorf("test login %s: %w", l.name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := grantToAdmin(ctx, adminURL, l.name); err != nil {
			return err
		}
	}
	loginsReady = true
	return nil
}

// grantToAdmin makes adminURL's role a member of the test login, so that
// dropping a test database (WITH (FORCE)) may end the login's sessions
// still closing.
func grantToAdmin(ctx context.Context, adminURL, login string) error {
	c, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var member bool
	if err := c.QueryRow(ctx, `SELECT pg_has_role(current_user, $1, 'USAGE')`, login).Scan(&member); err != nil {
		return fmt.Errorf("test login %s: %w", login, err)
	}
	if member {
		return nil
	}
	if _, err := c.Exec(ctx, "GRANT "+pgx.Identifier{login}.Sanitize()+" TO CURRENT_USER"); err != nil {
		// Another test process granted it first.
		if err2 := c.QueryRow(ctx, `SELECT pg_has_role(current_user, $1, 'USAGE')`, login).Scan(&member); err2 != nil || !member {
			return fmt.Errorf("test login %s: grant it to the admin role: %w", login, err)
		}
	}
	return nil
}

// LoginURL returns dbURL with the test login user (TestAPILogin or
// TestAdminLogin) and its password in place of dbURL's.
func LoginURL(dbURL, user string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	u.User = url.UserPassword(user, testLoginPassword)
	return u.String()
}

// Postgres creates a fresh database with every migration applied and drops
// it when the test ends.
func Postgres(t testing.TB) *DB {
	t.Helper()
	return PostgresAt(t, 0)
}

// PostgresAt is Postgres with the migrations applied up to version only
// (every one for 0): a test of a migration fills the schema before it.
func PostgresAt(t testing.TB, version int64) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adminURL := Env("HERALD_PG_ADMIN_URL", DefaultPGAdminURL)
	admin, err := pgxpool.New(ctx, adminURL)
	if err == nil {
		err = admin.Ping(ctx)
		admin.Close()
	}
	if err != nil {
		unavailable(t, "PostgreSQL", err)
	}
	name := RandomName("herald_test_")
	// The same helper makes the benchmark's databases (core/internal/tools/bench).
	dbURL, drop, err := store.CreateDatabase(ctx, adminURL, name)
	if err != nil {
		t.Fatalf("%v", err)
	}
	db := &DB{URL: dbURL, Name: name}
	t.Cleanup(func() {
		if db.Pool != nil {
			db.Pool.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := drop(ctx); err != nil {
			t.Logf("%v", err)
		}
	})
	if err := store.MigrateUpTo(ctx, db.URL, version); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if err := ensureTestLogins(ctx, adminURL, db.URL); err != nil {
		t.Fatalf("%v", err)
	}
	db.APIURL, db.AdminURL = LoginURL(db.URL, TestAPILogin), LoginURL(db.URL, TestAdminLogin)
	db.Pool, err = pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatalf("connect %s: %v", name, err)
	}
	return db
}

// Broker is an isolated RabbitMQ vhost for one test.
type Broker struct {
	// URL connects to the vhost as guest.
	URL string
	// VHost is the vhost name.
	VHost string
}

// RabbitMQ creates a fresh vhost on the local broker and deletes it when the
// test ends. It needs rabbitmqctl (the broker runs on this machine).
func RabbitMQ(t testing.TB) *Broker {
	t.Helper()
	base := Env("HERALD_AMQP_URL", DefaultAMQPURL)
	conn, err := amqp.Dial(base)
	if err != nil {
		unavailable(t, "RabbitMQ", err)
	}
	_ = conn.Close()
	vhost := RandomName("herald-test-")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse HERALD_AMQP_URL: %v", err)
	}
	if out, err := addVhost(vhost, u.User.Username()); err != nil {
		t.Fatalf("add vhost: %v: %s", err, out)
	}
	t.Cleanup(func() { deleteVhostInBackground(t, vhost) })
	u.Path = "/" + vhost
	return &Broker{URL: u.String(), VHost: vhost}
}

// AMQPChannel dials url and opens a channel on the connection, which is
// closed when the test ends.
func AMQPChannel(t testing.TB, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// erlangSafe matches names that go into an Erlang binary literal as they
// are.
var erlangSafe = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// addVhost creates vhost and gives user every permission on it. Each
// rabbitmqctl call starts an Erlang VM (2-5 s on a loaded 2-core machine),
// so both steps go in one eval when the names allow it.
func addVhost(vhost, user string) (string, error) {
	if !erlangSafe.MatchString(vhost) || !erlangSafe.MatchString(user) {
		if out, err := Rabbitmqctl("add_vhost", vhost); err != nil {
			return out, err
		}
		return Rabbitmqctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
	}
	// rabbit_vhost:add/2 and rabbit_auth_backend_internal:set_permissions/6
	// are what add_vhost and set_permissions call (RabbitMQ 3.8 to 3.13).
	return Rabbitmqctl("eval", fmt.Sprintf(`ok = rabbit_vhost:add(<<"%[1]s">>, <<"herald-test">>),
		ok = rabbit_auth_backend_internal:set_permissions(<<"%[2]s">>, <<"%[1]s">>, <<".*">>, <<".*">>, <<".*">>, <<"herald-test">>).`, vhost, user))
}

// deleteVhostInBackground deletes a test's vhost without making the test
// wait for another Erlang VM: the rabbitmqctl process holds none of the
// test binary's output pipes, so go test does not wait for it either, and
// it finishes on its own if the test binary exits first.
func deleteVhostInBackground(t testing.TB, vhost string) {
	cmd := exec.Command("rabbitmqctl", "-q", "delete_vhost", vhost)
	if err := cmd.Start(); err != nil {
		t.Logf("delete vhost %s: %v", vhost, err)
		return
	}
	go func() { _ = cmd.Wait() }()
}

// Rabbitmqctl runs rabbitmqctl with args and returns its combined output.
func Rabbitmqctl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput()
	return string(out), err
}

// Eventually calls cond until it returns true or the deadline passes, then
// fails the test with msg. It polls every 20ms.
func Eventually(t testing.TB, deadline time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		if cond() {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("condition not met within %s: %s", deadline, fmt.Sprintf(msg, args...))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RepoRoot returns the repository root (the directory holding go.mod).
func RepoRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		t.Fatal("not inside the herald module")
	}
	return strings.TrimSuffix(mod, "/go.mod")
}

var (
	buildMu    sync.Mutex
	builtDir   string
	builtBins  = map[string]string{}
	buildFails = map[string]error{}
)

// PluginPackages maps each plugin's short name to its package path inside the
// repository. "sink" is the recording test plugin.
var PluginPackages = map[string]string{
	"email":     "./plugins/email",
	"push":      "./plugins/push",
	"sms":       "./plugins/sms",
	"slack":     "./plugins/slack",
	"websocket": "./plugins/websocket",
	"sink":      "./core/internal/tools/sinkplugin",
}

// PluginBinaries builds the named plugins (all of PluginPackages when names
// is empty) once per test process and returns the directory holding the
// herald-plugin-<name> binaries.
func PluginBinaries(t testing.TB, names ...string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if builtDir == "" {
		dir, err := os.MkdirTemp("", "herald-plugins-")
		if err != nil {
			t.Fatalf("plugin dir: %v", err)
		}
		builtDir = dir
	}
	if len(names) == 0 {
		for n := range PluginPackages {
			names = append(names, n)
		}
	}
	root := RepoRoot(t)
	for _, n := range names {
		if err := buildFails[n]; err != nil {
			t.Fatalf("build plugin %s: %v", n, err)
		}
		if _, ok := builtBins[n]; ok {
			continue
		}
		pkg, ok := PluginPackages[n]
		if !ok {
			t.Fatalf("unknown plugin %q", n)
		}
		bin := builtDir + "/herald-plugin-" + n
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildFails[n] = fmt.Errorf("%v: %s", err, out)
			t.Fatalf("build plugin %s: %v: %s", n, err, out)
		}
		// The plugin host refuses group-writable binaries, which go
		// build makes under a umask of 002.
		if err := os.Chmod(bin, 0o755); err != nil {
			t.Fatalf("build plugin %s: %v", n, err)
		}
		builtBins[n] = bin
	}
	return builtDir
}

// BuildHerald builds the herald binary once per call into dir and returns
// its path.
func BuildHerald(t testing.TB, dir string) string {
	t.Helper()
	bin := dir + "/herald"
	cmd := exec.Command("go", "build", "-o", bin, "./core/cmd/herald")
	cmd.Dir = RepoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build herald: %v: %s", err, out)
	}
	return bin
}

var (
	variantMu sync.Mutex
	variants  = map[string]string{}
)

// PluginVariant builds the named plugin of PluginPackages with -ldflags -X
// values ("version=2.0.0" sets main.version) once per test process and
// returns the binary's path, in a directory of its own (install it into a
// plugin directory with InstallPlugin). Without vars it is the binary
// PluginBinaries builds.
func PluginVariant(t testing.TB, name string, vars ...string) string {
	t.Helper()
	if len(vars) == 0 {
		return PluginBinaries(t, name) + "/herald-plugin-" + name
	}
	pkg, ok := PluginPackages[name]
	if !ok {
		t.Fatalf("unknown plugin %q", name)
	}
	key := name + " " + strings.Join(vars, " ")
	variantMu.Lock()
	defer variantMu.Unlock()
	if p, ok := variants[key]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "herald-plugin-variant-")
	if err != nil {
		t.Fatalf("plugin variant dir: %v", err)
	}
	bin := dir + "/herald-plugin-" + name
	var ld []string
	for _, v := range vars {
		ld = append(ld, "-X", "main."+v)
	}
	cmd := exec.Command("go", "build", "-ldflags", strings.Join(ld, " "), "-o", bin, pkg)
	cmd.Dir = RepoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build plugin %s (%s): %v: %s", name, key, err, out)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatalf("build plugin %s (%s): %v", name, key, err)
	}
	variants[key] = bin
	return bin
}

// InstallPlugin copies the binary src into dir as herald-plugin-<name>
// atomically, the way an operator's deploy does: it writes a hidden file
// beside the target (mode 0755, as the plugin host accepts) and renames it
// over the target, so a host watching dir never runs a half-written
// binary. It returns the installed path.
func InstallPlugin(t testing.TB, src, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("install plugin: %v", err)
	}
	dst := dir + "/herald-plugin-" + name
	tmp := dir + "/.herald-plugin-" + name + ".tmp"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		t.Fatalf("install plugin: %v", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatalf("install plugin: %v", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatalf("install plugin: %v", err)
	}
	return dst
}

// superuserRole is a superuser login role tests connect as to prove that
// Herald refuses one where it must not run (created once per server).
const superuserRole, superuserPassword = "herald_test_superuser", "herald-test-superuser-0123"

// SuperuserURL returns a URL that connects to db as a PostgreSQL
// superuser. It creates the role herald_test_superuser through the local
// socket as the postgres OS user (root runs `runuser -u postgres psql`),
// and fails the test when it cannot.
func SuperuserURL(t testing.TB, db *DB) string {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(superuserRole, superuserPassword)
	su := u.String()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c, err := pgxpool.New(ctx, su); err == nil {
		err = c.Ping(ctx)
		c.Close()
		if err == nil {
			return su
		}
	}
	sql := fmt.Sprintf(`DO $$ BEGIN
		IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '%[1]s') THEN
			CREATE ROLE %[1]s LOGIN SUPERUSER PASSWORD '%[2]s';
		ELSE
			ALTER ROLE %[1]s LOGIN SUPERUSER PASSWORD '%[2]s';
		END IF; END $$;`, superuserRole, superuserPassword)
	var out []byte
	for _, cmd := range [][]string{
		{"psql", "-h", "/var/run/postgresql", "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", sql},
		{"runuser", "-u", "postgres", "--", "psql", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", sql},
	} {
		if out, err = exec.CommandContext(ctx, cmd[0], cmd[1:]...).CombinedOutput(); err == nil {
			return su
		}
	}
	t.Fatalf("cannot make a superuser role to test with (run the tests as root on the PostgreSQL machine): %v: %s", err, out)
	return ""
}
