package config

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/httpguard"
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
  queue "notification.restaurant" {
    bindings    = ["RESTAURANT.*"]
    prefetch    = 50
    concurrency = 2
  }
}
rules = ["rules/a.hcl"]
relay {
  batch_size    = 10
  poll_interval = "250ms"
}
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
		"queue no binding": {"amqp {\n  queue \"q\" { prefetch = 1 }\n}", "amqp.queue.q.bindings"},
		"bad level":        {`log { level = "loud" }`, "log.level"},
		"admin on every interface without a token": {`http { admin_listen = ":8081" }`, "http.admin_token_file"},
		"admin on a LAN address without a token":   {`http { admin_listen = "10.0.0.5:8081" }`, "http.admin_listen"},
		"zero read timeout":                        {`http { read_timeout = "0s" }`, "http.read_timeout"},
		"zero header limit":                        {`http { max_header_bytes = 0 }`, "http.max_header_bytes"},
		"negative connection cap":                  {`http { max_conns = -1 }`, "http.max_conns"},
		"negative rate":                            {"http {\n  rate_limit { per_ip = -1 }\n}", "http.rate_limit"},
		"rate without burst":                       {"http {\n  rate_limit { burst = 0 }\n}", "http.rate_limit.burst"},
		"misspelt rate key":                        {"http {\n  rate_limit { per_keys = 1 }\n}", "per_keys"},
		"zero shutdown grace":                      {`supervisor { shutdown_grace = "0s" }`, "supervisor.shutdown_grace"},
		"negative liveness timeout":                {`supervisor { liveness_timeout = "-1s" }`, "supervisor.liveness_timeout"},
		"shutdown grace not a duration":            {`supervisor { shutdown_grace = 30 }`, "shutdown_grace"},
		"misspelt supervisor key":                  {`supervisor { grace = "1s" }`, "grace"},
		"negative memory limit":                    {`runtime { memory_limit_mib = -1 }`, "runtime.memory_limit_mib"},
		"memory limit below the idle daemon":       {`runtime { memory_limit_mib = 8 }`, "runtime.memory_limit_mib"},
		"memory limit not a number":                {`runtime { memory_limit_mib = "a lot" }`, "memory_limit_mib"},
		"unknown traces exporter":                  {`tracing { exporter = "zipkin" }`, "tracing.exporter"},
		"misspelt tracing key":                     {`tracing { exporters = "otlp" }`, "exporters"},
		"no digest workers":                        {`digest { workers = 0 }`, "digest.workers"},
		"digest batch over the bound":              {`digest { batch_size = 100000 }`, "digest.batch_size"},
		"digest poll not a duration":               {`digest { poll_interval = "often" }`, "poll_interval"},
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
  queue "notification.restaurant" {
    bindings = ["RESTAURANT.*"]
    prefetch = 50
  }
  queue "notification.customer" {
    bindings = ["CUSTOMER.*"]
    quorum   = true
  }
  queue "plain" { bindings = ["*.X", "*.Y"] }
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
	bad := writeFile(t, "bad.hcl", "amqp {\n  queue \"q.x\" {\n    bindings = [\"*.X\"]\n    prefetc  = 5\n  }\n}")
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

