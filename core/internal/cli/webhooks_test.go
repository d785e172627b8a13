package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// `herald tenants webhook set|show|rotate|remove` manages a tenant's
// webhook: the secret printed once, bad flags named, another tenant
// untouched.
func TestTenantWebhook(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	cfg := filepath.Join(t.TempDir(), "herald.hcl")
	if err := os.WriteFile(cfg, []byte("database { url = \""+db.URL+"\" }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"acme", "globex"} {
		if err := store.EnsureTenant(ctx, db.Pool, id, ""); err != nil {
			t.Fatal(err)
		}
	}
	run := func(wantCode int, wantOut string, args ...string) string {
		t.Helper()
		out, errOut, code := runHerald(t, append([]string{"tenants", "webhook"}, append(args, "--config", cfg)...)...)
		if code != wantCode || !strings.Contains(out+errOut, wantOut) {
			t.Fatalf("herald tenants webhook %v: exit %d, stdout %q, stderr %q; want exit %d saying %q", args, code, out, errOut, wantCode, wantOut)
		}
		return out
	}
	run(2, "--url must be https", "set", "--tenant", "acme", "--url", "http://hooks.example.com/h", "--kinds", "delivery.sent")
	run(2, "status_events.webhook_allow_loopback", "set", "--tenant", "acme", "--url", "http://127.0.0.1:8080/h", "--kinds", "delivery.sent")
	run(2, "--url address 10.1.1.1 is private or reserved", "set", "--tenant", "acme", "--url", "https://10.1.1.1/h", "--kinds", "delivery.sent")
	run(2, "--kinds: kinds[1] is \"delivery.lost\"", "set", "--tenant", "acme", "--url", "https://hooks.example.com/h", "--kinds", "delivery.sent,delivery.lost")
	run(2, "--kinds: kinds is empty", "set", "--tenant", "acme", "--url", "https://hooks.example.com/h")
	run(2, "--tenant: no tenant \"initech\"", "set", "--tenant", "initech", "--url", "https://hooks.example.com/h", "--kinds", "delivery.sent")
	run(2, "--tenant is required", "show")
	run(2, "tenant acme has no webhook", "show", "--tenant", "acme")
	out := run(0, "secret (shown once): whsec_", "set", "--tenant", "acme", "--url", "https://hooks.example.com/h", "--kinds", "delivery.sent,notification.acted")
	if again := run(0, "webhook of tenant acme", "set", "--tenant", "acme", "--url", "https://hooks.example.com/v2", "--kinds", "delivery.failed"); strings.Contains(again, "whsec_") {
		t.Fatalf("a change printed a secret: %q", again)
	}
	if show := run(0, "https://hooks.example.com/v2", "show", "--tenant", "acme"); strings.Contains(show, "whsec_") {
		t.Fatalf("show printed a secret: %q", show)
	}
	rot := run(0, "the previous secret signs too until", "rotate", "--tenant", "acme", "--overlap", "2h")
	if rot == out {
		t.Fatal("rotate printed the same output as set")
	}
	run(2, "--overlap must be from 0s to 168h", "rotate", "--tenant", "acme", "--overlap", "400h")
	run(2, "tenant globex has no webhook", "rotate", "--tenant", "globex")
	run(0, "previous secret signs too until", "show", "--tenant", "acme")
	run(2, "tenant globex has no webhook", "remove", "--tenant", "globex")
	run(0, "webhook of tenant acme removed", "remove", "--tenant", "acme")
	run(2, "tenant acme has no webhook", "show", "--tenant", "acme")
}
