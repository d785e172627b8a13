package relay_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/relay"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk"
)

const placeRules = `
defaults { time_zone = "UTC" }
channel "WEBSOCKET" {
  best_effort = true
  providers   = [{ plugin = "sink" }]
}
channel "SLACK" {
  best_effort = true
  place       = true
  providers   = [{ plugin = "sink" }]
}
event "BOOKED" {
  audience {
    group = "restaurant:{{ .payload.restaurant_id }}"
  }
  mandatory   = ["WEBSOCKET"]
  quiet_hours = "ignore"
  post "SLACK" {
    to = "restaurant:{{ .payload.restaurant_id }}"
  }
  template "SLACK" { body = "table for {{ .payload.pax }}" }
}
event "BOOKED_NICK" {
  audience {
    group = "restaurant:{{ .payload.restaurant_id }}"
  }
  mandatory   = ["WEBSOCKET"]
  quiet_hours = "ignore"
  post "SLACK" {
    to = "restaurant:{{ .payload.restaurant_id }}"
  }
  template "SLACK" { body = "for {{ .recipient.attributes.nick }}" }
}
`

// TestRelayPostsOncePerPlace: a reservation reaching three staff makes
// three WEBSOCKET deliveries and one SLACK post to the restaurant's
// destination; two restaurants get one post each, to their own place; a
// fan-out run again (the event claimed again, as after a crash between
// the relay's commit and its bookkeeping) writes no second post; a post to
// a restaurant with no SLACK destination, to one not in the directory, or
// whose template reads a person's field, fails alone with the reason while
// the staff's deliveries go on; a directory attribute "herald.place" does
// not pass a person off as a place.
func TestRelayPostsOncePerPlace(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "rules.hcl")
	if err := os.WriteFile(p, []byte(placeRules), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := rulesfile.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	dir := &directory.Directory{
		Recipients: []directory.Recipient{
			{UserID: "s1", UserType: "STAFF", Active: true, Attributes: map[string]string{sdk.AttrPlace: "restaurant:1"}},
			{UserID: "s2", UserType: "STAFF", Active: true},
			{UserID: "s3", UserType: "STAFF", Active: true},
			{UserID: "s4", UserType: "STAFF", Active: true},
		},
		Groups: []directory.Group{
			{Key: "restaurant:1", Type: "restaurant", Destinations: map[string]string{"SLACK": "hook-1"}},
			{Key: "restaurant:2", Type: "restaurant", Destinations: map[string]string{"SLACK": "hook-2"}},
			{Key: "restaurant:3", Type: "restaurant"},
		},
		Members: []directory.Member{
			{Group: "restaurant:1", UserID: "s1", Role: "MANAGER"}, {Group: "restaurant:1", UserID: "s2", Role: "CHEF"},
			{Group: "restaurant:1", UserID: "s3", Role: "WAITER"}, {Group: "restaurant:2", UserID: "s4", Role: "MANAGER"},
			{Group: "restaurant:3", UserID: "s4", Role: "MANAGER"},
		},
	}
	if err := store.ImportDirectory(ctx, db.Pool, "t1", dir); err != nil {
		t.Fatal(err)
	}
	enqueuePlace := func(id, typ, payload string) {
		t.Helper()
		enqueue(t, db, id, typ, payload)
	}
	enqueuePlace("r1", "BOOKED", `{"restaurant_id": 1, "pax": 4}`)
	enqueuePlace("r2", "BOOKED", `{"restaurant_id": 2, "pax": 2}`)
	enqueuePlace("r3", "BOOKED", `{"restaurant_id": 3, "pax": 2}`)
	enqueuePlace("r9", "BOOKED", `{"restaurant_id": 9, "pax": 2}`)
	enqueuePlace("nick", "BOOKED_NICK", `{"restaurant_id": 1}`)

	r := relay.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(), relay.Config{BatchSize: 10})
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT count(*) FROM event_outbox WHERE status = 'PROCESSED'`); n != 5 {
		t.Fatalf("processed events = %d, want 5", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE event_id = 'r1' AND channel = 'WEBSOCKET'`); n != 3 {
		t.Errorf("r1: %d WEBSOCKET deliveries, want 3 (one per staff member)", n)
	}
	type post struct{ status, place, userType, lastErr, dest string }
	posts := func() map[string]post {
		rows, err := db.Pool.Query(ctx, `SELECT event_id, status, user_id, user_type, last_error, COALESCE(recipient->'Attributes'->>'herald.destination', '')
			FROM deliveries WHERE channel = 'SLACK' AND place ORDER BY event_id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]post{}
		for rows.Next() {
			var ev string
			var p post
			if err := rows.Scan(&ev, &p.status, &p.place, &p.userType, &p.lastErr, &p.dest); err != nil {
				t.Fatal(err)
			}
			if _, dup := out[ev]; dup {
				t.Errorf("event %s has two SLACK posts", ev)
			}
			out[ev] = p
		}
		return out
	}
	got := posts()
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE channel = 'SLACK'`); n != len(got) || n != 5 {
		t.Fatalf("%d SLACK deliveries (%d of them posts to places), want 5 posts: %+v", n, len(got), got)
	}
	for ev, want := range map[string]post{
		"r1": {status: store.StatusPending, place: "restaurant:1", dest: "hook-1"},
		"r2": {status: store.StatusPending, place: "restaurant:2", dest: "hook-2"},
	} {
		if got[ev] != want {
			t.Errorf("%s: post %+v, want %+v", ev, got[ev], want)
		}
	}
	for ev, why := range map[string]string{
		"r3":   "group restaurant:3 has no SLACK destination",
		"r9":   "no group restaurant:9 in the directory",
		"nick": "nick",
	} {
		if g := got[ev]; g.status != store.StatusFailed || !strings.Contains(g.lastErr, why) {
			t.Errorf("%s: post %+v, want FAILED naming %q", ev, g, why)
		}
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE event_id IN ('r3', 'r9', 'nick') AND channel = 'WEBSOCKET' AND status = 'PENDING'`); n != 4 {
		t.Errorf("%d WEBSOCKET deliveries of the events whose post failed are PENDING, want 4 (a failed post blocks nothing)", n)
	}
	// The person s1 carries no place attribute to plugins.
	var attrs string
	if err := db.Pool.QueryRow(ctx, `SELECT COALESCE(recipient->>'Attributes', '') FROM deliveries WHERE user_id = 's1' AND event_id = 'r1'`).Scan(&attrs); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(attrs, sdk.AttrPlace) {
		t.Errorf("s1's delivery carries %s: %s", sdk.AttrPlace, attrs)
	}

	// The fan-out again: the same events, claimed again.
	if _, err := db.Pool.Exec(ctx, `UPDATE event_outbox SET status = 'PENDING', available_at = now()`); err != nil {
		t.Fatal(err)
	}
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE channel = 'SLACK'`); n != 5 {
		t.Errorf("after a second fan-out: %d SLACK deliveries, want still 5", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries`); n != 5+8 {
		t.Errorf("after a second fan-out: %d deliveries, want %d (5 posts, 8 WEBSOCKET)", n, 5+8)
	}

	// GET /v1/events/{id}'s view: the post shows as the place's.
	st, err := store.GetEvent(ctx, db.Pool, "t1", "r1")
	if err != nil {
		t.Fatal(err)
	}
	var places []string
	for _, d := range st.Deliveries {
		if d.Channel == "SLACK" {
			places = append(places, d.Place+"|"+d.UserID)
		}
	}
	if b, _ := json.Marshal(places); string(b) != `["restaurant:1|"]` {
		t.Errorf("r1's SLACK deliveries as the API shows them: %s, want one, place restaurant:1 and no user", b)
	}
}