// TestLoadDaemonSupervisor: the supervisor's bounds from HCL, YAML and the
// environment, with their defaults when absent.
func TestLoadDaemonSupervisor(t *testing.T) {
	d, err := LoadDaemon("")
	if err != nil {
		t.Fatal(err)
	}
	if d.Supervisor != (SupervisorConfig{ShutdownGrace: 30 * time.Second, LivenessTimeout: time.Minute}) {
		t.Fatalf("defaults: %+v", d.Supervisor)
	}
	for _, p := range []string{
		writeFile(t, "herald.hcl", "supervisor {\n  shutdown_grace = \"45s\"\n}\n"),
		writeFile(t, "herald.yaml", "supervisor:\n  shutdown_grace: 45s\n"),
	} {
		d, err := LoadDaemon(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if d.Supervisor != (SupervisorConfig{ShutdownGrace: 45 * time.Second, LivenessTimeout: time.Minute}) {
			t.Fatalf("%s: %+v", p, d.Supervisor)
		}
	}
	t.Setenv("HERALD_SUPERVISOR_SHUTDOWN_GRACE", "5s")
	t.Setenv("HERALD_SUPERVISOR_LIVENESS_TIMEOUT", "2s")
	if d, err = LoadDaemon(""); err != nil {
		t.Fatal(err)
	}
	if d.Supervisor != (SupervisorConfig{ShutdownGrace: 5 * time.Second, LivenessTimeout: 2 * time.Second}) {
		t.Fatalf("env overrides: %+v", d.Supervisor)
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
		if h.ReadTimeout != 5*time.Second || h.MaxConns != 0 || h.RateLimit != (httpguard.RateLimits{PerKey: 2.5, Burst: 7}) {
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

func TestLoadDaemonSecretReferences(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "db-url"), []byte("postgres://herald:db-pa55word@127.0.0.1/h?sslmode=disable\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HERALD_TEST_AMQP_URL", "amqps://u:mq-pa55word@mq.example:5671/vh")
	t.Setenv("HERALD_TEST_BATCH", "12")
	t.Setenv("HERALD_TEST_CA", "ca.pem")
	t.Setenv("HERALD_TEST_BINDING", "*.X")
	p := filepath.Join(dir, "herald.hcl")
	body := `
database { url = "file:db-url" }
amqp {
  url         = "env:HERALD_TEST_AMQP_URL"
  tls_ca_file = "env:HERALD_TEST_CA"
  exchange    = "raw:env:literal"
  queue "q" {
    bindings = ["env:HERALD_TEST_BINDING"]
    prefetch = "env:HERALD_TEST_BATCH"
  }
}
relay { batch_size = "env:HERALD_TEST_BATCH" }
`
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := LoadDaemon(p)
	if err != nil {
		t.Fatal(err)
	}
	if d.Database.URL != "postgres://herald:db-pa55word@127.0.0.1/h?sslmode=disable" {
		t.Errorf("database.url = %q", d.Database.URL)
	}
	if d.AMQP.URL != "amqps://u:mq-pa55word@mq.example:5671/vh" || d.AMQP.Exchange != "env:literal" {
		t.Errorf("amqp = %+v", d.AMQP)
	}
	if d.AMQP.TLSCAFile != filepath.Join(dir, "ca.pem") {
		t.Errorf("tls_ca_file %q is not relative to the config file", d.AMQP.TLSCAFile)
	}
	if d.Relay.BatchSize != 12 || d.AMQP.Queues["q"].Prefetch != 12 || d.AMQP.Queues["q"].Bindings[0] != "*.X" {
		t.Errorf("non-string fields: batch %d queue %+v", d.Relay.BatchSize, d.AMQP.Queues["q"])
	}
	if got := d.SecretValues(); len(got) != 2 || got[0] != "db-pa55word" || got[1] != "mq-pa55word" {
		t.Errorf("SecretValues = %q", got)
	}
	d.Database.APIURL, d.Database.AdminURL = "postgres://a:api-pa55@h/x", "postgres://b:admin-pa55@h/x"
	if got := d.SecretValues(); !slices.Contains(got, "api-pa55") || !slices.Contains(got, "admin-pa55") {
		t.Errorf("SecretValues without the pools' logins' passwords: %q", got)
	}

	// An environment override may be a reference too.
	t.Setenv("HERALD_DATABASE_URL", "file:db-url")
	if d, err = LoadDaemon(p); err != nil || !strings.Contains(d.Database.URL, "db-pa55word") {
		t.Fatalf("override by reference: %v %q", err, d.Database.URL)
	}
}

func TestLoadDaemonSecretReferenceErrors(t *testing.T) {
	tests := map[string]struct {
		body string
		env  map[string]string
		want []string
	}{
		"env unset": {body: `amqp { url = "env:HERALD_TEST_UNSET_X" }`,
			want: []string{"amqp.url", "env:HERALD_TEST_UNSET_X", "environment variable HERALD_TEST_UNSET_X is not set"}},
		"file missing": {body: `database { url = "file:nope" }`,
			want: []string{"database.url", "file:nope", "no such file or directory"}},
		"bad env name": {body: `log { level = "env:1x" }`, want: []string{"log.level", "want env:NAME"}},
		"override unset": {body: ``, env: map[string]string{"HERALD_AMQP_URL": "env:HERALD_TEST_UNSET_Y"},
			want: []string{"HERALD_AMQP_URL", "amqp.url", "HERALD_TEST_UNSET_Y is not set"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			p := writeFile(t, "herald.hcl", tc.body)
			_, err := LoadDaemon(p)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadDaemonAMQPTLS(t *testing.T) {
	tests := map[string]struct {
		body string
		want string
	}{
		"tls keys with amqp://": {`amqp { tls_ca_file = "/ca.pem" }`, "amqp.tls_* settings need an amqps:// URL"},
		"cert without key":      {"amqp {\n  url           = \"amqps://mq/\"\n  tls_cert_file = \"/c.pem\"\n}", "amqp.tls_cert_file"},
		"bad scheme":            {`amqp { url = "http://mq/" }`, `scheme "http"`},
		// url.Parse would repeat the URL, password and all.
		"unparsable URL": {`amqp { url = "amqps://guest:pa%zzssword@mq/" }`, "not a valid URL"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := LoadDaemon(writeFile(t, "herald.hcl", tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "zzssword") {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}

	d, err := LoadDaemon(writeFile(t, "herald.hcl", `amqp { url = "amqps://mq/" }`))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := d.AMQP.TLSConfig(); c != nil || err != nil {
		t.Fatalf("no tls_* keys: want the client's defaults, got %v %v", c, err)
	}
	d.AMQP.TLSCAFile = writeFile(t, "ca.pem", "not a certificate")
	if _, err := d.AMQP.TLSConfig(); err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Fatalf("bad CA file: %v", err)
	}
	d.AMQP.TLSCAFile = filepath.Join(t.TempDir(), "missing.pem")
	if _, err := d.AMQP.TLSConfig(); err == nil || !strings.Contains(err.Error(), "amqp.tls_ca_file") {
		t.Fatalf("missing CA file: %v", err)
	}
}

// TestExampleDaemonConfigLoads loads examples/herald.hcl, the quick
// start's config, and the production settings its comments suggest.

func TestExampleDaemonConfigLoads(t *testing.T) {
	d, err := LoadDaemon("../../../examples/herald.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Rules) != 1 || !strings.HasSuffix(d.Rules[0], "quickstart/rules.hcl") {
		t.Fatalf("rules = %v", d.Rules)
	}
	// The logins' passfile is relative to the file: the repository's .herald.
	wantPassfile := url.QueryEscape(filepath.Join("../../../examples", "../.herald/db-logins.pgpass"))
	for key, u := range map[string]string{"api_url": d.Database.APIURL, "admin_url": d.Database.AdminURL} {
		if !strings.Contains(u, "passfile="+wantPassfile) || !strings.Contains(u, "_login@") {
			t.Errorf("database.%s = %q, want a login of its own with passfile %s", key, u, wantPassfile)
		}
	}
	secretFile := writeFile(t, "herald-database-url",
		"postgres://herald:pa55@db.internal:5432/herald?sslmode=verify-full&sslrootcert=/etc/herald/pg-ca.pem\n")
	t.Setenv("HERALD_DATABASE_URL", "file:"+secretFile)
	t.Setenv("HERALD_AMQP_URL", "env:HERALD_BROKER_URL")
	t.Setenv("HERALD_BROKER_URL", "amqps://herald:pa55@mq.internal:5671/herald")
	t.Setenv("HERALD_AMQP_TLS_CA_FILE", "/etc/herald/mq-ca.pem")
	if d, err = LoadDaemon("../../../examples/herald.hcl"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d.Database.URL, "sslmode=verify-full") || d.AMQP.URL != "amqps://herald:pa55@mq.internal:5671/herald" ||
		d.AMQP.TLSCAFile != "/etc/herald/mq-ca.pem" {
		t.Fatalf("production settings: %+v %+v", d.Database, d.AMQP)
	}
}

func TestRetentionConfig(t *testing.T) {
	t.Parallel()
	d, err := LoadDaemon(writeFile(t, "herald.hcl", "retention {\n  delivery_attempts = \"720h\"\n  notifications = \"8760h\"\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Retention.DeliveryAttempts != 720*time.Hour || d.Retention.Notifications != 8760*time.Hour {
		t.Fatalf("retention = %+v, want 720h and 8760h", d.Retention)
	}
	if _, err := LoadDaemon(writeFile(t, "herald.hcl", "retention {\n  notifications = \"23h\"\n}\n")); err == nil ||
		!strings.Contains(err.Error(), "retention.notifications") {
		t.Errorf("retention.notifications = 23h: want an error naming the field, got %v", err)
	}
	if d, err := LoadDaemon(""); err != nil || d.Retention.DeliveryAttempts != 0 {
		t.Fatalf("default retention %s (%v), want 0 (forever)", d.Retention.DeliveryAttempts, err)
	}
	for _, body := range []string{`"1h"`, `"-720h"`, `"30 days"`, `true`} {
		_, err := LoadDaemon(writeFile(t, "herald.hcl", "retention {\n  delivery_attempts = "+body+"\n}\n"))
		if err == nil || !strings.Contains(err.Error(), "delivery_attempts") {
			t.Errorf("retention.delivery_attempts = %s: want an error naming the field, got %v", body, err)
		}
	}
}

// TestTenantRetentionConfig: tenant blocks in retention give tenants
// their own, shorter, periods; a longer one, an archived period longer
// than the notifications', a period under a day and a misspelt key are
// refused, each error naming its key.
func TestTenantRetentionConfig(t *testing.T) {
	t.Parallel()
	d, err := LoadDaemon(writeFile(t, "herald.hcl", `retention {
  delivery_attempts      = "720h"
  notifications          = "8760h"
  archived_notifications = "720h"
  events                 = "720h"
  tenant "acme" {
    notifications          = "2160h"
    archived_notifications = "168h"
    events                 = "168h"
    delivery_attempts      = "240h"
  }
  tenant "beta.example" { events = "48h" }
}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := RetentionConfig{DeliveryAttempts: 720 * time.Hour, Notifications: 8760 * time.Hour, ArchivedNotifications: 720 * time.Hour,
		Events: 720 * time.Hour, Tenants: map[string]TenantRetentionConfig{
			"acme":         {Notifications: 2160 * time.Hour, ArchivedNotifications: 168 * time.Hour, Events: 168 * time.Hour, DeliveryAttempts: 240 * time.Hour},
			"beta.example": {Events: 48 * time.Hour},
		}}
	if !reflect.DeepEqual(d.Retention, want) {
		t.Fatalf("retention = %+v\nwant %+v", d.Retention, want)
	}
	yml := writeFile(t, "herald.yaml", "retention:\n  events: 720h\n  tenant:\n    acme:\n      events: 24h\n")
	if d, err := LoadDaemon(yml); err != nil || d.Retention.Tenants["acme"].Events != 24*time.Hour {
		t.Fatalf("yaml tenant retention: %+v (%v)", d.Retention, err)
	}
	for name, tc := range map[string]struct{ body, want string }{
		"archived longer than notifications": {`retention {
  notifications = "720h"
  archived_notifications = "8760h"
}`, "retention.archived_notifications: 8760h0m0s is longer than retention.notifications"},
		"tenant longer than global": {`retention {
  notifications = "720h"
  tenant "acme" { notifications = "2160h" }
}`, "retention.tenant.acme.notifications: 2160h0m0s is longer than retention.notifications"},
		"tenant events longer than global": {`retention {
  events = "168h"
  tenant "acme" { events = "720h" }
}`, "retention.tenant.acme.events"},
		"tenant archived longer than its notifications": {`retention {
  tenant "acme" {
    notifications = "240h"
    archived_notifications = "720h"
  }
}`, "retention.tenant.acme.archived_notifications"},
		"events under a day":        {`retention { events = "2h" }`, "retention.events"},
		"tenant period under a day": {"retention {\n  tenant \"acme\" { delivery_attempts = \"1h\" }\n}", "retention.tenant.acme.delivery_attempts"},
		"misspelt tenant key":       {"retention {\n  tenant \"acme\" { event = \"48h\" }\n}", "event"},
		"tenant not a duration":     {"retention {\n  tenant \"acme\" { events = 48 }\n}", "retention.tenant.acme"},
		"tenant twice": {`retention {
  tenant "acme" { events = "48h" }
  tenant "acme" { events = "72h" }
}`, "retention.tenant.acme"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := LoadDaemon(writeFile(t, "herald.hcl", tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}

// TestRetentionOfDeliveries: retention.deliveries is read as a duration,
// kept forever by default, and refused below 24h naming the key.
func TestRetentionOfDeliveries(t *testing.T) {
	t.Parallel()
	d, err := LoadDaemon(writeFile(t, "herald.hcl", "retention {\n  deliveries = \"2160h\"\n}\n"))
	if err != nil || d.Retention.Deliveries != 2160*time.Hour {
		t.Fatalf("retention.deliveries = %s (%v), want 2160h", d.Retention.Deliveries, err)
	}
	if d, err := LoadDaemon(""); err != nil || d.Retention.Deliveries != 0 {
		t.Fatalf("default retention.deliveries %s (%v), want 0 (forever)", d.Retention.Deliveries, err)
	}
	for _, body := range []string{`"23h"`, `"-2160h"`, `"90 days"`} {
		_, err := LoadDaemon(writeFile(t, "herald.hcl", "retention {\n  deliveries = "+body+"\n}\n"))
		if err == nil || !strings.Contains(err.Error(), "retention.deliveries") {
			t.Errorf("retention.deliveries = %s: want an error naming retention.deliveries, got %v", body, err)
		}
	}
}
