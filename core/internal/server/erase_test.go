package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
)

// seedRecipients gives tenant ten users u1 and u2 in group g, each with a
// device, a preference and one notification with a delivery that holds
// their address and rendered text.
func seedRecipients(t *testing.T, w *world, ten string) {
	t.Helper()
	ctx := context.Background()
	dir := &directory.Directory{
		Recipients: []directory.Recipient{
			{UserID: "u1", UserType: "STAFF", Active: true, Email: "u1-" + ten + "@example.com", DeviceTokens: []string{"tok-u1-" + ten}},
			{UserID: "u2", UserType: "STAFF", Active: true, Email: "u2-" + ten + "@example.com"},
		},
		Groups:      []directory.Group{{Key: "g", Type: "team"}},
		Members:     []directory.Member{{Group: "g", UserID: "u1"}, {Group: "g", UserID: "u2"}},
		Preferences: []directory.Preference{{UserID: "u1", Channel: "SMS", Enabled: false}},
	}
	if err := store.ImportDirectory(ctx, w.db.Pool, ten, dir); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"u1", "u2"} {
		_, err := w.db.Pool.Exec(ctx, `WITH n AS (
				INSERT INTO notifications (tenant_id, event_id, user_id, event_type, title, body)
				VALUES ($1, 'ev1', $2, 'T', 'Hello ' || $2, 'Your table, ' || $2) RETURNING notification_id, created_at)
			INSERT INTO deliveries (tenant_id, notification_id, event_id, event_type, user_id, user_type, channel, status, recipient, content, created_at)
			SELECT $1, notification_id, 'ev1', 'T', $2, 'STAFF', 'EMAIL', 'PENDING', jsonb_build_object('email', $3::text),
				jsonb_build_object('body', 'Your table, ' || $2), created_at FROM n`, ten, u, u+"-"+ten+"@example.com")
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeleteRecipientAPI: DELETE /v1/recipients/{user_id} removes the
// user from the directory and keeps stored rows; ?erase=true also erases
// them; another tenant's user is 404 and left whole; bad parameters are
// 400 naming the parameter; a project key may not remove or erase; two erases at
// once both end well and leave no trace.
func TestDeleteRecipientAPI(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	seedRecipients(t, w, "a")
	seedRecipients(t, w, "b")
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := w.db.Pool.QueryRow(ctx, q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Hostile and malformed requests first: nothing changes.
	for name, c := range map[string]struct {
		path  string
		code  int
		field string
	}{
		"bad erase value":     {"/v1/recipients/u1?erase=maybe", 400, "erase"},
		"erase twice":         {"/v1/recipients/u1?erase=true&erase=false", 400, "erase"},
		"unknown parameter":   {"/v1/recipients/u1?purge=1", 400, "purge"},
		"bad percent-escape":  {"/v1/recipients/u1?erase=%zz", 400, "erase"},
		"NUL in user_id":      {"/v1/recipients/u%00", 400, "user_id"},
		"invalid UTF-8":       {"/v1/recipients/%ff%fe", 400, "user_id"},
		"unknown user":        {"/v1/recipients/nobody", 404, "user_id"},
		"unknown user, erase": {"/v1/recipients/nobody?erase=true", 404, "user_id"},
	} {
		r := w.do(t, http.MethodDelete, c.path, w.keys["a"], "")
		if p := r.problem(t); r.code != c.code || p.Field != c.field {
			t.Errorf("%s: %d %s, want %d naming %q", name, r.code, r.body, c.code, c.field)
		}
	}
	if r := w.do(t, http.MethodDelete, "/v1/recipients/u1", "", ""); r.code != 401 {
		t.Errorf("no key: %d", r.code)
	}
	if n := count(`SELECT count(*) FROM recipients`); n != 4 {
		t.Fatalf("refused requests changed the directory: %d recipients, want 4", n)
	}

	// A project key may neither remove nor erase: the directory is the
	// tenant's.
	if err := store.EnsureProject(ctx, w.db.Pool, "a", "p1", "p1"); err != nil {
		t.Fatal(err)
	}
	_, pkey, err := store.CreateKey(ctx, w.db.Pool, store.NewAPIKey{TenantID: "a", ProjectID: "p1", Name: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/recipients/u1?erase=true", "/v1/recipients/u1"} {
		if r := w.do(t, http.MethodDelete, path, pkey, ""); r.code != 403 {
			t.Fatalf("project key on DELETE %s: %d %s, want 403", path, r.code, r.body)
		}
	}

	// Removal without erase: the directory rows go, the stored rows stay.
	r := w.do(t, http.MethodDelete, "/v1/recipients/u2", w.keys["a"], "")
	var got struct {
		UserID  string                 `json:"user_id"`
		Removed store.RemovedRecipient `json:"removed"`
		Erased  *store.Erasure         `json:"erased"`
	}
	if err := json.Unmarshal(r.body, &got); err != nil || r.code != 200 || got.UserID != "u2" || got.Erased != nil ||
		got.Removed != (store.RemovedRecipient{Recipient: 1, Memberships: 1}) {
		t.Fatalf("remove u2: %d %s", r.code, r.body)
	}
	if n := count(`SELECT count(*) FROM deliveries WHERE tenant_id = 'a' AND user_id = 'u2' AND recipient->>'email' = 'u2-a@example.com'`); n != 1 {
		t.Fatalf("a removal without erase touched u2's deliveries: %d left, want 1", n)
	}
	if r := w.do(t, http.MethodDelete, "/v1/recipients/u2", w.keys["a"], ""); r.code != 404 {
		t.Fatalf("second removal of u2: %d %s, want 404", r.code, r.body)
	}
	// The erase still finds u2's stored rows, though the directory has no u2.
	if r := w.do(t, http.MethodDelete, "/v1/recipients/u2?erase=1", w.keys["a"], ""); r.code != 200 {
		t.Fatalf("erase of u2's stored rows: %d %s", r.code, r.body)
	}

	// Tenant b's key cannot reach tenant a's u1... and erases its own.
	before := count(`SELECT count(*) FROM deliveries WHERE tenant_id = 'a' AND user_id = 'u1'`)
	var wg sync.WaitGroup
	codes := make([]int, 3)
	bodies := make([][]byte, 3)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Two erases of tenant b's u1 race; a plain DELETE of u1 by
			// tenant b races with them.
			path := "/v1/recipients/u1?erase=true"
			if i == 2 {
				path = "/v1/recipients/u1"
			}
			rep := w.do(t, http.MethodDelete, path, w.keys["b"], "")
			codes[i], bodies[i] = rep.code, rep.body
		}()
	}
	wg.Wait()
	ok := 0
	for i, c := range codes {
		switch c {
		case 200:
			ok++
		case 404:
		default:
			t.Errorf("concurrent delete %d: %d %s", i, c, bodies[i])
		}
	}
	if ok == 0 || codes[0] == 404 && codes[1] == 404 {
		t.Fatalf("concurrent deletes: codes %v; one erase must have found u1", codes)
	}
	if n := count(`SELECT count(*) FROM deliveries WHERE tenant_id = 'a' AND user_id = 'u1'`); n != before || before != 1 {
		t.Fatalf("tenant b's erase touched tenant a's u1: %d deliveries left, were %d", n, before)
	}
	for _, tbl := range []string{"recipients", "recipient_devices", "group_members", "user_preferences", "notifications", "deliveries"} {
		if n := count(fmt.Sprintf(`SELECT count(*) FROM %s r WHERE tenant_id = 'b' AND (r::text LIKE '%%u1-b@example.com%%'
			OR r::text LIKE '%%Your table, u1%%' OR r::text LIKE '%%tok-u1-b%%' OR user_id = 'u1')`, tbl)); n != 0 {
			t.Errorf("tenant b's %s: %d rows still hold u1's data", tbl, n)
		}
	}

	// Tenant a erases u1: 200 with the counts; the delivery on its way is
	// stopped.
	r = w.do(t, http.MethodDelete, "/v1/recipients/u1?erase=true", w.keys["a"], "")
	if err := json.Unmarshal(r.body, &got); err != nil || r.code != 200 || got.Erased == nil ||
		got.Removed != (store.RemovedRecipient{Recipient: 1, Devices: 1, Memberships: 1, Preferences: 1}) ||
		got.Erased.Notifications != 1 || got.Erased.Deliveries != 1 || got.Erased.Stopped != 1 || !got.Erased.Settled {
		t.Fatalf("erase u1: %d %s", r.code, r.body)
	}
	if n := count(`SELECT count(*) FROM deliveries WHERE tenant_id = 'a' AND user_id = $1 AND status = 'FAILED' AND recipient = '{}'`,
		got.Erased.Pseudonym); n != 1 {
		t.Fatalf("u1's delivery after the erase: %d FAILED under the pseudonym, want 1", n)
	}
	if r := w.do(t, http.MethodDelete, "/v1/recipients/u1?erase=true", w.keys["a"], ""); r.code != 404 {
		t.Fatalf("erase again: %d %s, want 404", r.code, r.body)
	}
}
