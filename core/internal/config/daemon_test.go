package config

import (
	"fmt"
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
		"admin on every interface without a token": {`http { admin_listen = ":8081" }`, "http.admin_token_file"},
		"admin on a LAN address without a token":   {`http { admin_listen = "10.0.0.5:8081" }`, "http.admin_listen"},
		"zero read timeout":                        {`http { read_timeout = "0s" }`, "http.read_timeout"},
		"zero header limit":                        {`http { max_header_bytes = 0 }`, "http.max_header_bytes"},
		"negative connection cap":                  {`http { max_conns = -1 }`, "http.max_conns"},
		"negative rate":                            {`http { rate_limit { per_ip = -1 } }`, "http.rate_limit"},
		"rate without burst":                       {`http { rate_limit { burst = 0 } }`, "http.rate_limit.burst"},
		"misspelt rate key":                        {`http { rate_limit { per_keys = 1 } }`, "per_keys"},
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

func TestLoadDaemonHTTPBounds(t *testing.T) {
	hclPath := writeFile(t, "herald.hcl", `
http {
  admin_listen     = "0.0.0.0:8081"
  admin_token_file = "secrets/admin.token"
  read_timeout     = "5s"
  max_conns        = 0
  rate_limit {
    per_key = 2.5
    per_ip  = 0
    burst   = 7
  }
}
`)
	yamlPath := writeFile(t, "herald.yaml", `
http:
  admin_listen: "0.0.0.0:8081"
  admin_token_file: secrets/admin.token
  read_timeout: 5s
  max_conns: 0
  rate_limit: {per_key: 2.5, per_ip: 0, burst: 7}
`)
	for _, p := range []string{hclPath, yamlPath} {
		d, err := LoadDaemon(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		h := d.HTTP
		if h.ReadTimeout != 5*time.Second || h.MaxConns != 0 || h.RateLimit != (RateLimitConfig{PerKey: 2.5, Burst: 7}) {
			t.Fatalf("%s: http %+v", p, h)
		}
		if h.WriteTimeout != 30*time.Second || h.MaxHeaderBytes != 64<<10 || h.IdleTimeout != 2*time.Minute {
			t.Fatalf("%s: defaults not kept: %+v", p, h)
		}
		if want := filepath.Join(filepath.Dir(p), "secrets", "admin.token"); h.AdminTokenFile != want {
			t.Fatalf("%s: admin_token_file = %q, want %q (relative to the config file)", p, h.AdminTokenFile, want)
		}
	}
	t.Setenv("HERALD_HTTP_RATE_LIMIT_PER_IP", "9")
	t.Setenv("HERALD_HTTP_MAX_CONNS", "10")
	t.Setenv("HERALD_HTTP_ADMIN_TOKEN_FILE", "rel.token")
	d, err := LoadDaemon(hclPath)
	if err != nil {
		t.Fatal(err)
	}
	if d.HTTP.RateLimit.PerIP != 9 || d.HTTP.RateLimit.PerKey != 2.5 || d.HTTP.MaxConns != 10 || d.HTTP.AdminTokenFile != "rel.token" {
		t.Fatalf("env overrides: %+v", d.HTTP)
	}
}

func TestValidateAdminListen(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		listen, tokenFile string
		ok                bool
	}{
		"IPv4 loopback":                {"127.0.0.1:8081", "", true},
		"another loopback IPv4":        {"127.0.0.2:8081", "", true},
		"IPv6 loopback":                {"[::1]:8081", "", true},
		"localhost":                    {"localhost:8081", "", true},
		"off":                          {"", "", true},
		"every interface":              {":8081", "", false},
		"every IPv4 interface":         {"0.0.0.0:8081", "", false},
		"LAN address":                  {"192.168.1.5:8081", "", false},
		"host name":                    {"herald.internal:8081", "", false},
		"every interface with a token": {":8081", "/etc/herald/admin.token", true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := DefaultDaemon()
			d.HTTP.AdminListen, d.HTTP.AdminTokenFile = tc.listen, tc.tokenFile
			err := d.Validate()
			if tc.ok != (err == nil) {
				t.Fatalf("Validate() = %v, want ok %t", err, tc.ok)
			}
			if err != nil && (!strings.Contains(err.Error(), "http.admin_listen") || !strings.Contains(err.Error(), "http.admin_token_file")) {
				t.Fatalf("error %q does not name both keys", err)
			}
		})
	}
}

func TestLoadDaemonPlugins(t *testing.T) {
	d, err := LoadDaemon("")
	if err != nil {
		t.Fatal(err)
	}
	if d.Plugins.Watch || d.Plugins.InsecurePermissions || len(d.Plugins.Env) != 0 {
		t.Fatalf("plugin defaults: %+v, want no watching, permission checks on, no extra variables", d.Plugins)
	}
	hclPath := writeFile(t, "herald.hcl", `
plugins {
  dir                  = "plugins"
  watch                = true
  env                  = ["HTTPS_PROXY", "no_proxy"]
  insecure_permissions = true
}
`)
	yamlPath := writeFile(t, "herald.yaml", `
plugins: {dir: plugins, watch: true, env: [HTTPS_PROXY, no_proxy], insecure_permissions: true}
`)
	for _, p := range []string{hclPath, yamlPath} {
		d, err := LoadDaemon(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if !d.Plugins.Watch || !d.Plugins.InsecurePermissions || strings.Join(d.Plugins.Env, ",") != "HTTPS_PROXY,no_proxy" ||
			d.Plugins.Dir != filepath.Join(filepath.Dir(p), "plugins") {
			t.Fatalf("%s: plugins %+v", p, d.Plugins)
		}
	}
	t.Setenv("HERALD_PLUGINS_ENV", "HTTP_PROXY,HTTPS_PROXY")
	t.Setenv("HERALD_PLUGINS_WATCH", "true")
	if d, err = LoadDaemon(""); err != nil || strings.Join(d.Plugins.Env, ",") != "HTTP_PROXY,HTTPS_PROXY" || !d.Plugins.Watch {
		t.Fatalf("env override: %+v %v", d.Plugins, err)
	}
}

func TestLoadDaemonPluginEnvNames(t *testing.T) {
	tests := map[string]struct {
		name string
		want string
	}{
		"the database url":    {"HERALD_DATABASE_URL", "never passed to plugins"},
		"any herald variable": {"HERALD_ANYTHING", "never passed to plugins"},
		"plugin protocol":     {"PLUGIN_CLIENT_CERT", "plugin protocol"},
		"assignment":          {"A=B", "not a variable name"},
		"leading digit":       {"1PROXY", "not a variable name"},
		"empty":               {"", "empty variable name"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := writeFile(t, "herald.hcl", fmt.Sprintf("plugins { env = [%q] }", tc.name))
			_, err := LoadDaemon(p)
			if err == nil || !strings.Contains(err.Error(), "plugins.env") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v does not name plugins.env and say %q", err, tc.want)
			}
		})
	}
}
