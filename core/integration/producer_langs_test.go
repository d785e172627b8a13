package integration

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// The producer examples (examples/producers, shown in docs/producers.md)
// run here with the runtimes and drivers a Debian machine gets from its
// packages. A missing runtime fails the test when
// HERALD_REQUIRE_PRODUCER_LANGS=1 (CI, where scripts/tools.sh
// producer-langs installs them) and is skipped otherwise, naming the
// apt-get command. With HERALD_PRODUCER_LANGS_REPORT set to a file, each
// language appends one line to it per run ("python: ran in a source
// database", "php: NOT RUN: ..."),
// which scripts/test.sh prints in its summary.

// producerExample is one language's example program.
type producerExample struct {
	lang string
	// source is the program, relative to examples/producers.
	source string
	// apt is what Debian's apt-get installs for the runtime and driver.
	apt string
	// command returns the command line that runs the example and extra
	// environment, or why it cannot run on this machine.
	command func(t *testing.T, dir string) (argv, env []string, missing string)
}

// debianNodePath is where Debian's node-* packages put their modules
// (Debian's nodejs searches them itself; another build does not), after
// HERALD_NODE_PG_DIR's (/var/cache/herald/node-pg), where scripts/tools.sh
// producer-langs unpacks node-pg beside a nodejs that is not Debian's.
func debianNodePath() string {
	unpacked := cmp.Or(os.Getenv("HERALD_NODE_PG_DIR"), "/var/cache/herald/node-pg")
	return strings.Join([]string{filepath.Join(unpacked, "usr/share/nodejs"), "/usr/share/nodejs", "/usr/lib/nodejs"},
		string(os.PathListSeparator))
}

// runs reports whether the command exits 0.
func runs(name string, args ...string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return exec.CommandContext(ctx, name, args...).Run() == nil
}

var producerExamples = []producerExample{
	{lang: "java", source: "java/Reservation.java", apt: "default-jdk-headless libpostgresql-jdbc-java",
		command: func(t *testing.T, dir string) ([]string, []string, string) {
			// The single-file source launcher needs the JDK (javac's module).
			const jar = "/usr/share/java/postgresql.jar"
			if _, err := exec.LookPath("javac"); err != nil {
				return nil, nil, "a JDK (javac)"
			}
			if _, err := os.Stat(jar); err != nil {
				return nil, nil, "the PostgreSQL JDBC driver " + jar
			}
			return []string{"java", "-cp", jar, filepath.Join(dir, "java/Reservation.java")}, nil, ""
		}},
	{lang: "php", source: "php/reservation.php", apt: "php-cli php-pgsql",
		command: func(t *testing.T, dir string) ([]string, []string, string) {
			if !runs("php", "-r", `exit(extension_loaded("pdo_pgsql") ? 0 : 1);`) {
				return nil, nil, "php with the pdo_pgsql extension"
			}
			return []string{"php", filepath.Join(dir, "php/reservation.php")}, nil, ""
		}},
	{lang: "python", source: "python/reservation.py", apt: "python3 python3-psycopg",
		command: func(t *testing.T, dir string) ([]string, []string, string) {
			// Debian's python3, not one earlier in PATH (pyenv and the like).
			if !runs("/usr/bin/python3", "-c", "import psycopg") {
				return nil, nil, "/usr/bin/python3 with psycopg 3"
			}
			return []string{"/usr/bin/python3", filepath.Join(dir, "python/reservation.py")}, nil, ""
		}},
	{lang: "node", source: "node/reservation.js", apt: "nodejs node-pg",
		command: func(t *testing.T, dir string) ([]string, []string, string) {
			env := []string{"NODE_PATH=" + debianNodePath()}
			cmd := exec.Command("node", "-e", `require.resolve("pg")`)
			cmd.Env = append(os.Environ(), env...)
			if cmd.Run() != nil {
				return nil, nil, "node with node-postgres (pg)"
			}
			return []string{"node", filepath.Join(dir, "node/reservation.js")}, env, ""
		}},
	{lang: "go", source: "go/main.go", apt: "",
		command: func(t *testing.T, dir string) ([]string, []string, string) {
			bin := filepath.Join(t.TempDir(), "reservation")
			build := exec.Command("go", "build", "-o", bin, "./examples/producers/go")
			build.Dir = testenv.RepoRoot(t)
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("build the Go example: %v: %s", err, out)
			}
			return []string{bin}, nil, ""
		}},
}

