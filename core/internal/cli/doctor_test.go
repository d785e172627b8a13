package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/migrations"
)

// doctorSetup is what one doctor run checks.
type doctorSetup struct {
	dbURL, amqpURL, pluginDir string
	// apiURL and adminURL are database.api_url and database.admin_url;
	// dbExtra is more of the database block, extra more of the file.
	apiURL, adminURL, dbExtra, extra string
	// amqpURLs, when set, is written as amqp.urls instead of amqp.url.
	amqpURLs []string
	// provider is the HCL of the TEST channel's provider.
	provider string
}

// writeDoctorConfig writes a daemon config and a rules file for s into a
// fresh directory and returns the config's path.
func writeDoctorConfig(t *testing.T, s doctorSetup) string {
	t.Helper()
	dir := t.TempDir()
	rulesHCL := fmt.Sprintf(`
defaults {
  user_type "CUSTOMER" {
    enabled = ["TEST"]
  }
}
channel "TEST" {
  providers = [%s]
}
event "ORDER_SHIPPED" {
  audience { user = "{{ .payload.user }}" }
  mandatory = ["TEST"]
  template "TEST" { body = "shipped" }
}
`, s.provider)
	if err := os.WriteFile(filepath.Join(dir, "rules.hcl"), []byte(rulesHCL), 0o600); err != nil {
		t.Fatal(err)
	}
	amqpHCL := fmt.Sprintf("url = %q", s.amqpURL)
	if len(s.amqpURLs) > 0 {
		quoted := make([]string, len(s.amqpURLs))
		for i, u := range s.amqpURLs {
			quoted[i] = fmt.Sprintf("%q", u)
		}
		amqpHCL = "urls = [" + strings.Join(quoted, ", ") + "]"
	}
	cfg := fmt.Sprintf(`
database {
  url       = %q
  api_url   = %q
  admin_url = %q
  %s
}
amqp { %s }
plugins { dir = %q }
rules = ["rules.hcl"]
%s
`, s.dbURL, s.apiURL, s.adminURL, s.dbExtra, amqpHCL, s.pluginDir, s.extra)
	path := filepath.Join(dir, "herald.hcl")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// declareTopology declares on the broker what herald serve would for cfg.
func declareTopology(t *testing.T, cfgPath string) {
	t.Helper()
	d, err := config.LoadDaemon(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := rulesfile.Load(d.Rules...)
	if err != nil {
		t.Fatal(err)
	}
	ch := testenv.AMQPChannel(t, d.AMQP.URL)
	defer ch.Close()
	if err := server.Topology(d, rs).Declare(ch); err != nil {
		t.Fatal(err)
	}
}

// latestMigration is the highest embedded migration version.
func latestMigration(t *testing.T) int {
	t.Helper()
	names, err := migrations.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range names {
		var v int
		if _, err := fmt.Sscanf(e.Name(), "%04d_", &v); err == nil {
			n = max(n, v)
		}
	}
	return n
}

// checkLines returns doctor's output lines by check name.
func checkLines(t *testing.T, out string) map[string]string {
	t.Helper()
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		name, _, ok := strings.Cut(l[5:], ": ")
		if !ok {
			t.Fatalf("line without a check name: %q", l)
		}
		lines[name] = l
	}
	return lines
}

func TestDoctorHealthy(t *testing.T) {
	t.Parallel()
	db, mq := testenv.Postgres(t), testenv.RabbitMQ(t)
	cfg := writeDoctorConfig(t, doctorSetup{dbURL: db.URL, apiURL: db.APIURL, adminURL: db.AdminURL, amqpURL: mq.URL, pluginDir: testenv.PluginBinaries(t, "sink"),
		provider: `{ plugin = "sink", name = "primary" }`})

	// Before herald serve declared anything, the missing topology is a
	// warning, not a failure.
	out, stderr, code := runHerald(t, "doctor", "--config", cfg)
	if code != 0 {
		t.Fatalf("doctor before the topology: exit %d\n%s%s", code, out, stderr)
	}
	if l := checkLines(t, out)["broker "+redactedAMQP(mq.URL)]; !strings.HasPrefix(l, "warn ") || !strings.Contains(l, "not declared yet: exchange herald.deliveries, queue herald.test") {
		t.Errorf("broker line before the topology = %q", l)
	}

	declareTopology(t, cfg)
	out, stderr, code = runHerald(t, "doctor", "--config", cfg)
	if code != 0 {
		t.Fatalf("doctor: exit %d\n%s%s", code, out, stderr)
	}
	lines := checkLines(t, out)
	for _, name := range []string{"config", "database", "database roles", "token audience", "clock", "broker " + redactedAMQP(mq.URL), "plugin TEST/primary", "status events"} {
		if !strings.HasPrefix(lines[name], "ok   ") {
			t.Errorf("%s: got %q, want an ok line\n%s", name, lines[name], out)
		}
	}
	// The sandbox line: ok where the kernel has Landlock, warn where not.
	if l := lines["plugin sandbox"]; !(strings.HasPrefix(l, "ok   ") && strings.Contains(l, "Landlock ABI")) &&
		!(strings.HasPrefix(l, "warn ") && strings.Contains(l, "no Landlock")) {
		t.Errorf("plugin sandbox line = %q", l)
	}
	// The vacuum line: ok where the server runs autovacuum, warn where not.
	if l := lines["database vacuum"]; l != "ok   database vacuum: autovacuum is on" && l != "warn database vacuum: "+store.AutovacuumWarning {
		t.Errorf("database vacuum line = %q", l)
	}
	if len(lines) != 10 {
		t.Errorf("doctor printed %d checks, want 10:\n%s", len(lines), out)
	}
	aud, err := store.DeploymentAudience(context.Background(), db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if want := "ok   token audience: user tokens must carry aud \"" + aud + "\" (this deployment's own; auth.audience sets another)"; lines["token audience"] != want {
		t.Errorf("token audience line = %q, want %q", lines["token audience"], want)
	}
	if want := fmt.Sprintf("ok   database: reachable, migrations at %d of %d", latestMigration(t), latestMigration(t)); lines["database"] != want {
		t.Errorf("database line = %q, want %q", lines["database"], want)
	}
	if want := "ok   status events: 0 unpublished on exchange herald.status (oldest 0.0s), 0 owed to webhooks (oldest 0.0s); replay window 72h0m0s"; lines["status events"] != want {
		t.Errorf("status events line = %q, want %q", lines["status events"], want)
	}
	if !strings.Contains(lines["plugin TEST/primary"], "version 1.0.0") {
		t.Errorf("plugin line = %q, want the described version", lines["plugin TEST/primary"])
	}
	if !strings.Contains(lines["broker "+redactedAMQP(mq.URL)], "exchange herald.deliveries and 1 classic queue(s) in place") {
		t.Errorf("broker line = %q", lines["broker "+redactedAMQP(mq.URL)])
	}
	// Passwords never show (these URLs carry them as user:password@).
	for _, u := range []string{db.URL, mq.URL} {
		if pu, _ := url.Parse(u); pu != nil {
			if p, ok := pu.User.Password(); ok && strings.Contains(out, ":"+p+"@") {
				t.Errorf("doctor printed the password of %s:\n%s", pu.Redacted(), out)
			}
		}
	}

	out, _, code = runHerald(t, "doctor", "--config", cfg, "--json")
	var res []checkResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || len(res) != 10 {
		t.Fatalf("doctor --json: exit %d, %d results, %v:\n%s", code, len(res), err, out)
	}
}

// redactedAMQP is how doctor names a broker URL.
func redactedAMQP(u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		return u
	}
	return pu.Redacted()
}

func TestDoctorFailures(t *testing.T) {
	t.Parallel()
	db, mq := testenv.Postgres(t), testenv.RabbitMQ(t)
	pluginDir := testenv.PluginBinaries(t, "sink")
	healthy := doctorSetup{dbURL: db.URL, apiURL: db.APIURL, adminURL: db.AdminURL, amqpURL: mq.URL, pluginDir: pluginDir, provider: `{ plugin = "sink", name = "primary" }`}
	declareTopology(t, writeDoctorConfig(t, healthy))

	// A database with no migrations applied.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bare := testenv.RandomName("herald_test_bare_")
	if _, err := db.Pool.Exec(ctx, "CREATE DATABASE "+bare); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = db.Pool.Exec(ctx, "DROP DATABASE IF EXISTS "+bare+" WITH (FORCE)")
	})
	bareURL, _ := url.Parse(db.URL)
	bareURL.Path = "/" + bare
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	wrongDB, _ := url.Parse(db.URL)
	wrongDB.Host = fmt.Sprintf("127.0.0.1:%d", deadPort)
	deadAMQP, _ := url.Parse(mq.URL)
	deadAMQP.Host = fmt.Sprintf("127.0.0.1:%d", deadPort)

	tests := map[string]struct {
		setup func(s *doctorSetup)
		check string
		want  string
	}{
		"wrong database url": {
			setup: func(s *doctorSetup) { s.dbURL = wrongDB.String() },
			check: "database", want: "unreachable at postgres://",
		},
		"unmigrated database": {
			setup: func(s *doctorSetup) { s.dbURL = bareURL.String() },
			check: "database", want: fmt.Sprintf("reachable, migrations at 0 of %d: run herald migrate up", latestMigration(t)),
		},
		"unreachable broker": {
			setup: func(s *doctorSetup) { s.amqpURL = deadAMQP.String() },
			check: "broker " + redactedAMQP(deadAMQP.String()), want: "unreachable",
		},
		"one of amqp.urls unreachable": {
			setup: func(s *doctorSetup) { s.amqpURLs = []string{mq.URL, deadAMQP.String()} },
			check: "broker " + redactedAMQP(deadAMQP.String()), want: "unreachable",
		},
		"missing plugin binary": {
			setup: func(s *doctorSetup) { s.provider = `{ plugin = "absent", name = "primary" }` },
			check: "plugin TEST/primary", want: "herald-plugin-absent",
		},
		"API pool logging in as the owner": {
			setup: func(s *doctorSetup) { s.apiURL = "" },
			check: "database roles", want: "database.api_url (empty: database.url) logs in as role",
		},
		"superadmin pool logging in as the owner": {
			setup: func(s *doctorSetup) { s.adminURL = s.dbURL },
			check: "database roles", want: "database.admin_url logs in as role",
		},
		"checksum mismatch": {
			setup: func(s *doctorSetup) {
				s.provider = `{ plugin = "sink", name = "primary", checksum = "` + strings.Repeat("0", 64) + `" }`
			},
			check: "plugin TEST/primary", want: "checksum mismatch",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := healthy
			tc.setup(&s)
			out, stderr, code := runHerald(t, "doctor", "--config", writeDoctorConfig(t, s), "--timeout", "5s")
			t.Logf("doctor printed:\n%s", out)
			if code != 1 {
				t.Errorf("exit %d, want 1\n%s%s", code, out, stderr)
			}
			l := checkLines(t, out)[tc.check]
			if !strings.HasPrefix(l, "FAIL ") || !strings.Contains(l, tc.want) {
				t.Errorf("%s line = %q, want a FAIL naming %q\n%s", tc.check, l, tc.want, out)
			}
			if len(s.amqpURLs) > 0 {
				if l := checkLines(t, out)["broker "+redactedAMQP(mq.URL)]; !strings.HasPrefix(l, "ok   ") {
					t.Errorf("the node that answers: %q, want ok", l)
				}
			}
			for check, line := range checkLines(t, out) {
				if check != tc.check && strings.HasPrefix(line, "FAIL ") && !(tc.check == "database" && check == "clock") {
					t.Errorf("another check failed too: %q", line)
				}
			}
		})
	}
}

