package relay_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/digest"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/relay"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

const scheduleRules = `
defaults { time_zone = "America/New_York" }
channel "EMAIL" { providers = [{ plugin = "sink" }] }
event "RESERVATION_CONFIRMED" {
  audience { user = "{{ .payload.user }}" }
  mandatory   = ["EMAIL"]
  quiet_hours = "ignore"
  digest {
    key      = "restaurant:{{ .payload.restaurant_id }}"
    schedule = "daily 08:00"
  }
  template "EMAIL" { subject = "{{ len .items }} reservations" }
}
`

func loadRules(t *testing.T, src string) *rules.RuleSet {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rules.hcl")
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := rulesfile.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func relayAll(t *testing.T, db *testenv.DB, rs *rules.RuleSet) {
	t.Helper()
	r := relay.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(), relay.Config{})
	for {
		n, err := r.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
}

// TestScheduledDigestClosesAtTheRecipientsNextOccurrence relays
// reservations for three managers (Paris, Tokyo, and one with no zone,
// who gets the rules' default, New York): each window closes at the next
// 08:00 on the manager's own clock after its first item, and a second
// item joins the open window without moving its close.
func TestScheduledDigestClosesAtTheRecipientsNextOccurrence(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	rs := loadRules(t, scheduleRules)
	dir := &directory.Directory{Recipients: []directory.Recipient{
		{UserID: "paris", UserType: "STAFF", Email: "p@example.com", TimeZone: "Europe/Paris", Active: true},
		{UserID: "tokyo", UserType: "STAFF", Email: "t@example.com", TimeZone: "Asia/Tokyo", Active: true},
		{UserID: "nozone", UserType: "STAFF", Email: "n@example.com", Active: true},
	}}
	if err := store.ImportDirectory(context.Background(), db.Pool, "t1", dir); err != nil {
		t.Fatal(err)
	}
	sc, err := rules.ParseSchedule("daily 08:00")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"paris", "tokyo", "nozone"} {
		enqueue(t, db, "first-"+u, "RESERVATION_CONFIRMED", `{"user": "`+u+`", "restaurant_id": 5}`)
	}
	before := time.Now()
	relayAll(t, db, rs)
	after := time.Now()
	zones := map[string]string{"paris": "Europe/Paris", "tokyo": "Asia/Tokyo", "nozone": "America/New_York"}
	closes := map[string]time.Time{}
	for u, z := range zones {
		loc, err := time.LoadLocation(z)
		if err != nil {
			t.Fatal(err)
		}
		var at time.Time
		if err := db.Pool.QueryRow(context.Background(), `SELECT closes_at FROM digest_windows WHERE user_id = $1 AND status = 'OPEN'`, u).Scan(&at); err != nil {
			t.Fatalf("%s's window: %v", u, err)
		}
		// The relay decided between before and after; 08:00 may have
		// passed in between.
		if want1, want2 := sc.Next(before, loc), sc.Next(after, loc); !at.Equal(want1) && !at.Equal(want2) {
			t.Errorf("%s's window closes at %s, want %s (08:00 in %s)", u, at.In(loc).Format(time.RFC3339), want1.In(loc).Format(time.RFC3339), z)
		}
		if l := at.In(loc); l.Hour() != 8 || l.Minute() != 0 {
			t.Errorf("%s's window closes at %s local, want 08:00", u, l.Format(time.RFC3339))
		}
		closes[u] = at
		if n := count(t, db, `SELECT count(*) FROM deliveries WHERE user_id = $1 AND status = 'WAITING' AND hold = 'digest'
			AND next_attempt_at = $2`, u, at); n != 1 {
			t.Errorf("%s: %d items waiting until the close, want 1", u, n)
		}
	}
	enqueue(t, db, "second-paris", "RESERVATION_CONFIRMED", `{"user": "paris", "restaurant_id": 5}`)
	relayAll(t, db, rs)
	var items int
	var at time.Time
	if err := db.Pool.QueryRow(context.Background(), `SELECT items, closes_at FROM digest_windows WHERE user_id = 'paris'`).Scan(&items, &at); err != nil {
		t.Fatal(err)
	}
	if items != 2 || !at.Equal(closes["paris"]) {
		t.Errorf("paris's window holds %d items closing at %s, want 2 closing at %s", items, at, closes["paris"])
	}
}

const scheduleInboxRules = `
defaults { time_zone = "America/New_York" }
channel "EMAIL" { providers = [{ plugin = "sink" }] }
event "RESERVATION_CONFIRMED" {
  audience { user = "{{ .payload.user }}" }
  mandatory   = ["EMAIL"]
  quiet_hours = "ignore"
  digest {
    key      = "restaurant:{{ .payload.restaurant_id }}"
    schedule = "daily 08:00"
    inbox    = "per_digest"
  }
  inbox { title = "{{ len .items }} reservations" }
  template "EMAIL" { subject = "{{ len .items }} reservations" }
}
`

