package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk/producer"
)

// cancelAnswer is DELETE /v1/events/{id}'s answer: the status, the
// Cancellation document (200) or the problem's detail and field.
type cancelAnswer struct {
	code int
	doc  store.Cancellation
	raw  string
	prob struct {
		Detail string `json:"detail"`
		Field  string `json:"field"`
	}
}

// cancel sends DELETE /v1/events/{escaped} with key.
func (e *env) cancel(key, escaped string) cancelAnswer {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodDelete, e.apiURL+"/v1/events/"+escaped, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	a := cancelAnswer{code: resp.StatusCode, raw: string(body)}
	if a.code == http.StatusOK {
		err = json.Unmarshal(body, &a.doc)
	} else {
		err = json.Unmarshal(body, &a.prob)
	}
	if err != nil {
		e.t.Fatalf("DELETE %s: %d %s: %v", escaped, a.code, body, err)
	}
	return a
}

// TestCancelScheduledEvent: an event scheduled a few seconds ahead is
// cancelled (200, status CANCELLED) and never fanned out: a second event
// scheduled later than it is delivered, which shows the relay ran past
// the first one's time; GET shows CANCELLED; a repeat answers the same;
// another tenant's key gets 404; malformed ids get 400 naming event_id; an
// event whose deliveries all went out gets 409 naming them.
func TestCancelScheduledEvent(t *testing.T) {
	e := newEnv(t, "sent")
	e.start()
	ctx := context.Background()
	at := time.Now().Add(3 * time.Second)
	first, second, third := reservation("sched-1"), reservation("sched-2"), reservation("sched-3")
	first.AvailableAt, second.AvailableAt, third.AvailableAt = at, at.Add(time.Second), at
	for _, ev := range []producer.Event{first, second, third} {
		if _, _, err := e.client().Emit(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	a := e.cancel(e.apiKey, "sched-1")
	if a.code != http.StatusOK || a.doc.Status != store.EventCancelled || a.doc.Cancelled != 0 || a.doc.InFlight != 0 {
		t.Fatalf("cancel: %d %s; want 200 CANCELLED", a.code, a.raw)
	}
	if again := e.cancel(e.apiKey, "sched-1"); again.code != http.StatusOK || again.raw != a.raw {
		t.Fatalf("repeat: %d %s; want 200 %s", again.code, again.raw, a.raw)
	}
	// The CLI does the same on the database.
	out, err := e.cli("events", "cancel", "sched-3", "--tenant", e.tenant)
	if err != nil || !strings.Contains(out, "status CANCELLED") {
		t.Fatalf("events cancel: %v\n%s", err, out)
	}
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"other tenant": {[]string{"sched-3", "--tenant", "other"}, `event_id: tenant "other" has no event "sched-3"`},
		"bad id":       {[]string{"a b", "--tenant", e.tenant}, "event_id: byte 1 is 0x20"},
		"no tenant":    {[]string{"sched-3"}, "--tenant: tenant id is required"},
	} {
		out, err := e.cli(append([]string{"events", "cancel"}, c.args...)...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("events cancel, %s: %v\n%s\nwant an error with %q", name, err, out, c.want)
		}
	}
	// The relay ran past sched-1's time: sched-2, due a second after it,
	// went out.
	e.waitAllSent(deliveriesPerEvent, 60*time.Second)
	if n := e.count(`SELECT count(*) FROM deliveries WHERE event_id IN ('sched-1', 'sched-3')`); n != 0 {
		t.Fatalf("the cancelled event has %d deliveries", n)
	}
	if n := e.count(`SELECT count(*) FROM notifications WHERE event_id = 'sched-1'`); n != 0 {
		t.Fatalf("the cancelled event has %d notifications", n)
	}
	st, err := e.client().Event(ctx, "sched-1")
	if err != nil || st.Status != store.EventCancelled || st.LastError != store.CancelReason {
		t.Fatalf("GET: %s %q, %v; want CANCELLED %q", st.Status, st.LastError, err, store.CancelReason)
	}
	out, err = e.cli("events", "show", "sched-1", "--url", e.apiURL, "--api-key", e.apiKey)
	if err != nil || !strings.Contains(out, "status CANCELLED") {
		t.Fatalf("events show: %v\n%s", err, out)
	}

	// Everything of sched-2 went out: 409 naming it, and nothing changes.
	a = e.cancel(e.apiKey, "sched-2")
	if a.code != http.StatusConflict || a.prob.Field != "event_id" || !strings.Contains(a.prob.Detail, fmt.Sprintf("%d SENT", deliveriesPerEvent)) {
		t.Fatalf("cancel of a sent event: %d %s; want 409 naming %d SENT", a.code, a.raw, deliveriesPerEvent)
	}

	// Another tenant's key never sees this tenant's events.
	if err := store.EnsureTenant(ctx, e.db.Pool, "other", "Other"); err != nil {
		t.Fatal(err)
	}
	otherKey, err := store.CreateAPIKey(ctx, e.db.Pool, "other", "test", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"sched-1", "sched-2", "nope"} {
		if a := e.cancel(otherKey, id); a.code != http.StatusNotFound || a.prob.Field != "event_id" {
			t.Errorf("other tenant cancels %s: %d %s; want 404 naming event_id", id, a.code, a.raw)
		}
	}
	for name, escaped := range map[string]string{
		"NUL":           "a%00b",
		"invalid UTF-8": "a%ffb",
		"space":         "a%20b",
		"10 kB":         strings.Repeat("x", 10000),
	} {
		if a := e.cancel(e.apiKey, escaped); a.code != http.StatusBadRequest || a.prob.Field != "event_id" || !strings.HasPrefix(a.prob.Detail, "event_id: ") {
			t.Errorf("%s: %d %s; want 400 naming event_id", name, a.code, a.raw)
		}
	}
	if a := e.cancel(e.apiKey, "sched%2D1"); a.code != http.StatusOK || a.doc.EventID != "sched-1" {
		t.Errorf("percent-encoded id: %d %s; want the event sched-1", a.code, a.raw)
	}
	if n := e.count(`SELECT count(*) FROM deliveries WHERE status <> 'SENT'`); n != 0 {
		t.Fatalf("%d deliveries changed by refused cancels: %s", n, e.statusSummary())
	}
}

// TestCancelDuringQuietHours: deliveries deferred by their recipients'
// quiet hours are cancelled while they wait, and the event's answer
// counts them; the sink never receives them.
func TestCancelDuringQuietHours(t *testing.T) {
	e := newEnv(t, "sent")
	e.writeRules(strings.Replace(fmt.Sprintf(sinkRules, e.record, "sent"), `quiet_hours = "ignore"`, `quiet_hours = "defer"`, 1))
	ctx := context.Background()
	now := time.Now().UTC()
	quiet := &directory.QuietHours{Start: now.Add(-time.Hour).Format("15:04"), End: now.Add(2 * time.Hour).Format("15:04")}
	dir := staff
	dir.Recipients = append([]directory.Recipient(nil), staff.Recipients...)
	for i := range dir.Recipients {
		dir.Recipients[i].QuietHours = quiet
	}
	if err := store.ImportDirectory(ctx, e.db.Pool, e.tenant, &dir); err != nil {
		t.Fatal(err)
	}
	e.start()
	if _, _, err := e.client().Emit(ctx, reservation("quiet-1")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE event_id = 'quiet-1' AND status = 'DEFERRED'`) > 0
	}, "deferred deliveries (now: %s)", e.statusSummary())
	deferred := e.count(`SELECT count(*) FROM deliveries WHERE event_id = 'quiet-1' AND status = 'DEFERRED'`)
	a := e.cancel(e.apiKey, "quiet-1")
	if a.code != http.StatusOK || a.doc.Status != "PROCESSED" || a.doc.Cancelled < deferred {
		t.Fatalf("cancel: %d %s; want 200 with at least the %d deferred cancelled", a.code, a.raw, deferred)
	}
	if n := e.count(`SELECT count(*) FROM deliveries WHERE event_id = 'quiet-1' AND status = 'CANCELLED' AND last_error = $1`, store.CancelReason); n != a.doc.Cancelled {
		t.Fatalf("%d deliveries CANCELLED, the answer said %d", n, a.doc.Cancelled)
	}
	// Whatever quiet hours still hold is due at once, and the quiet hours
	// end: a control event goes out, so the deferred poller and the
	// listeners ran, and found nothing of quiet-1 left to send.
	if _, err := e.db.Pool.Exec(ctx, `UPDATE deliveries SET next_attempt_at = now() - interval '1 second' WHERE status = 'DEFERRED'`); err != nil {
		t.Fatal(err)
	}
	if err := store.ImportDirectory(ctx, e.db.Pool, e.tenant, &staff); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.client().Emit(ctx, reservation("quiet-2")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE event_id = 'quiet-2' AND status = 'SENT'`) == deliveriesPerEvent &&
			e.count(`SELECT count(*) FROM deliveries WHERE status = 'DEFERRED'`) == 0
	}, "quiet-2 SENT and nothing DEFERRED (now: %s)", e.statusSummary())
	if n := e.count(`SELECT count(*) FROM deliveries WHERE event_id = 'quiet-1' AND status NOT IN ('CANCELLED', 'SENT')`); n != 0 {
		t.Fatalf("%d deliveries of quiet-1 neither CANCELLED nor SENT: %s", n, e.statusSummary())
	}
	for id := range e.sinkRecords() {
		var ev string
		var status string
		if err := e.db.Pool.QueryRow(ctx, `SELECT event_id, status FROM deliveries WHERE delivery_id = $1`, id).Scan(&ev, &status); err == nil &&
			ev == "quiet-1" && status != store.StatusSent {
			t.Fatalf("the sink received %s of the cancelled event (%s)", id, status)
		}
	}
}

