package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/core/internal/tools/devpeer"
	"github.com/heraldhq/herald/sdk/producer"
)

// placeRules posts every reservation once to its restaurant's Slack place
// (the real slack plugin in webhook mode, the devpeers' incoming-webhook
// stand-in) and reaches each staff member on EMAIL (the test sink).
const placeRules = `
defaults {
  time_zone = "UTC"
}
channel "EMAIL" {
  providers = [{ plugin = "sink" }]
}
channel "SLACK" {
  best_effort = true
  place       = true
  providers = [{
    plugin = "slack"
    name   = "hooks"
    config = {
      mode     = "webhook"
      webhooks = { r5 = "env:HERALD_TEST_SLACK_R5", r6 = "env:HERALD_TEST_SLACK_R6" }
      timeout  = "5s"
    }
  }]
}
event "RESERVATION_REQUESTED" {
  audience {
    group = "restaurant:{{ .payload.restaurant_id }}"
    roles = ["MANAGER", "CHEF", "WAITER"]
  }
  mandatory   = ["EMAIL"]
  quiet_hours = "ignore"
  post "SLACK" {
    to = "restaurant:{{ .payload.restaurant_id }}"
  }
  inbox {
    title = "New reservation"
  }
  template "SLACK" {
    body = "{{ .payload.customer_name }}, {{ .payload.pax }} people"
  }
}
`

// startPlaces runs herald serve with placeRules, the slack and sink
// plugins, the webhook stand-in, and two restaurants: restaurant:5 (the
// three staff, SLACK destination r5) and restaurant:6 (staff4, r6).
func startPlaces(t *testing.T) (*env, *daemon, *lockedLog) {
	t.Helper()
	e := newEnv(t, "sent")
	e.pluginDir = testenv.PluginBinaries(t, "slack", "sink")
	sink := &lockedLog{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	peers, err := devpeer.Start(ctx, devpeer.Config{HTTPAddr: "127.0.0.1:0", Log: sink})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peers.Close() })
	e.daemonEnv = append(e.daemonEnv,
		"HERALD_TEST_SLACK_R5="+peers.HTTPURL()+"/services/T0HERALDDEV/B0R5/demo",
		"HERALD_TEST_SLACK_R6="+peers.HTTPURL()+"/services/T0HERALDDEV/B0R6/demo")
	e.writeConfig()
	dir := directory.Directory{
		Recipients: append(append([]directory.Recipient(nil), staff.Recipients...),
			directory.Recipient{UserID: "staff4", UserType: "STAFF", Email: "s4@example.com", Active: true}),
		Groups: []directory.Group{
			{Key: "restaurant:5", Type: "restaurant", Destinations: map[string]string{"SLACK": "r5"}},
			{Key: "restaurant:6", Type: "restaurant", Destinations: map[string]string{"SLACK": "r6"}},
		},
		Members: append(append([]directory.Member(nil), staff.Members...), directory.Member{Group: "restaurant:6", UserID: "staff4", Role: "MANAGER"}),
	}
	if err := store.ImportDirectory(context.Background(), e.db.Pool, e.tenant, &dir); err != nil {
		t.Fatal(err)
	}
	e.writeRules(placeRules)
	return e, e.start(), sink
}

func reservationAt(id string, restaurant int) producer.Event {
	return producer.Event{EventID: id, Type: "RESERVATION_REQUESTED",
		Payload: json.RawMessage(fmt.Sprintf(`{"restaurant_id": %d, "customer_name": "Rossi", "pax": 4}`, restaurant))}
}