// TestScheduledPerDigestInboxClosesWithTheChannels: with inbox =
// "per_digest" and a schedule, the inbox's window closes at the same
// 08:00 on the recipient's clock as the e-mail's, not never.
func TestScheduledPerDigestInboxClosesWithTheChannels(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	rs := loadRules(t, scheduleInboxRules)
	dir := &directory.Directory{Recipients: []directory.Recipient{
		{UserID: "paris", UserType: "STAFF", Email: "p@example.com", TimeZone: "Europe/Paris", Active: true},
		{UserID: "nozone", UserType: "STAFF", Email: "n@example.com", Active: true},
	}}
	if err := store.ImportDirectory(context.Background(), db.Pool, "t1", dir); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"paris", "nozone"} {
		enqueue(t, db, "inbox-"+u, "RESERVATION_CONFIRMED", `{"user": "`+u+`", "restaurant_id": 5}`)
	}
	relayAll(t, db, rs)
	for u, z := range map[string]string{"paris": "Europe/Paris", "nozone": "America/New_York"} {
		loc, err := time.LoadLocation(z)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := db.Pool.Query(context.Background(), `SELECT channel, closes_at FROM digest_windows WHERE user_id = $1 ORDER BY channel`, u)
		if err != nil {
			t.Fatal(err)
		}
		var chans []string
		for rows.Next() {
			var ch string
			var at time.Time
			if err := rows.Scan(&ch, &at); err != nil {
				t.Fatal(err)
			}
			chans = append(chans, ch)
			if l := at.In(loc); l.Hour() != 8 || l.Minute() != 0 || time.Until(at) > 25*time.Hour {
				t.Errorf("%s's %s window closes at %s, want the next 08:00 in %s", u, ch, l.Format(time.RFC3339), z)
			}
		}
		rows.Close()
		if len(chans) != 2 || chans[0] != channel.Inbox || chans[1] != "EMAIL" {
			t.Errorf("%s's windows: %v, want %s and EMAIL", u, chans, channel.Inbox)
		}
	}
}

const foldRules = `
defaults { time_zone = "UTC" }
channel "SMS" { providers = [{ plugin = "sink" }] }
event "RESERVATION_UNCONFIRMED" {
  audience { user = "{{ .payload.user }}" }
  mandatory   = ["SMS"]
  quiet_hours = "ignore"
  throttle {
    key   = "restaurant:{{ .payload.restaurant_id }}"
    limit = 2
    per   = "1h"
    over  = "digest"
  }
  template "SMS" { body = "{{ len .items }}:{{ range .items }} {{ .event.id }}{{ end }}" }
}
`

// TestThrottleFoldsWhatGoesOverIntoOneDigest relays five reminders for
// one restaurant and two for another within an hour: per restaurant two
// SMS are PENDING at once, the rest WAIT in one digest window that closes
// when the throttle's hour ends, each naming why; flushed, each window is
// one SMS listing what it folded.
func TestThrottleFoldsWhatGoesOverIntoOneDigest(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	rs := loadRules(t, foldRules)
	for i := range 5 {
		enqueue(t, db, "r5-"+string(rune('a'+i)), "RESERVATION_UNCONFIRMED", `{"user": "u1", "restaurant_id": 5}`)
	}
	enqueue(t, db, "r6-a", "RESERVATION_UNCONFIRMED", `{"user": "u1", "restaurant_id": 6}`)
	enqueue(t, db, "r6-b", "RESERVATION_UNCONFIRMED", `{"user": "u1", "restaurant_id": 6}`)
	before := time.Now()
	relayAll(t, db, rs)
	after := time.Now()
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE status = 'PENDING' AND event_id LIKE 'r5-%'`); n != 2 {
		t.Errorf("%d reminders for restaurant 5 pending, want 2", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE status = 'PENDING' AND event_id LIKE 'r6-%'`); n != 2 {
		t.Errorf("%d reminders for restaurant 6 pending, want 2 (its own count)", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE status = 'WAITING' AND hold = 'digest' AND event_id LIKE 'r5-%'
		AND last_error LIKE 'throttled: 2 per 1h, folded into digest "restaurant:5", sent at %'`); n != 3 {
		t.Errorf("%d reminders folded with the reason, want 3", n)
	}
	var closes time.Time
	var items int
	if err := db.Pool.QueryRow(context.Background(), `SELECT closes_at, items FROM digest_windows WHERE digest_key = 'restaurant:5'`).Scan(&closes, &items); err != nil {
		t.Fatal(err)
	}
	if end1, end2 := before.Truncate(time.Hour).Add(time.Hour), after.Truncate(time.Hour).Add(time.Hour); items != 3 || (!closes.Equal(end1) && !closes.Equal(end2)) {
		t.Errorf("the window holds %d items closing at %s, want 3 closing at %s (the hour's end)", items, closes, end1)
	}
	if n := count(t, db, `SELECT count(*) FROM digest_windows`); n != 1 {
		t.Errorf("%d digest windows, want 1 (restaurant 6 stayed within its limit)", n)
	}

	// The hour ends: the flush sends one SMS listing the three.
	if _, err := db.Pool.Exec(context.Background(), `UPDATE digest_windows SET closes_at = now()`); err != nil {
		t.Fatal(err)
	}
	res, err := digest.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(), digest.Config{}).FlushOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Digests != 1 || res.Items != 3 {
		t.Fatalf("flushed %d digests of %d items, want 1 of 3", res.Digests, res.Items)
	}
	var body string
	if err := db.Pool.QueryRow(context.Background(), `SELECT content->>'Body' FROM deliveries WHERE event_id LIKE 'digest:%' AND status = 'PENDING'`).Scan(&body); err != nil {
		t.Fatal(err)
	}
	if body != "3: r5-c r5-d r5-e" {
		t.Errorf("the digest's body is %q, want the three over the limit", body)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE status = 'DIGESTED' AND event_id LIKE 'r5-%'`); n != 3 {
		t.Errorf("%d reminders DIGESTED, want 3", n)
	}
	// Each keeps why it waited, then where it went.
	if n := count(t, db, `SELECT count(*) FROM deliveries i JOIN deliveries d ON d.event_id LIKE 'digest:%'
		WHERE i.status = 'DIGESTED' AND i.event_id LIKE 'r5-%'
			AND i.last_error LIKE 'throttled: 2 per 1h, folded into digest "restaurant:5", sent at %; sent in digest delivery ' || d.delivery_id::text`); n != 3 {
		t.Errorf("%d reminders name the throttle and their digest, want 3", n)
	}
}
