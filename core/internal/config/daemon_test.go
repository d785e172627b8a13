package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadDaemonHCLAndYAMLAgree(t *testing.T) {
	hclPath := writeFile(t, "herald.hcl", `
database { url = "postgres://a@127.0.0.1/x" }
amqp {
  queue "notification.restaurant" { bindings = ["RESTAURANT.*"] prefetch = 50 concurrency = 2 }
}
rules = ["rules/a.hcl"]
relay { batch_size = 10  poll_interval = "250ms" }
`)
	yamlPath := writeFile(t, "herald.yaml", `
database: {url: "postgres://a@127.0.0.1/x"}
amqp:
  queue:
    notification.restaurant: {bindings: ["RESTAURANT.*"], prefetch: 50, concurrency: 2}
rules: ["rules/a.hcl"]
relay: {batch_size: 10, poll_interval: 250ms}
`)
	h, err := LoadDaemon(hclPath)
	if err != nil {
		t.Fatal(err)
	}
	y, err := LoadDaemon(yamlPath)
	if err != nil {
		t.Fatal(err)
	}
	if h.Relay.PollInterval != 250*time.Millisecond || y.Relay.PollInterval != 250*time.Millisecond {
		t.Fatalf("poll interval: hcl %s yaml %s", h.Relay.PollInterval, y.Relay.PollInterval)
	}
	qh, qy := h.AMQP.Queues["notification.restaurant"], y.AMQP.Queues["notification.restaurant"]
	if qh.Prefetch != 50 || qy.Prefetch != 50 || qh.Bindings[0] != "RESTAURANT.*" || qy.Bindings[0] != "RESTAURANT.*" {
		t.Fatalf("queues differ: hcl %+v yaml %+v", qh, qy)
	}
	if filepath.Base(filepath.Dir(h.Rules[0])) != "rules" || !filepath.IsAbs(h.Rules[0]) {
		t.Fatalf("rules path not resolved against the config dir: %v", h.Rules)
	}
	if h.Relay.MaxAttempts != DefaultDaemon().Relay.MaxAttempts {
		t.Fatalf("default not kept: %d", h.Relay.MaxAttempts)
	}
}

func TestLoadDaemonEnvOverrides(t *testing.T) {
	t.Setenv("HERALD_DATABASE_URL", "postgres://env@127.0.0.1/y")
	t.Setenv("HERALD_RELAY_BATCH_SIZE", "7")
	d, err := LoadDaemon("")
	if err != nil {
		t.Fatal(err)
	}
	if d.Database.URL != "postgres://env@127.0.0.1/y" || d.Relay.BatchSize != 7 {
		t.Fatalf("env not applied: %+v", d)
	}
}

func TestLoadDaemonErrorsNameTheField(t *testing.T) {
	tests := map[string]struct {
		body string
		want string
	}{
		"unknown key":      {`relay { batchsize = 3 }`, "batchsize"},
		"bad duration":     {`retry { poll_interval = "soon" }`, "poll_interval"},
		"negative":         {`relay { batch_size = -1 }`, "relay.batch_size"},
		"queue no binding": {`amqp { queue "q" { prefetch = 1 } }`, "amqp.queue.q.bindings"},
		"bad level":        {`log { level = "loud" }`, "log.level"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := writeFile(t, "herald.hcl", tc.body)
			_, err := LoadDaemon(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("error %v does not name %q and the file", err, tc.want)
			}
		})
	}
}

func TestLoadDaemonSeveralQueuesWithDots(t *testing.T) {
	hclPath := writeFile(t, "herald.hcl", `
amqp {
  queue "notification.restaurant" { bindings = ["RESTAURANT.*"] prefetch = 50 }
  queue "notification.customer"   { bindings = ["CUSTOMER.*"] quorum = true }
  queue "plain"                   { bindings = ["*.X", "*.Y"] }
}
`)
	yamlPath := writeFile(t, "herald.yaml", `
amqp:
  queue:
    notification.restaurant: {bindings: ["RESTAURANT.*"], prefetch: 50}
    notification.customer: {bindings: ["CUSTOMER.*"], quorum: true}
    plain: {bindings: ["*.X", "*.Y"]}
`)
	for _, p := range []string{hclPath, yamlPath} {
		d, err := LoadDaemon(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		q := d.AMQP.Queues
		if len(q) != 3 || q["notification.restaurant"].Prefetch != 50 || !q["notification.customer"].Quorum ||
			len(q["plain"].Bindings) != 2 {
			t.Fatalf("%s: queues %+v", p, q)
		}
	}
	bad := writeFile(t, "bad.hcl", `amqp { queue "q.x" { bindings = ["*.X"] prefetc = 5 } }`)
	if _, err := LoadDaemon(bad); err == nil || !strings.Contains(err.Error(), "amqp.queue.q.x") || !strings.Contains(err.Error(), "prefetc") {
		t.Fatalf("misspelt queue key: %v", err)
	}
}

func TestLoadDaemonDatabaseRoles(t *testing.T) {
	d, err := LoadDaemon(writeFile(t, "herald.hcl", `
database {
  url         = "postgres://a@127.0.0.1/x"
  api_url     = "postgres://api@127.0.0.1/x"
  api_role    = ""
  worker_role = "w"
}
`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Database.APIURL != "postgres://api@127.0.0.1/x" || d.Database.APIRole != "" || d.Database.WorkerRole != "w" ||
		d.Database.AdminRole != "herald_admin" || d.Database.APIMaxConns != 8 {
		t.Fatalf("database: %+v", d.Database)
	}
	t.Setenv("HERALD_DATABASE_API_ROLE", "api_x")
	if d, err = LoadDaemon(""); err != nil || d.Database.APIRole != "api_x" || d.Database.WorkerRole != "herald_worker" {
		t.Fatalf("env override: %+v %v", d.Database, err)
	}
	_, err = LoadDaemon(writeFile(t, "bad.hcl", `database { admin_role = "x\"; DROP" }`))
	if err == nil || !strings.Contains(err.Error(), "database.admin_role") {
		t.Fatalf("a quote in a role name: %v", err)
	}
	_, err = LoadDaemon(writeFile(t, "bad2.hcl", `database { api_max_conns = 0 }`))
	if err == nil || !strings.Contains(err.Error(), "database.api_max_conns") {
		t.Fatalf("api_max_conns 0: %v", err)
	}
}