// langReport appends "lang: what" to HERALD_PRODUCER_LANGS_REPORT.
func langReport(t *testing.T, lang, what string) {
	p := os.Getenv("HERALD_PRODUCER_LANGS_REPORT")
	if p == "" {
		return
	}
	f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("producer languages report: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s: %s\n", lang, what)
}

// exampleCommand is the example's command line, or skips (fails, with
// HERALD_REQUIRE_PRODUCER_LANGS=1) the test naming what is missing.
func exampleCommand(t *testing.T, ex producerExample) (argv, env []string) {
	t.Helper()
	dir := filepath.Join(testenv.RepoRoot(t), "examples", "producers")
	argv, env, missing := ex.command(t, dir)
	if missing == "" {
		return argv, env
	}
	msg := fmt.Sprintf("PRODUCER EXAMPLE %s NOT RUN: %s is missing (Debian: apt-get install %s, or scripts/tools.sh producer-langs)",
		ex.lang, missing, ex.apt)
	langReport(t, ex.lang, "NOT RUN: "+missing+" is missing (apt-get install "+ex.apt+")")
	if os.Getenv("HERALD_REQUIRE_PRODUCER_LANGS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return nil, nil
}

// runExample runs the example with env and returns its standard output,
// standard error and whether it exited 0.
func runExample(t *testing.T, argv, env []string) (stdout, stderr string, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish in 3 minutes: %s", argv, errOut.String())
	}
	return out.String(), errOut.String(), err == nil
}

// TestProducerExamplesInEveryLanguage runs each example of docs/producers.md
// as a producer login made by `herald db producer`, in Herald's database:
// the rolled-back reservation leaves no event (the committed one is then
// new), the committed one is one PENDING event, its repeat answers repeat
// with the same id, an event for a tenant the login was not granted fails
// the program with the function's words and leaves no reservation; then
// the daemon delivers every example's event exactly once.
func TestProducerExamplesInEveryLanguage(t *testing.T) {
	e := newEnv(t, "sent")
	ctx := context.Background()
	createReservationTable(t, e.db.Pool)

	// The service's login, made as an operator makes it.
	role, password := testenv.RandomName("orders_service_"), testenv.RandomName("pw")
	cmd := exec.Command(heraldBinary(t), "db", "producer", "--tenant", e.tenant, role, "--config", e.cfgPath)
	cmd.Env = append(os.Environ(), "HERALD_PRODUCER_PASSWORD="+password)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("herald db producer: %v: %s", err, out)
	}
	t.Cleanup(func() {
		_, _ = e.db.Pool.Exec(context.Background(), "REVOKE ALL ON reservation FROM "+role)
		if _, err := e.db.Pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role); err != nil {
			t.Logf("drop role %s: %v", role, err)
		}
	})
	if _, err := e.db.Pool.Exec(ctx, "GRANT SELECT, INSERT ON reservation TO "+role); err != nil {
		t.Fatal(err)
	}

	ran := runProducerExamples(t, "Herald's database", e, e.db.Pool, loginURL(t, e.db.URL, role, password), `SELECT id, status, aggregate_type || ':' || aggregate_id
		FROM event_outbox WHERE tenant_id = $1 AND event_id = $2`,
		fmt.Sprintf(`tenant_id: the login %s may not enqueue events for tenant "globex"`, role))
	if n := e.count(`SELECT count(*) FROM event_outbox WHERE tenant_id <> $1`, e.tenant); n != 0 {
		t.Fatalf("%d events for another tenant", n)
	}

	// End to end: the daemon fans every example's event out, exactly once.
	e.start()
	e.waitAllSent(ran*deliveriesPerEvent, 60*time.Second)
	e.assertExactlyOnce(ran * deliveriesPerEvent)
	if n := e.count(`SELECT count(*) FROM event_outbox WHERE status = 'PROCESSED'`); n != ran {
		t.Fatalf("%d events PROCESSED, want %d", n, ran)
	}
}

