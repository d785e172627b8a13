package integration

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/sdk/producer"
)

// TestServeRefusesAnAPIRoleThatBypassesRLS starts a real herald serve whose
// API would run as the tables' owner: it must exit at once, saying why.
func TestServeRefusesAnAPIRoleThatBypassesRLS(t *testing.T) {
	e := newEnv(t, "sent")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, heraldBinary(t), "serve", "--config", e.cfgPath)
	cmd.Env = append(cmd.Environ(), "HERALD_DATABASE_API_URL=", "HERALD_DATABASE_API_ROLE=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ctx.Err() != nil {
		t.Fatalf("herald serve with the owner as API role: want a non-zero exit, got %v:\n%s", err, out)
	}
	if !strings.Contains(string(out), "refusing to start") || !strings.Contains(string(out), "database.api_role") {
		t.Fatalf("the refusal does not say what to fix:\n%s", out)
	}
}

// TestServeRefusesTheOwnerLogin starts a real herald serve whose API or
// superadmin pool would log in as database.url's role, the tables' owner,
// switching to its group role only at connection start: it must exit at
// once naming the setting to change and the opt-out, unless
// database.allow_owner_login is set, and then it runs and says so.
func TestServeRefusesTheOwnerLogin(t *testing.T) {
	e := newEnv(t, "sent")
	for name, unset := range map[string]string{"api": "HERALD_DATABASE_API_URL", "admin": "HERALD_DATABASE_ADMIN_URL"} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, heraldBinary(t), "serve", "--config", e.cfgPath)
			cmd.Env = append(cmd.Environ(), unset+"=")
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ctx.Err() != nil {
				t.Fatalf("herald serve with %s empty: want a non-zero exit, got %v:\n%s", unset, err, out)
			}
			key := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(unset, "HERALD_"), "DATABASE_", "database."))
			for _, want := range []string{"refusing to start", key, "owns Herald's tables", "database.allow_owner_login = true"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("the refusal does not say %q:\n%s", want, out)
				}
			}
		})
	}
	// The opt-out: the old behaviour, with a warning naming the setting.
	e.extraEnv = append(e.extraEnv, "HERALD_DATABASE_API_URL=", "HERALD_DATABASE_ALLOW_OWNER_LOGIN=true")
	out, exited := e.serveUntil(nil, 60*time.Second, "database.allow_owner_login is set", "herald serving")
	if exited {
		t.Fatalf("herald serve with database.allow_owner_login exited:\n%s", tail(out, 40))
	}
	for _, want := range []string{"database.allow_owner_login is set: database.api_url (empty: database.url) logs in as role", "owns Herald's tables"} {
		if !strings.Contains(out, want) {
			t.Errorf("the warning does not say %q:\n%s", want, tail(out, 40))
		}
	}
}

// TestTwoTenantsThroughThePipeline runs two tenants' events through one
// real daemon: each tenant's inbox rows, counters and deliveries are its
// own, and neither key reads the other's events.
func TestTwoTenantsThroughThePipeline(t *testing.T) {
	e := newEnv(t, "sent")
	ctx := context.Background()
	const other = "globex"
	if err := store.EnsureTenant(ctx, e.db.Pool, other, "Globex"); err != nil {
		t.Fatal(err)
	}
	otherKey, err := store.CreateAPIKey(ctx, e.db.Pool, other, "test", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.ImportDirectory(ctx, e.db.Pool, other, &staff); err != nil {
		t.Fatal(err)
	}
	e.start()
	clients := map[string]*producer.Client{e.tenant: e.client(), other: {BaseURL: e.apiURL, APIKey: otherKey}}
	const perTenant = 10
	for ten, c := range clients {
		for i := range perTenant {
			if _, _, err := c.Emit(ctx, reservation(fmt.Sprintf("%s-%d", ten, i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The same event_id in both tenants is two events.
	for _, c := range clients {
		if _, created, err := c.Emit(ctx, reservation("shared-id")); err != nil || !created {
			t.Fatalf("shared-id: created %v, %v", created, err)
		}
	}
	e.waitAllSent(2*(perTenant+1)*deliveriesPerEvent, 60*time.Second)
	for ten, c := range clients {
		if n := e.count(`SELECT count(*) FROM notifications WHERE tenant_id = $1`, ten); n != (perTenant+1)*3 {
			t.Errorf("tenant %s: %d notifications, want %d", ten, n, (perTenant+1)*3)
		}
		if n := e.count(`SELECT coalesce(sum(unread), 0) FROM notification_counters WHERE tenant_id = $1`, ten); n != (perTenant+1)*3 {
			t.Errorf("tenant %s: unread counters sum to %d, want %d", ten, n, (perTenant+1)*3)
		}
		// A delivery belongs to its notification's tenant.
		if n := e.count(`SELECT count(*) FROM deliveries d JOIN notifications n USING (notification_id) WHERE d.tenant_id <> n.tenant_id`); n != 0 {
			t.Errorf("%d deliveries under another tenant's notification", n)
		}
		st, err := c.Event(ctx, "shared-id")
		if err != nil || len(st.Deliveries) != deliveriesPerEvent {
			t.Fatalf("tenant %s reads shared-id: %d deliveries, %v", ten, len(st.Deliveries), err)
		}
		for otherTen := range clients {
			if otherTen == ten {
				continue
			}
			_, err := c.Event(ctx, otherTen+"-0")
			var p *producer.Problem
			if !errors.As(err, &p) || p.Status != 404 {
				t.Errorf("tenant %s reading %s's event: want 404, got %v", ten, otherTen, err)
			}
		}
	}
}