// TestDoctorOwnerLoginOptOut: database.allow_owner_login turns the refusal
// of an owner login into a warning that names the setting.
func TestDoctorOwnerLoginOptOut(t *testing.T) {
	t.Parallel()
	db, mq := testenv.Postgres(t), testenv.RabbitMQ(t)
	s := doctorSetup{dbURL: db.URL, adminURL: db.AdminURL, dbExtra: "allow_owner_login = true", amqpURL: mq.URL,
		pluginDir: testenv.PluginBinaries(t, "sink"), provider: `{ plugin = "sink", name = "primary" }`}
	out, stderr, code := runHerald(t, "doctor", "--config", writeDoctorConfig(t, s))
	l := checkLines(t, out)["database roles"]
	if code != 0 || !strings.HasPrefix(l, "warn ") || !strings.Contains(l, "database.allow_owner_login is set: database.api_url (empty: database.url) logs in as role") {
		t.Errorf("exit %d, database roles line %q\n%s%s", code, l, out, stderr)
	}
	// The audience every deployment once shared is a warning too.
	s.extra = `auth { audience = "herald" }`
	out, stderr, code = runHerald(t, "doctor", "--config", writeDoctorConfig(t, s))
	l = checkLines(t, out)["token audience"]
	if code != 0 || !strings.HasPrefix(l, "warn ") || !strings.Contains(l, `aud "herald" (auth.audience), the audience every deployment once shared`) {
		t.Errorf("exit %d, token audience line %q\n%s%s", code, l, out, stderr)
	}
}

