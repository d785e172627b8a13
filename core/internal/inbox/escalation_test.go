package inbox_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestReadsAndActionsCancelEscalations checks the inbox's side of
// escalation when unread: read-all cancels, in its own transaction, the
// waiting escalations of every notification it marks read (a shared one's
// for every sharer), leaves those only an action cancels and another
// tenant's alone; the first action then cancels every sharer's, naming who
// acted.
func TestReadsAndActionsCancelEscalations(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	w.seed(t, note{tenant: "a", user: "u1"}, note{tenant: "a", user: "u1"}, note{tenant: "b", user: "u1"})
	shared := w.seed(t, note{tenant: "a", user: "u1", share: "s1"}, note{tenant: "a", user: "u2", share: "s1"})
	// One EMAIL escalation per notification, due in an hour; u2's shared
	// one is called off by an action only.
	if _, err := w.db.Pool.Exec(ctx, `INSERT INTO deliveries (notification_id, tenant_id, event_id, event_type, user_id, user_type, channel,
			status, next_attempt_at, hold, escalate_unless, created_at)
		SELECT notification_id, tenant_id, event_id, event_type, user_id, 'STAFF', 'EMAIL', 'WAITING', now() + interval '1 hour', 'escalation',
			CASE WHEN share_key IS NOT NULL AND user_id = 'u2' THEN ARRAY['acted'] WHEN share_key IS NOT NULL THEN ARRAY['read', 'acted'] ELSE ARRAY['read'] END,
			created_at
		FROM notifications`); err != nil {
		t.Fatal(err)
	}
	states := func() map[string]string {
		rows, err := w.db.Pool.Query(ctx, `SELECT tenant_id || '/' || user_id || '/' || event_id, status || ' ' || last_error FROM deliveries`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			out[k] = strings.TrimSpace(v)
		}
		return out
	}
	if r := w.do(t, "POST", "/v1/inbox/read-all", w.token(t, "a", "u1", ""), ""); r.code != http.StatusOK {
		t.Fatalf("read-all: %d %s", r.code, r.body)
	}
	got := states()
	for k, v := range got {
		switch {
		case k == "a/u2/ev-s1" || strings.HasPrefix(k, "b/"):
			if v != "WAITING" {
				t.Errorf("%s: %q after u1's read-all, want WAITING (an action only / another tenant)", k, v)
			}
		case !strings.HasPrefix(v, "CANCELLED read at "):
			t.Errorf("%s: %q after u1's read-all, want CANCELLED by the read", k, v)
		}
	}
	if len(got) != 5 {
		t.Fatalf("%d deliveries, want 5: %v", len(got), got)
	}
	if r := w.do(t, "POST", "/v1/inbox/"+shared[0]+"/actions", w.token(t, "a", "u1", ""), `{"type": "CONFIRMED"}`); r.code != http.StatusOK {
		t.Fatalf("action: %d %s", r.code, r.body)
	}
	if v := states()["a/u2/ev-s1"]; !strings.HasPrefix(v, "CANCELLED acted on by u1 (CONFIRMED) at ") {
		t.Errorf("u2's escalation after u1's action: %q, want CANCELLED naming the action", v)
	}
	if v := states()["b/u1/ev-3"]; v != "WAITING" {
		t.Errorf("tenant b's escalation: %q, want WAITING", v)
	}
}
