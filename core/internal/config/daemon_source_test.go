package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A source block per service database: its URL may come from a secret
// file, every bad setting is named by its key, and a password in a
// source URL is one the redactor hides.
func TestLoadDaemonSources(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "orders.url"), []byte("postgres://orders:s3cret-pw@127.0.0.1:5432/orders\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "herald.hcl")
	if err := os.WriteFile(p, []byte(`
source "orders" {
  url     = "file:orders.url"
  tenants = ["acme", "globex"]
}
source "billing.v2" {
  url          = "postgres://b@127.0.0.1/billing"
  tenants      = ["acme"]
  batch_size   = 50
  poll_interval = "250ms"
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := LoadDaemon(p)
	if err != nil {
		t.Fatal(err)
	}
	o, b := d.Sources["orders"], d.Sources["billing.v2"]
	if o.URL != "postgres://orders:s3cret-pw@127.0.0.1:5432/orders" || strings.Join(o.Tenants, ",") != "acme,globex" {
		t.Fatalf("orders = %+v", o)
	}
	if b.BatchSize != 50 || b.PollInterval != 250*time.Millisecond || o.Defaults().BatchSize != 500 {
		t.Fatalf("billing.v2 = %+v, orders' defaults %+v", b, o.Defaults())
	}
	found := false
	for _, s := range d.SecretValues() {
		found = found || s == "s3cret-pw"
	}
	if !found {
		t.Fatalf("SecretValues %v lacks the source URL's password", d.SecretValues())
	}

	for name, tc := range map[string]struct{ body, want string }{
		"no url":          {`source "a" { tenants = ["acme"] }`, "source.a.url"},
		"no tenants":      {`source "a" { url = "postgres://x@h/d" }`, "source.a.tenants"},
		"bad tenant":      {"source \"a\" {\n" + `url = "postgres://x@h/d"` + "\n" + `tenants = ["acme", "no spaces"]` + "\n}", "source.a.tenants[1]"},
		"tenant twice":    {"source \"a\" {\n" + `url = "postgres://x@h/d"` + "\n" + `tenants = ["acme", "acme"]` + "\n}", "listed twice"},
		"huge batch":      {"source \"a\" {\n" + `url = "postgres://x@h/d"` + "\n" + `tenants = ["acme"]` + "\n" + `batch_size = 100000` + "\n}", "source.a.batch_size"},
		"negative poll":   {"source \"a\" {\n" + `url = "postgres://x@h/d"` + "\n" + `tenants = ["acme"]` + "\n" + `poll_interval = "-1s"` + "\n}", "source.a.poll_interval"},
		"misspelt key":    {`source "a" { urls = "postgres://x@h/d" }`, "urls"},
		"bad source name": {"source \"a b\" {\n" + `url = "postgres://x@h/d"` + "\n" + `tenants = ["acme"]` + "\n}", "source.a b"},
	} {
		t.Run(name, func(t *testing.T) {
			p := writeFile(t, "herald.hcl", tc.body)
			_, err := LoadDaemon(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v does not name %q", err, tc.want)
			}
		})
	}
}