// TestProducerExamplesInASourceDatabase runs the same programs, unchanged,
// against the service's own database with the outbox `herald outbox
// install` puts there, as a login granted EXECUTE on its herald_enqueue and
// nothing of Herald's: rolled back, committed, repeated, each row in
// herald_outbox once; then `herald serve`, with a source block for that
// database, forwards every example's event and delivers it exactly once,
// and the source table ends empty. (A tenant the source may not write for
// is refused at forwarding there, not in the call: the source's own tests
// cover it.)
func TestProducerExamplesInASourceDatabase(t *testing.T) {
	e := newEnv(t, "sent")
	ctx := context.Background()
	srcURL, drop, err := store.CreateDatabase(ctx, testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL), testenv.RandomName("herald_orders_"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = drop(context.Background()) })
	install := exec.Command(heraldBinary(t), "outbox", "install", "--database-url", srcURL)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("herald outbox install: %v: %s", err, out)
	}
	src, err := pgxpool.New(ctx, srcURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	createReservationTable(t, src)

	// The service's login: the function and its own table, nothing else.
	role, password := testenv.RandomName("orders_app_"), testenv.RandomName("pw")
	const fn = "herald_enqueue(text, text, text, jsonb, text, text, text, timestamptz, text, text)"
	for _, q := range []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", role, password),
		"GRANT SELECT, INSERT ON reservation TO " + role,
		"GRANT EXECUTE ON FUNCTION " + fn + " TO " + role,
	} {
		if _, err := src.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = src.Exec(ctx, "REVOKE ALL ON reservation FROM "+role)
		_, _ = src.Exec(ctx, "REVOKE ALL ON FUNCTION "+fn+" FROM "+role)
		if _, err := src.Exec(ctx, "DROP ROLE IF EXISTS "+role); err != nil {
			t.Logf("drop role %s: %v", role, err)
		}
	})

	ran := runProducerExamples(t, "a source database", e, src, loginURL(t, srcURL, role, password), `SELECT id, 'PENDING', aggregate_type || ':' || aggregate_id
		FROM herald_outbox WHERE tenant_id = $1 AND event_id = $2 AND refused_at IS NULL`, "")

	cfg, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg = fmt.Appendf(cfg, "source \"orders\" {\n  url = %q\n  tenants = [%q]\n}\n", srcURL, e.tenant)
	if err := os.WriteFile(e.cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitAllSent(ran*deliveriesPerEvent, 90*time.Second)
	e.assertExactlyOnce(ran * deliveriesPerEvent)
	if n := e.count(`SELECT count(*) FROM event_outbox WHERE tenant_id = $1 AND event_id LIKE 'reservation-%-requested'`, e.tenant); n != ran {
		t.Fatalf("%d events in Herald, want %d", n, ran)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		var left int
		if err := src.QueryRow(ctx, `SELECT count(*) FROM herald_outbox`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	}, "the source table emptied")
}

// createReservationTable runs examples/producers/reservation.sql.
func createReservationTable(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ddl, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "examples", "producers", "reservation.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), string(ddl)); err != nil {
		t.Fatalf("reservation.sql: %v", err)
	}
}

// loginURL is dbURL with another user and password.
func loginURL(t *testing.T, dbURL, role, password string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	return u.String()
}

