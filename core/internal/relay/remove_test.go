package relay_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/relay"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
)

const groupRules = `
defaults { time_zone = "UTC" }
channel "EMAIL" { providers = [{ plugin = "sink" }] }
event "SHIFT" {
  audience { group = "restaurant:{{ .payload.restaurant }}" }
  mandatory   = ["EMAIL"]
  quiet_hours = "ignore"
  template "EMAIL" { body = "shift {{ .payload.restaurant }}" }
}
`

// TestRemovedRecipientMissesTheNextEvent: a waiter who leaves restaurant
// 5 (removed as DELETE /v1/recipients/{user_id} does, through the API
// role) is reached by the event before the removal and not by the next
// one; a member removed from the group only (the recipient stays) likewise.
func TestRemovedRecipientMissesTheNextEvent(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "rules.hcl")
	if err := os.WriteFile(p, []byte(groupRules), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := rulesfile.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	dir := &directory.Directory{
		Recipients: []directory.Recipient{
			{UserID: "w1", UserType: "STAFF", Email: "w1@example.com", Active: true},
			{UserID: "w2", UserType: "STAFF", Email: "w2@example.com", Active: true},
			{UserID: "w3", UserType: "STAFF", Email: "w3@example.com", Active: true},
		},
		Groups: []directory.Group{{Key: "restaurant:5", Type: "restaurant"}},
		Members: []directory.Member{{Group: "restaurant:5", UserID: "w1", Role: "WAITER"}, {Group: "restaurant:5", UserID: "w2", Role: "WAITER"},
			{Group: "restaurant:5", UserID: "w3", Role: "CHEF"}},
	}
	if err := store.ImportDirectory(ctx, db.Pool, "t1", dir); err != nil {
		t.Fatal(err)
	}
	api, err := store.NewPoolWith(ctx, db.URL, store.PoolOptions{MaxConns: 2, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	r := relay.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(), relay.Config{BatchSize: 10, MaxAttempts: 3})
	reached := func(event string) []string {
		t.Helper()
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		rows, err := db.Pool.Query(ctx, `SELECT user_id FROM deliveries WHERE event_id = $1 ORDER BY user_id`, event)
		if err != nil {
			t.Fatal(err)
		}
		users, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return users
	}
	enqueue(t, db, "before", "SHIFT", `{"restaurant": "5"}`)
	if got := reached("before"); len(got) != 3 {
		t.Fatalf("before the removal the event reached %v, want w1 w2 w3", got)
	}
	err = store.InTenant(ctx, api, "t1", "", func(tx pgx.Tx) error {
		if _, err := store.RemoveRecipient(ctx, tx, "t1", "w1"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM group_members WHERE tenant_id = 't1' AND group_key = 'restaurant:5' AND user_id = 'w3'`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, db, "after", "SHIFT", `{"restaurant": "5"}`)
	if got := reached("after"); len(got) != 1 || got[0] != "w2" {
		t.Fatalf("after removing w1 and w3's membership the event reached %v, want [w2]", got)
	}
}
