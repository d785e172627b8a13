package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk/producer"
)

// perDigestRules collects staff1's EMAIL and in-app inbox per restaurant
// for two seconds or five reservations: one inbox row per window.
func perDigestRules(record string) string {
	return fmt.Sprintf(`
defaults { time_zone = "UTC" }
channel "EMAIL" {
  providers = [{ plugin = "sink", config = { record_file = %q } }]
}
event "RESERVATION_REQUESTED" {
  audience { user = "staff1" }
  mandatory   = ["EMAIL"]
  quiet_hours = "ignore"
  digest {
    key       = "restaurant:{{ .payload.restaurant_id }}"
    window    = "2s"
    max_items = 5
    inbox     = "per_digest"
  }
  inbox {
    title = "{{ len .items }} new reservations"
    body  = "{{ range .items }}#{{ .payload.n }} {{ end }}"
  }
  template "EMAIL" {
    subject = "{{ len .items }} new reservations"
    body    = "{{ range .items }}#{{ .payload.n }} {{ end }}"
  }
}
`, record)
}

// TestDigestPerDigestInboxSIGKILLAndLive kills `herald serve` with SIGKILL
// inside windows and the moment a hundred fall due, with the inbox kept
// per digest: after the restarts every reservation is in exactly one inbox
// row (its data lists the event ids), there is one row per window and
// none per event, and the unread count is the number of rows. Then a
// browser's open session gets the next digest row live.
func TestDigestPerDigestInboxSIGKILLAndLive(t *testing.T) {
	e := newEnv(t, "sent")
	e.writeRules(perDigestRules(e.record))
	ctx := context.Background()
	n := 0
	enqueue := func(count, restaurants, first int) {
		t.Helper()
		for range count {
			ev := producer.Event{TenantID: e.tenant, EventID: fmt.Sprintf("res-%d", n), Type: "RESERVATION_REQUESTED",
				Payload: json.RawMessage(fmt.Sprintf(`{"restaurant_id": %d, "n": %d}`, first+n%restaurants, n))}
			if err := producer.Enqueue(ctx, e.db.Pool, ev); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	inboxItems := `SELECT count(*) FROM deliveries WHERE channel = '` + channel.Inbox + `'`

	// 1. Killed inside a window: items wait, none is due yet, no row yet.
	d := e.start()
	enqueue(12, 4, 0)
	e.until(30*time.Second, func() bool {
		return e.count(inboxItems+` AND status = 'WAITING' AND hold = 'digest'`) == 12
	}, func() string { return "12 inbox items waiting: " + e.statusSummary() })
	d.stop(syscall.SIGKILL)
	if got := e.count(`SELECT count(*) FROM notifications`); got != 0 {
		t.Fatalf("%d inbox rows inside the window, want none (per_digest)", got)
	}

	// 2. While down, 400 more for 100 restaurants; killed the moment a
	// window is due.
	enqueue(400, 100, 0)
	d = e.start()
	e.until(30*time.Second, func() bool { return e.count(inboxItems) == 412 },
		func() string { return "412 inbox items relayed: " + e.statusSummary() })
	e.until(30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM digest_windows WHERE closes_at <= now()`) > 0 ||
			e.count(`SELECT count(*) FROM notifications`) > 0
	}, func() string { return "a window due" })
	d.stop(syscall.SIGKILL)
	t.Logf("killed while flushing: %d windows left, %d inbox rows written", e.count(`SELECT count(*) FROM digest_windows`),
		e.count(`SELECT count(*) FROM notifications`))

	// 3. Restarted: everything drains.
	e.start()
	e.until(60*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM digest_windows`) == 0 &&
			e.count(`SELECT count(*) FROM deliveries WHERE status NOT IN ('SENT', 'DIGESTED')`) == 0
	}, func() string { return "every window flushed: " + e.statusSummary() })

	if got := e.count(inboxItems + ` AND status = 'DIGESTED'`); got != n {
		t.Fatalf("%d inbox items DIGESTED, want %d", got, n)
	}
	rows := e.count(`SELECT count(*) FROM notifications`)
	if w := e.count(`SELECT count(DISTINCT digest_window) FROM deliveries WHERE channel = '` + channel.Inbox + `'`); w != rows {
		t.Fatalf("%d inbox rows for %d inbox windows: a window wrote two rows or none", rows, w)
	}
	if got := e.count(`SELECT count(*) FROM notifications WHERE event_id NOT LIKE 'digest:%'`); got != 0 {
		t.Fatalf("%d inbox rows of single events, want none", got)
	}
	// Every reservation is in exactly one row's data, and its item names
	// that row.
	seen := map[string]int{}
	r, err := e.db.Pool.Query(ctx, `SELECT e FROM notifications, jsonb_array_elements_text(data->'digest'->'event_ids') AS e`)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var id string
		if err := r.Scan(&id); err != nil {
			t.Fatal(err)
		}
		seen[id]++
	}
	r.Close()
	for i := range n {
		if c := seen[fmt.Sprintf("res-%d", i)]; c != 1 {
			t.Fatalf("res-%d is in %d inbox rows, want 1", i, c)
		}
	}
	if got := e.count(`SELECT count(*) FROM deliveries i WHERE i.channel = '` + channel.Inbox + `' AND EXISTS (SELECT 1 FROM notifications x
			WHERE i.last_error = 'shown in digest inbox notification ' || x.notification_id::text
			AND x.event_id = 'digest:' || i.digest_window::text)`); got != n {
		t.Fatalf("%d items name their window's inbox row, want %d", got, n)
	}
	if got := e.count(`SELECT coalesce(sum(unread), 0)::int FROM notification_counters WHERE user_id = 'staff1'`); got != rows {
		t.Fatalf("unread count %d, want %d (one per row)", got, rows)
	}

	// 4. A browser's open session gets the next row live, and the API's
	// unread count agrees.
	secret, _ := auth.NewSecret()
	key := store.TokenKey{TenantID: e.tenant, Kid: "k1", Alg: "HS256", Issuer: "https://acme.example", Key: secret}
	if err := store.AddTokenKey(ctx, e.db.Pool, key); err != nil {
		t.Fatal(err)
	}
	browser := e.openLive(t, key, "staff1")
	enqueue(3, 1, 999)
	testenv.Eventually(t, 30*time.Second, func() bool {
		browser.mu.Lock()
		defer browser.mu.Unlock()
		for _, f := range browser.frames {
			if f["type"] == "notification" && f["digest"] == true && f["title"] == "3 new reservations" {
				return true
			}
		}
		return false
	}, "staff1's session gets the digest row (frames %v)", browser.frames)
	tok, err := auth.Issue(key, e.audience(t), auth.User{UserID: "staff1", UserType: "STAFF"}, 5*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", e.apiURL+"/v1/inbox/unread-count", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ Unread int }
	_ = json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if c.Unread != rows+1 {
		t.Fatalf("unread count %d, want %d", c.Unread, rows+1)
	}
}