// runProducerExamples runs every example, one subtest per language, as
// serviceURL's login against the database db holds, for e's tenant, and
// returns how many ran; mode names the database in the report. eventQuery, given the tenant and event_id, returns
// the event's id (what herald_enqueue answered), its status and
// "aggregate_type:aggregate_id". refusedWords, when not empty, is what a
// run for tenant globex must fail with.
func runProducerExamples(t *testing.T, mode string, e *env, db *pgxpool.Pool, serviceURL, eventQuery, refusedWords string) int {
	t.Helper()
	ctx := context.Background()
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := db.QueryRow(ctx, q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	ran := 0
	for i, ex := range producerExamples {
		t.Run(ex.lang, func(t *testing.T) {
			argv, env := exampleCommand(t, ex)
			reservationID := 100 + i
			eventID := fmt.Sprintf("reservation-%d-requested", reservationID)
			env = append(env, "DATABASE_URL="+serviceURL, "HERALD_TENANT="+e.tenant,
				fmt.Sprintf("RESERVATION_ID=%d", reservationID), "HERALD_ENQUEUE=herald_enqueue")
			stdout, stderr, ok := runExample(t, argv, env)
			if !ok {
				t.Fatalf("%s failed:\n%s%s", ex.source, stdout, stderr)
			}
			var id int64
			var status, aggregate string
			if err := db.QueryRow(ctx, eventQuery, e.tenant, eventID).Scan(&id, &status, &aggregate); err != nil {
				t.Fatalf("the committed event %s: %v (the program said:\n%s)", eventID, err, stdout)
			}
			want := fmt.Sprintf("rollback: new\ncommit: new %d\nagain: repeat %d\n", id, id)
			if stdout != want {
				t.Fatalf("%s printed\n%s\nwant\n%s(stderr: %s)", ex.source, stdout, want, stderr)
			}
			if status != "PENDING" || aggregate != fmt.Sprintf("reservation:%d", reservationID) {
				t.Fatalf("event %s is %s for %s, want PENDING for reservation:%d", eventID, status, aggregate, reservationID)
			}
			if n := count(`SELECT count(*) FROM reservation WHERE id = $1`, reservationID); n != 1 {
				t.Fatalf("%d reservations %d, want 1 (the rolled-back one left none)", n, reservationID)
			}

			if refusedWords != "" {
				// A tenant the login was not granted: the program fails
				// with the function's words, and its transaction wrote
				// nothing.
				refusedID := 200 + i
				env = append(env, "HERALD_TENANT=globex", fmt.Sprintf("RESERVATION_ID=%d", refusedID))
				stdout, stderr, ok = runExample(t, argv, env)
				if ok || !strings.Contains(stderr, refusedWords) {
					t.Fatalf("for tenant globex %s exited ok=%v, want a failure saying %q:\n%s%s", ex.source, ok, refusedWords, stdout, stderr)
				}
				if n := count(`SELECT count(*) FROM reservation WHERE id = $1`, refusedID); n != 0 {
					t.Fatalf("the refused transaction left %d reservations", n)
				}
			}
			ran++
			langReport(t, ex.lang, "ran in "+mode)
		})
	}
	if ran == 0 {
		t.Fatal("no example ran (not even Go's)")
	}
	return ran
}

// TestProducerExamplesAreInTheDoc checks that docs/producers.md shows each
// example file as it is: the fenced block after each
// "<!-- example: PATH -->" line is PATH's content, and every example is
// shown.
func TestProducerExamplesAreInTheDoc(t *testing.T) {
	root := testenv.RepoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "producers.md"))
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(doc))
	var path string
	var block *strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case block != nil && line == "```":
			shown[path] = block.String()
			path, block = "", nil
		case block != nil:
			block.WriteString(line + "\n")
		case strings.HasPrefix(line, "<!-- example: ") && strings.HasSuffix(line, " -->"):
			path = strings.TrimSuffix(strings.TrimPrefix(line, "<!-- example: "), " -->")
		case path != "" && strings.HasPrefix(line, "```"):
			block = &strings.Builder{}
		}
	}
	want := []string{"examples/producers/reservation.sql"}
	for _, ex := range producerExamples {
		want = append(want, "examples/producers/"+ex.source)
	}
	for _, p := range want {
		src, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		got, ok := shown[p]
		if !ok {
			t.Errorf("docs/producers.md does not show %s (a line <!-- example: %s --> and a fenced block)", p, p)
			continue
		}
		if got != string(src) {
			t.Errorf("docs/producers.md shows another %s than the file: copy the file into the block after its marker", p)
		}
	}
}
