package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestDaemonFileIsHCL2: the daemon file is read with HCL2, as the rules
// are: expressions are evaluated, and every error names the file, the line
// and the key.
func TestDaemonFileIsHCL2(t *testing.T) {
	t.Parallel()
	d, err := LoadDaemon(writeFile(t, "herald.hcl", `
database {
  max_conns = 8 * 2
}
http {
  read_timeout = "${10 + 20}s"
  rate_limit {
    per_key = 100 / 4
  }
}
`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Database.MaxConns != 16 || d.HTTP.ReadTimeout != 30*time.Second || d.HTTP.RateLimit.PerKey != 25 {
		t.Fatalf("max_conns %d, read_timeout %s, per_key %g: want 16, 30s, 25", d.Database.MaxConns, d.HTTP.ReadTimeout, d.HTTP.RateLimit.PerKey)
	}

	tests := map[string]struct {
		body string
		want []string // each must be in the error
	}{
		"two http blocks": {"http {\n  listen = \"127.0.0.1:1\"\n}\n\nhttp {\n  pprof = true\n}\n",
			[]string{"herald.hcl:5:", "http", "given twice (first at line 1)"}},
		"unknown key": {"relay {\n  batch_size = 3\n  bacth_size = 4\n}\n",
			[]string{"herald.hcl:3:", "relay.bacth_size", "unknown key", "did you mean batch_size?"}},
		"unknown section": {"\n\nrelays {\n  workers = 2\n}\n", []string{"herald.hcl:3:", "relays", "unknown key"}},
		"wrong type": {"database {\n  max_conns = \"many\"\n}\n",
			[]string{"herald.hcl:2:", "database.max_conns", "want a whole number", `"many"`}},
		"number for a duration": {"\nsupervisor {\n  shutdown_grace = 30\n}\n",
			[]string{"herald.hcl:3:", "supervisor.shutdown_grace", "not a duration", `"30s"`}},
		"list for a string": {"http {\n  listen = [\"a\"]\n}\n", []string{"herald.hcl:2:", "http.listen", "want a string"}},
		"value for a block": {"http = 5\n", []string{"herald.hcl:1:", "http", "want a block"}},
		"queue key":         {"amqp {\n  queue \"a.b\" {\n    bindings = [\"*.X\"]\n    prefetc = 1\n  }\n}\n", []string{"herald.hcl:4:", "amqp.queue.a.b.prefetc", "did you mean prefetch?"}},
		"queue twice": {"amqp {\n  queue \"q\" { bindings = [\"*.X\"] }\n  queue \"q\" { bindings = [\"*.Y\"] }\n}\n",
			[]string{"herald.hcl:3:", "amqp.queue.q", "given twice (first at line 2)"}},
		"attribute and block":       {"http = {}\nhttp {\n}\n", []string{"herald.hcl:2:", "http", "given twice (first at line 1)"}},
		"syntax error":              {"http {\n  listen = \n}\n", []string{"herald.hcl:2:"}},
		"variables":                 {"http {\n  listen = var.x\n}\n", []string{"herald.hcl:2:", "Variables not allowed"}},
		"functions":                 {"http {\n  listen = upper(\"x\")\n}\n", []string{"herald.hcl:2:", "Function calls not allowed"}},
		"for expression":            {"rules = [for r in [\"a\"] : r]\n", []string{"herald.hcl:1:", "rules", "for expressions are not allowed"}},
		"two labels":                {"amqp {\n  queue \"a\" \"b\" {}\n}\n", []string{"herald.hcl:2:", "amqp.queue", "at most one label"}},
		"validation names the line": {"\nrelay {\n  workers = 0\n}\n", []string{"herald.hcl:3:", "relay.workers", "must be positive"}},
		"null":                      {"http {\n  listen = null\n}\n", []string{"herald.hcl:2:", "http.listen", "null"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadDaemon(writeFile(t, "herald.hcl", tc.body))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestDaemonFileYAMLErrorsNameTheLine: a YAML daemon file's errors name
// the line and the key too.
func TestDaemonFileYAMLErrorsNameTheLine(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		body string
		want []string
	}{
		"unknown key": {"relay:\n  batch_size: 3\n  bacth_size: 4\n", []string{"herald.yaml:3:", "relay.bacth_size", "unknown key"}},
		"wrong type":  {"database:\n  max_conns: many\n", []string{"herald.yaml:2:", "database.max_conns", "want a whole number"}},
		"key twice":   {"http:\n  listen: a\n  listen: b\n", []string{"herald.yaml", "listen"}},
		"not a map":   {"- a\n- b\n", []string{"herald.yaml:1:", "mapping"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadDaemon(writeFile(t, "herald.yaml", tc.body))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestDaemonEnvOverridesANestedKey: every setting outside labelled blocks
// has its HERALD_* variable, nested sections included; a value of the
// wrong type names the variable and the key.
func TestDaemonEnvOverridesANestedKey(t *testing.T) {
	p := writeFile(t, "herald.hcl", "http {\n  rate_limit {\n    burst = 5\n  }\n}\n")
	t.Setenv("HERALD_HTTP_RATE_LIMIT_BURST", "9")
	t.Setenv("HERALD_LIVE_ALLOWED_ORIGINS", "a.example.com,*.b.example.com")
	d, err := LoadDaemon(p)
	if err != nil {
		t.Fatal(err)
	}
	if d.HTTP.RateLimit.Burst != 9 {
		t.Fatalf("http.rate_limit.burst = %d, want 9 from the environment", d.HTTP.RateLimit.Burst)
	}
	if diff := cmp.Diff([]string{"a.example.com", "*.b.example.com"}, d.Live.AllowedOrigins); diff != "" {
		t.Fatalf("live.allowed_origins (-want +got):\n%s", diff)
	}
	t.Setenv("HERALD_RELAY_WORKERS", "0")
	_, err = LoadDaemon(p)
	if err == nil || !strings.Contains(err.Error(), "environment: HERALD_RELAY_WORKERS (relay.workers): must be positive") {
		t.Fatalf("a bad value from the environment: %v", err)
	}
	t.Setenv("HERALD_RELAY_WORKERS", "3")
	t.Setenv("HERALD_HTTP_RATE_LIMIT_BURST", "lots")
	_, err = LoadDaemon(p)
	if err == nil || !strings.Contains(err.Error(), "HERALD_HTTP_RATE_LIMIT_BURST (http.rate_limit.burst)") ||
		!strings.Contains(err.Error(), "want a whole number") {
		t.Fatalf("a wrong type from the environment: %v", err)
	}
}

// TestDaemonEnvNamesKept: the HERALD_* variables the scripts, the
// packaging, the tests and the docs use still name their settings.
func TestDaemonEnvNamesKept(t *testing.T) {
	t.Parallel()
	envs := map[string]string{}
	for _, s := range Settings() {
		if s.Env != "" {
			envs[s.Env] = s.Key
		}
	}
	for env, key := range map[string]string{
		"HERALD_DATABASE_URL": "database.url", "HERALD_DATABASE_API_URL": "database.api_url", "HERALD_DATABASE_API_ROLE": "database.api_role",
		"HERALD_AMQP_URL": "amqp.url", "HERALD_AMQP_URLS": "amqp.urls", "HERALD_AMQP_QUEUE_TYPE": "amqp.queue_type",
		"HERALD_AMQP_TLS_CA_FILE": "amqp.tls_ca_file", "HERALD_HTTP_LISTEN": "http.listen",
		"HERALD_HTTP_ADMIN_TOKEN_FILE": "http.admin_token_file", "HERALD_PLUGINS_DIR": "plugins.dir", "HERALD_PLUGINS_ENV": "plugins.env",
		"HERALD_PLUGINS_WATCH": "plugins.watch", "HERALD_RULES": "rules", "HERALD_RELAY_BATCH_SIZE": "relay.batch_size",
		"HERALD_PUBLISHER_HANDOFF": "publisher.handoff", "HERALD_SUPERVISOR_SHUTDOWN_GRACE": "supervisor.shutdown_grace",
		"HERALD_SUPERVISOR_LIVENESS_TIMEOUT": "supervisor.liveness_timeout", "HERALD_TRACING_EXPORTER": "tracing.exporter",
		"HERALD_LOG_LEVEL": "log.level", "HERALD_HTTP_RATE_LIMIT_PER_IP": "http.rate_limit.per_ip",
		"HERALD_RETENTION_DELIVERIES": "retention.deliveries",
	} {
		if envs[env] != key {
			t.Errorf("%s names %q, want %q", env, envs[env], key)
		}
	}
}

// TestDaemonDefaultsDeriveFromTheStructs: the defaults koanf starts from
// are DefaultDaemon, so loading nothing gives DefaultDaemon back.
func TestDaemonDefaultsDeriveFromTheStructs(t *testing.T) {
	t.Parallel()
	d, err := LoadDaemon("")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(DefaultDaemon(), d); diff != "" {
		t.Fatalf("LoadDaemon(\"\") differs from DefaultDaemon() (-want +got):\n%s", diff)
	}
}

// TestRelayWorkersDefault: the relay runs two workers unless told
// otherwise, whether the daemon's config or the relay's own defaults
// apply (they once said 2 and 1).
func TestRelayWorkersDefault(t *testing.T) {
	t.Parallel()
	d, err := LoadDaemon(writeFile(t, "herald.hcl", "relay {\n  batch_size = 10\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Relay.Workers != 2 {
		t.Fatalf("relay.workers = %d, want 2", d.Relay.Workers)
	}
}

// TestConfirmWindowIsIgnoredWithAWarning: publisher.confirm_window, which
// no code read, loads with a warning naming the file, the line and the key
// (from the environment: the variable).
func TestConfirmWindowIsIgnoredWithAWarning(t *testing.T) {
	p := writeFile(t, "herald.hcl", "publisher {\n  batch_size     = 500\n  confirm_window = 1000\n}\n")
	d, err := LoadDaemon(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], p+":3: publisher.confirm_window is ignored") {
		t.Fatalf("warnings %q", d.Warnings)
	}
	t.Setenv("HERALD_PUBLISHER_CONFIRM_WINDOW", "10")
	d, err = LoadDaemon("")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "HERALD_PUBLISHER_CONFIRM_WINDOW (publisher.confirm_window) is ignored") {
		t.Fatalf("warnings %q", d.Warnings)
	}
}

// TestEverySettingHasADoc: the configuration reference needs a doc
// comment on every setting's field.
func TestEverySettingHasADoc(t *testing.T) {
	t.Parallel()
	docs, err := fieldDocs(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range Settings() {
		if docs.of(s) == "" {
			t.Errorf("%s (%s.%s) has no doc comment", s.Key, s.Owner, s.Field)
		}
	}
}

// TestShippedDaemonFilesLoad: the example and the packaged daemon files
// load without errors or warnings.
func TestShippedDaemonFilesLoad(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	for _, p := range []string{"examples/herald.hcl", "packaging/herald.hcl"} {
		d, err := LoadDaemon(filepath.Join(root, p))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if len(d.Warnings) > 0 {
			t.Errorf("%s: warnings %q", p, d.Warnings)
		}
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal(fmt.Errorf("no go.mod above the test's directory"))
		}
		dir = parent
	}
}
