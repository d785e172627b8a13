package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/sdk/producer"
)

// digestRules collects staff1's EMAIL per restaurant for two seconds or
// five reservations; the digest lists the items' numbers.
func digestRules(record string) string {
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
  }
  template "EMAIL" {
    subject = "{{ len .items }} new reservations"
    body    = "{{ range .items }}#{{ .payload.n }} {{ end }}"
  }
}
`, record)
}

// TestDigestSIGKILLInsideAWindowAndWhileFlushing kills `herald serve` with
// SIGKILL twice: while items wait in open windows, and the moment a
// hundred windows fall due together (the flush under way or about to be).
// After the restarts every reservation is in exactly one digest delivery
// the sink received, and the database holds one digest per window.
func TestDigestSIGKILLInsideAWindowAndWhileFlushing(t *testing.T) {
	e := newEnv(t, "sent")
	e.writeRules(digestRules(e.record))
	ctx := context.Background()
	n := 0
	enqueue := func(count, restaurants int) {
		t.Helper()
		for range count {
			ev := producer.Event{TenantID: e.tenant, EventID: fmt.Sprintf("res-%d", n), Type: "RESERVATION_REQUESTED",
				Payload: json.RawMessage(fmt.Sprintf(`{"restaurant_id": %d, "n": %d}`, n%restaurants, n))}
			if err := producer.Enqueue(ctx, e.db.Pool, ev); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}

	// 1. Killed inside a window: items wait, none is due yet.
	d := e.start()
	enqueue(12, 4) // 4 restaurants × 3 items: every window open
	e.until(30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE status = 'WAITING' AND hold = 'digest'`) == 12
	}, func() string { return "12 items waiting: " + e.statusSummary() })
	d.stop(syscall.SIGKILL)
	if w := e.count(`SELECT count(*) FROM digest_windows`); w != 4 {
		t.Fatalf("%d windows open at the kill, want 4", w)
	}

	// 2. While down, 400 more reservations for 100 restaurants; the
	// restarted daemon relays them into 100 windows of 4 plus the 4 old
	// ones, which fall due about together; it is killed the moment the
	// first is due.
	enqueue(400, 100)
	d = e.start()
	e.until(30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE hold = 'digest'`) == 412
	}, func() string { return "412 items relayed: " + e.statusSummary() })
	e.until(30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM digest_windows WHERE closes_at <= now()`) > 0 ||
			e.count(`SELECT count(*) FROM deliveries WHERE event_id LIKE 'digest:%'`) > 0
	}, func() string { return "a window due" })
	d.stop(syscall.SIGKILL)
	t.Logf("killed while flushing: %d windows left, %d digests written", e.count(`SELECT count(*) FROM digest_windows`),
		e.count(`SELECT count(*) FROM deliveries WHERE event_id LIKE 'digest:%'`))

	// 3. Restarted: everything drains.
	e.start()
	e.until(60*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM digest_windows`) == 0 &&
			e.count(`SELECT count(*) FROM deliveries WHERE status NOT IN ('SENT', 'DIGESTED')`) == 0
	}, func() string { return "every digest sent: " + e.statusSummary() })

	if got := e.count(`SELECT count(*) FROM deliveries WHERE status = 'DIGESTED'`); got != n {
		t.Fatalf("%d items DIGESTED, want %d", got, n)
	}
	digests := e.count(`SELECT count(*) FROM deliveries WHERE event_id LIKE 'digest:%'`)
	if w := e.count(`SELECT count(DISTINCT digest_window) FROM deliveries WHERE event_id LIKE 'digest:%'`); w != digests {
		t.Fatalf("%d digests for %d windows: a window was flushed twice", digests, w)
	}
	// Every reservation is in exactly one digest the sink received.
	data, err := os.ReadFile(e.record)
	if err != nil {
		t.Fatal(err)
	}
	num := regexp.MustCompile(`#(\d+)`)
	bodies := map[string]string{} // digest delivery id → body
	for _, line := range completeLines(data) {
		var rec struct {
			DeliveryID string                 `json:"delivery_id"`
			EventID    string                 `json:"event_id"`
			Outcome    string                 `json:"outcome"`
			Content    *struct{ Body string } `json:"content"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Content == nil || !strings.HasPrefix(rec.EventID, "digest:") {
			continue
		}
		if old, ok := bodies[rec.DeliveryID]; ok && old != rec.Content.Body {
			t.Fatalf("digest %s sent twice with different bodies: %q, %q", rec.DeliveryID, old, rec.Content.Body)
		}
		bodies[rec.DeliveryID] = rec.Content.Body
	}
	if len(bodies) != digests {
		t.Fatalf("the sink received %d digests, the database has %d", len(bodies), digests)
	}
	seen := make([]int, n)
	for _, body := range bodies {
		for _, m := range num.FindAllStringSubmatch(body, -1) {
			i, _ := strconv.Atoi(m[1])
			seen[i]++
		}
	}
	for i, c := range seen {
		if c != 1 {
			t.Errorf("reservation %d is in %d digests, want 1", i, c)
		}
	}
	t.Logf("%d reservations in %d digests", n, digests)
}

// foldRules lets staff1 get at most two SMS per 20 seconds per
// restaurant; what goes over is folded into one digest sent when the
// window ends. The template lists the items' numbers.
func foldRules(record string) string {
	return fmt.Sprintf(`
defaults { time_zone = "UTC" }
channel "SMS" {
  providers = [{ plugin = "sink", config = { record_file = %q } }]
}
event "RESERVATION_UNCONFIRMED" {
  audience { user = "staff1" }
  mandatory   = ["SMS"]
  quiet_hours = "ignore"
  throttle {
    key   = "restaurant:{{ .payload.restaurant_id }}"
    limit = 2
    per   = "20s"
    over  = "digest"
  }
  template "SMS" {
    body = "{{ len .items }}:{{ range .items }} #{{ .payload.n }}{{ end }}"
  }
}
`, record)
}

// TestThrottleOverLimitArrivesInOneDigest relays six reminders for one
// restaurant inside one 20-second throttle window through `herald serve`
// and the real sink plugin: two SMS go out alone at once, the four over
// the limit wait as digest items naming the reason, and once the window
// ends the sink receives exactly one more SMS listing those four.
func TestThrottleOverLimitArrivesInOneDigest(t *testing.T) {
	e := newEnv(t, "sent")
	e.writeRules(foldRules(e.record))
	ctx := context.Background()
	e.start()
	// Start early in a window, so that the six are counted in one: the
	// relay has 12 seconds for them (the check below says if it did not).
	const per = 20 * time.Second
	e.until(per+5*time.Second, func() bool {
		return time.Since(time.Now().Truncate(per)) < 8*time.Second
	}, func() string { return "the start of a throttle window" })
	for n := range 6 {
		ev := producer.Event{TenantID: e.tenant, EventID: fmt.Sprintf("rem-%d", n), Type: "RESERVATION_UNCONFIRMED",
			Payload: json.RawMessage(fmt.Sprintf(`{"restaurant_id": 5, "n": %d}`, n))}
		if err := producer.Enqueue(ctx, e.db.Pool, ev); err != nil {
			t.Fatal(err)
		}
	}
	e.until(30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE event_id LIKE 'rem-%'`) == 6
	}, func() string { return "six reminders relayed: " + e.statusSummary() })
	if w := e.count(`SELECT count(DISTINCT window_start) FROM throttle_counters`); w != 1 {
		t.Fatalf("the six reminders were counted in %d throttle windows, want 1 (the relay took over 12s)", w)
	}
	e.until(30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE event_id LIKE 'rem-%' AND status = 'SENT'`) == 2
	}, func() string { return "two sent alone: " + e.statusSummary() })
	// Until the window ends (unless the flush already came), the four
	// wait, each naming why.
	waiting := e.count(`SELECT count(*) FROM deliveries WHERE event_id LIKE 'rem-%' AND status = 'WAITING' AND hold = 'digest'
		AND last_error LIKE 'throttled: 2 per 20s, folded into digest "restaurant:5", sent at %'`)
	if flushed := e.count(`SELECT count(*) FROM deliveries WHERE event_id LIKE 'digest:%'`); waiting != 4 && flushed == 0 {
		t.Fatalf("%d reminders wait in the digest with the reason, want 4: %s", waiting, e.statusSummary())
	}
	e.until(per+30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE event_id LIKE 'digest:%' AND status = 'SENT'`) == 1 &&
			e.count(`SELECT count(*) FROM digest_windows`) == 0
	}, func() string { return "the digest sent: " + e.statusSummary() })

	if n := e.count(`SELECT count(*) FROM deliveries WHERE event_id LIKE 'rem-%' AND status = 'DIGESTED'`); n != 4 {
		t.Fatalf("%d reminders DIGESTED, want 4: %s", n, e.statusSummary())
	}
	if n := e.count(`SELECT count(*) FROM deliveries WHERE event_id LIKE 'digest:%'`); n != 1 {
		t.Fatalf("%d digest deliveries, want 1", n)
	}
	data, err := os.ReadFile(e.record)
	if err != nil {
		t.Fatal(err)
	}
	var alone, digests []string
	for _, line := range completeLines(data) {
		var rec struct {
			EventID string                 `json:"event_id"`
			Content *struct{ Body string } `json:"content"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Content == nil {
			continue
		}
		if strings.HasPrefix(rec.EventID, "digest:") {
			digests = append(digests, rec.Content.Body)
		} else {
			alone = append(alone, rec.Content.Body)
		}
	}
	if len(alone) != 2 || len(digests) != 1 {
		t.Fatalf("the sink got %d SMS alone and %d digests, want 2 and 1: %q %q", len(alone), len(digests), alone, digests)
	}
	seen := map[string]int{}
	for _, body := range append(append([]string{}, alone...), digests...) {
		for _, m := range regexp.MustCompile(`#(\d+)`).FindAllStringSubmatch(body, -1) {
			seen[m[1]]++
		}
	}
	for n := range 6 {
		if c := seen[strconv.Itoa(n)]; c != 1 {
			t.Errorf("reminder %d reached the sink %d times, want 1 (alone %q, digest %q)", n, c, alone, digests)
		}
	}
	if !strings.HasPrefix(digests[0], "4:") {
		t.Errorf("the digest is %q, want the four over the limit", digests[0])
	}
}