// TestPlacePostsOncePerReservation: a reservation reaching restaurant 5's
// three staff makes three EMAIL deliveries and exactly one Slack post, to
// restaurant 5's webhook; one for restaurant 6 is posted once to its own;
// GET /v1/events/{id} shows the post as the place's; the directory API
// refuses bad destinations naming the field.
func TestPlacePostsOncePerReservation(t *testing.T) {
	e, _, sink := startPlaces(t)
	c := e.client()
	for _, ev := range []producer.Event{reservationAt("res-5", 5), reservationAt("res-6", 6)} {
		if _, _, err := c.Emit(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	var statuses string
	testenv.Eventually(t, 60*time.Second, func() bool {
		statuses = e.statusSummary()
		return e.count(`SELECT count(*) FROM deliveries WHERE channel = 'SLACK' AND status = 'SENT'`) == 2
	}, "2 SLACK posts SENT; statuses %s", statuses)
	if n := e.count(`SELECT count(*) FROM deliveries WHERE channel = 'SLACK'`); n != 2 {
		t.Errorf("%d SLACK deliveries, want 2 (one per reservation)", n)
	}
	if n := e.count(`SELECT count(*) FROM deliveries WHERE event_id = 'res-5' AND channel = 'EMAIL'`); n != 3 {
		t.Errorf("res-5: %d EMAIL deliveries, want 3", n)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		return strings.Count(sink.String(), "webhook posted hook=T0HERALDDEV/B0R6") == 1
	}, "one post on B0R6:\n%s", sink)
	for hook, want := range map[string]int{"B0R5": 1, "B0R6": 1} {
		if n := strings.Count(sink.String(), "webhook posted hook=T0HERALDDEV/"+hook); n != want {
			t.Errorf("the stand-in logged %d posts to %s, want %d:\n%s", n, hook, want, sink.String())
		}
	}
	st, err := c.Event(context.Background(), "res-5")
	if err != nil {
		t.Fatal(err)
	}
	var posts []producer.DeliveryStatus
	for _, d := range st.Deliveries {
		if d.Channel == "SLACK" {
			posts = append(posts, d)
		}
	}
	if len(posts) != 1 || posts[0].Place != "restaurant:5" || posts[0].UserID != "" || posts[0].Status != "SENT" {
		t.Errorf("GET /v1/events/res-5 SLACK deliveries = %+v, want one SENT post with place restaurant:5 and no user", posts)
	}

	// The directory API checks destinations as directory import does.
	for _, bad := range []struct{ body, field string }{
		{`{"type":"restaurant","destinations":{"SLACK":""}}`, "destinations.SLACK"},
		{`{"type":"restaurant","destinations":{"SLACK":" r5"}}`, "destinations.SLACK"},
		{`{"type":"restaurant","destinations":{"SL ACK":"r5"}}`, "destinations"},
		{`{"type":"restaurant","destinations":{"SLACK":"a\u0000b"}}`, "destinations.SLACK"},
		{`{"type":"restaurant","destinations":{"SLACK":7}}`, "destinations.SLACK"},
		{`{"type":"restaurant","destinations":["r5"]}`, "destinations"},
		{`{"type":"restaurant","destinations":{"SLACK":"` + strings.Repeat("x", 513) + `"}}`, "destinations.SLACK"},
	} {
		code, body := e.directoryDo(t, "PUT", "/v1/groups/restaurant:7", bad.body)
		if code != http.StatusBadRequest && code != http.StatusUnprocessableEntity || !strings.Contains(body, bad.field) {
			t.Errorf("PUT %s: %d %s, want a 4xx naming %s", bad.body, code, body, bad.field)
		}
	}
	e.directoryCall(t, "PUT", "/v1/groups/restaurant:7", `{"type":"restaurant","destinations":{"SLACK":"r5"}}`, 201)
	code, body := e.directoryDo(t, "GET", "/v1/groups/restaurant:7", "")
	if code != http.StatusOK || !strings.Contains(body, `"destinations":{"SLACK":"r5"}`) {
		t.Errorf("GET the group: %d %s, want its destinations", code, body)
	}
}

// TestPlacePostsSurviveSIGKILLMidRelay: herald serve is killed (SIGKILL)
// while it relays a burst of reservations for two restaurants; after the
// restart every reservation has exactly one Slack post row, to its own
// restaurant's place, SENT, and the stand-in received every reservation's
// post, to its own restaurant's hook. A post the stand-in may see twice is
// only one whose send was in flight when the daemon died (its row not yet
// SENT): the webhook cannot drop the repeat, so Herald sends it again with
// the same idempotency key (docs/reliability.md, "Crash recovery").
func TestPlacePostsSurviveSIGKILLMidRelay(t *testing.T) {
	const events = 40
	e, d, sink := startPlaces(t)
	c := e.client()
	// The posts not recorded SENT when the daemon died: what it may have
	// had in flight.
	inDoubt := map[string]bool{}
	var wg sync.WaitGroup
	for i := range events {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// An emit the kill cuts off fails; every event is emitted
			// again after the restart (idempotent by event_id).
			_, _, _ = c.Emit(context.Background(), reservationAt(fmt.Sprintf("burst-%02d", i), 5+i%2))
		}()
		if i == events/4 {
			// Kill once the relay has written its first posts.
			testenv.Eventually(t, 30*time.Second, func() bool {
				return e.count(`SELECT count(*) FROM deliveries WHERE place`) > 0
			}, "a first post written")
			d.stop(syscall.SIGKILL)
			for _, id := range e.strings(`SELECT delivery_id::text FROM deliveries WHERE place AND status <> 'SENT'`) {
				inDoubt[e.tenant+":"+id] = true
			}
			t.Logf("killed with %d post rows written, %d events in the outbox (%d processed)",
				e.count(`SELECT count(*) FROM deliveries WHERE place`), e.count(`SELECT count(*) FROM event_outbox`),
				e.count(`SELECT count(*) FROM event_outbox WHERE status = 'PROCESSED'`))
			break
		}
	}
	wg.Wait()
	e.start()
	for i := range events {
		if _, _, err := c.Emit(context.Background(), reservationAt(fmt.Sprintf("burst-%02d", i), 5+i%2)); err != nil {
			t.Fatal(err)
		}
	}
	var statuses string
	testenv.Eventually(t, 120*time.Second, func() bool {
		statuses = e.statusSummary()
		return e.count(`SELECT count(*) FROM deliveries WHERE channel = 'SLACK' AND status = 'SENT'`) == events
	}, "%d SLACK posts SENT; statuses %s", events, statuses)
	if n := e.count(`SELECT count(*) FROM event_outbox WHERE status <> 'PROCESSED'`); n != 0 {
		t.Errorf("%d events not processed", n)
	}
	if n := e.count(`SELECT count(*) FROM (SELECT event_id FROM deliveries WHERE place GROUP BY event_id HAVING count(*) <> 1) x`); n != 0 {
		t.Errorf("%d reservations without exactly one post row", n)
	}
	if n := e.count(`SELECT count(*) FROM deliveries WHERE place AND user_id <> 'restaurant:' || (5 + substr(event_id, 7)::int % 2)`); n != 0 {
		t.Errorf("%d posts to another restaurant's place", n)
	}
	// Each post row's idempotency key reaches its own restaurant's hook;
	// one reaches it twice only if its send was in flight at the kill.
	hookOf := map[string]string{}
	for _, row := range e.strings(`SELECT delivery_id::text || ' ' || CASE WHEN user_id = 'restaurant:5' THEN 'B0R5' ELSE 'B0R6' END FROM deliveries WHERE place`) {
		id, hook, _ := strings.Cut(row, " ")
		hookOf[e.tenant+":"+id] = hook
	}
	posted := regexp.MustCompile(`webhook posted hook=T0HERALDDEV/(\S+) .* idempotency_key=(\S+)`)
	testenv.Eventually(t, 10*time.Second, func() bool {
		seen := map[string]bool{}
		for _, m := range posted.FindAllStringSubmatch(sink.String(), -1) {
			seen[m[2]] = true
		}
		return len(seen) >= events
	}, "%d posts at the stand-in", events)
	times := map[string]int{}
	for _, m := range posted.FindAllStringSubmatch(sink.String(), -1) {
		hook, key := m[1], m[2]
		times[key]++
		if want, ok := hookOf[key]; !ok || hook != want {
			t.Errorf("post %s went to hook %s; its row says %q", key, hook, want)
		}
	}
	repeats := 0
	for key := range hookOf {
		switch n := times[key]; {
		case n == 0:
			t.Errorf("post %s never reached the stand-in", key)
		case n > 1 && !inDoubt[key]:
			t.Errorf("post %s reached the stand-in %d times, but it was SENT before the kill", key, n)
		case n > 2:
			t.Errorf("post %s reached the stand-in %d times; a send in flight at the kill is repeated once", key, n)
		case n == 2:
			repeats++
		}
	}
	t.Logf("%d of %d posts were in flight at the kill and reached the stand-in twice", repeats, events)
}