// TestDoctorQueueType shows a queue of another type than amqp.queue_type
// as a failure, as herald serve would refuse it.
func TestDoctorQueueType(t *testing.T) {
	t.Parallel()
	db, mq := testenv.Postgres(t), testenv.RabbitMQ(t)
	cfg := writeDoctorConfig(t, doctorSetup{dbURL: db.URL, apiURL: db.APIURL, adminURL: db.AdminURL, amqpURL: mq.URL, pluginDir: testenv.PluginBinaries(t, "sink"),
		provider: `{ plugin = "sink", name = "primary" }`})
	ch := testenv.AMQPChannel(t, mq.URL)
	topo := broker.Topology{Exchange: "herald.deliveries", Queues: broker.DefaultQueues([]string{"TEST"})}
	topo.Queues[0].Quorum = true
	if err := topo.Declare(ch); err != nil {
		t.Fatal(err)
	}
	_ = ch.Close()
	out, _, code := runHerald(t, "doctor", "--config", cfg)
	l := checkLines(t, out)["broker "+redactedAMQP(mq.URL)]
	if code != 1 || !strings.HasPrefix(l, "FAIL ") || !strings.Contains(l, "amqp.queue_type: queue herald.test exists with another type than classic") {
		t.Errorf("exit %d, broker line %q\n%s", code, l, out)
	}
}