// TestCancelRacesThePipeline: many events go out while concurrent
// cancels hit them at every stage (not yet relayed, being relayed, being
// published, being sent). Afterwards every delivery is SENT or CANCELLED,
// no CANCELLED one reached the sink or has a sent attempt, and each
// answer's cancelled count is what the database holds.
func TestCancelRacesThePipeline(t *testing.T) {
	e := newEnv(t, "sent")
	e.start()
	ctx := context.Background()
	const events = 40
	var wg sync.WaitGroup
	answers := make([]cancelAnswer, events)
	for i := range events {
		id := fmt.Sprintf("race-%d", i)
		if _, _, err := e.client().Emit(ctx, reservation(id)); err != nil {
			t.Fatal(err)
		}
		// Cancel after a delay that grows with i: the first ones before
		// the relay, the last ones during or after sending.
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i%10) * 40 * time.Millisecond)
			answers[i] = e.cancel(e.apiKey, id)
		}()
	}
	wg.Wait()
	testenv.Eventually(t, 90*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE status NOT IN ('SENT', 'CANCELLED')`) == 0 &&
			e.count(`SELECT count(*) FROM event_outbox WHERE status = 'PENDING'`) == 0
	}, "every delivery SENT or CANCELLED (now: %s)", e.statusSummary())
	if n := e.count(`SELECT count(*) FROM deliveries d JOIN delivery_attempt_log a ON a.delivery_id = d.delivery_id
		WHERE d.status = 'CANCELLED' AND a.outcome = 'sent'`); n != 0 {
		t.Fatalf("%d CANCELLED deliveries have a sent attempt", n)
	}
	sunk := e.sinkRecords()
	var cancelledIDs []string
	rows, err := e.db.Pool.Query(ctx, `SELECT delivery_id::text FROM deliveries WHERE status = 'CANCELLED'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		_ = rows.Scan(&id)
		cancelledIDs = append(cancelledIDs, id)
	}
	rows.Close()
	for _, id := range cancelledIDs {
		if sunk[id] > 0 {
			t.Errorf("CANCELLED delivery %s reached the sink", id)
		}
	}
	kinds := map[string]int{}
	for i, a := range answers {
		id := fmt.Sprintf("race-%d", i)
		cancelled := e.count(`SELECT count(*) FROM deliveries WHERE event_id = $1 AND status = 'CANCELLED'`, id)
		switch a.code {
		case http.StatusOK:
			if a.doc.Cancelled != cancelled {
				t.Errorf("%s: answered %d cancelled, the database holds %d", id, a.doc.Cancelled, cancelled)
			}
			if a.doc.Status == store.EventCancelled {
				kinds["event"]++
				if n := e.count(`SELECT count(*) FROM deliveries WHERE event_id = $1`, id); n != 0 {
					t.Errorf("%s: cancelled event has %d deliveries", id, n)
				}
			} else {
				kinds["deliveries"]++
			}
		case http.StatusConflict:
			kinds["too late"]++
			if cancelled != 0 {
				t.Errorf("%s: 409 but %d deliveries CANCELLED", id, cancelled)
			}
		default:
			t.Errorf("%s: %d %s", id, a.code, a.raw)
		}
	}
	t.Logf("answers: %v; deliveries: %s; sink received %d", kinds, e.statusSummary(), len(sunk))
	if n := e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT'`); n != len(sunk) {
		t.Errorf("%d SENT, the sink received %d distinct deliveries", n, len(sunk))
	}
}
