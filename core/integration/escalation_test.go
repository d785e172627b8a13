package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/core/internal/tools/devpeer"
	"github.com/heraldhq/herald/sdk/producer"
)

// escalationRules: the in-app notification at once (WEBSOCKET to the
// recording sink), the EMAIL (the real email plugin to the SMTP dev peer)
// only if it stays unread for after. RESERVATION_REQUESTED reaches the
// manager; RESERVATION_SHARED is first-to-act for the whole staff.
const escalationRules = `
defaults {
  time_zone = "UTC"
}
channel "EMAIL" {
  providers = [{ plugin = "email", config = { host = "127.0.0.1", port = %[1]s, from = "Herald <noreply@example.com>", tls = "none", timeout = "5s" } }]
  retry {
    max_attempts = 5
    initial      = "200ms"
    max          = "1s"
  }
}
channel "WEBSOCKET" {
  best_effort = true
  providers   = [{ plugin = "sink", config = { record_file = %[2]q, outcome = "sent" } }]
}
event "RESERVATION_REQUESTED" {
  audience {
    group = "restaurant:{{ .payload.restaurant_id }}"
    roles = ["MANAGER"]
  }
  mandatory   = ["WEBSOCKET"]
  optional    = ["EMAIL"]
  quiet_hours = "ignore"
  escalate "EMAIL" {
    after = %[3]q
  }
  inbox {
    title = "New reservation"
  }
  template "EMAIL" {
    subject = "Unread {{ .event.id }} for {{ .recipient.user_id }}"
    body    = "Nobody read the reservation yet."
  }
}
event "RESERVATION_SHARED" {
  shared = true
  audience {
    group = "restaurant:{{ .payload.restaurant_id }}"
    roles = ["MANAGER", "CHEF", "WAITER"]
  }
  mandatory   = ["WEBSOCKET"]
  optional    = ["EMAIL"]
  quiet_hours = "ignore"
  escalate "EMAIL" {
    after  = %[3]q
    unless = ["read", "acted"]
  }
  template "EMAIL" {
    subject = "Unread {{ .event.id }} for {{ .recipient.user_id }}"
    body    = "Nobody handled the reservation yet."
  }
}
`

// escalationWorld is an env whose EMAIL goes to a real SMTP peer.
type escalationWorld struct {
	*env
	smtp *lockedLog
	key  store.TokenKey
}

func newEscalationWorld(t *testing.T, after string) *escalationWorld {
	t.Helper()
	e := newEnv(t, "sent")
	e.pluginDir = testenv.PluginBinaries(t, "email", "sink")
	e.writeConfig()
	log := &lockedLog{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	peers, err := devpeer.Start(ctx, devpeer.Config{SMTPAddr: "127.0.0.1:0", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peers.Close() })
	_, port, _ := strings.Cut(peers.SMTPAddr(), ":")
	e.writeRules(fmt.Sprintf(escalationRules, port, e.record, after))
	return &escalationWorld{env: e, smtp: log, key: e.tokenKey(e.tenant)}
}

var smtpSubject = regexp.MustCompile(`accepted .* subject="([^"]*)" message-id=(\S+)( repeat=true)?`)

// mails counts the messages the SMTP peer accepted, by subject, and the
// repeats of a Message-ID it had seen (the same delivery sent again).
func (w *escalationWorld) mails() (bySubject map[string]int, repeats int) {
	bySubject = map[string]int{}
	for _, m := range smtpSubject.FindAllStringSubmatch(w.smtp.String(), -1) {
		bySubject[m[1]]++
		if m[3] != "" {
			repeats++
		}
	}
	return bySubject, repeats
}

func (w *escalationWorld) emit(typ, id string) {
	w.t.Helper()
	ev := producer.Event{EventID: id, Type: typ, Payload: json.RawMessage(`{"restaurant_id": 5}`)}
	if _, _, err := w.client().Emit(context.Background(), ev); err != nil {
		w.t.Fatal(err)
	}
}

// notification is user's notification id of event id, once the relay
// wrote it.
func (w *escalationWorld) notification(user, event string) string {
	w.t.Helper()
	var id string
	w.until(20*time.Second, func() bool {
		err := w.db.Pool.QueryRow(context.Background(), `SELECT notification_id::text FROM notifications WHERE user_id = $1 AND event_id = $2`,
			user, event).Scan(&id)
		return err == nil
	}, func() string { return user + "'s notification of " + event })
	return id
}

// inbox posts to the user's inbox API (read, actions) and returns the
// status.
func (w *escalationWorld) inbox(user, path, body string) int {
	w.t.Helper()
	req, _ := http.NewRequest("POST", w.apiURL+"/v1/inbox/"+path, bytes.NewReader([]byte(body)))
	req.Header.Set("Authorization", "Bearer "+w.userToken(w.t, w.key, user))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// email is the EMAIL delivery of user for event: status and last_error.
func (w *escalationWorld) email(user, event string) (string, string) {
	w.t.Helper()
	var status, lastErr string
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT status, last_error FROM deliveries WHERE channel = 'EMAIL' AND user_id = $1 AND event_id = $2`,
		user, event).Scan(&status, &lastErr); err != nil {
		w.t.Fatalf("EMAIL of %s for %s: %v", user, event, err)
	}
	return status, lastErr
}

// TestEscalationSentUnlessReadOrActed runs the rule "EMAIL after 3s unless
// the in-app notification was read or acted on" through a real herald
// serve, the real email plugin and the SMTP dev peer: the unread
// reservation's EMAIL waits (GET /v1/events/{id} shows it WAITING with its
// due time), then goes out once; the one read at once is CANCELLED by the
// read's own transaction ("read at …") and never reaches the peer; on the
// shared one, the chef's action cancels every sharer's EMAIL ("acted on by
// staff2 (CONFIRMED) …"). `events show` prints each.
func TestEscalationSentUnlessReadOrActed(t *testing.T) {
	w := newEscalationWorld(t, "3s")
	w.start()
	ctx := context.Background()
	w.emit("RESERVATION_REQUESTED", "esc-read")
	w.emit("RESERVATION_SHARED", "esc-acted")
	w.emit("RESERVATION_REQUESTED", "esc-unread")

	readID := w.notification("staff1", "esc-read")
	if code := w.inbox("staff1", readID+"/read", ""); code != http.StatusOK {
		t.Fatalf("read: %d", code)
	}
	if st, why := w.email("staff1", "esc-read"); st != store.StatusCancelled || !strings.HasPrefix(why, "read at ") {
		t.Fatalf("EMAIL of the read reservation: %s %q, want CANCELLED by the read at once", st, why)
	}
	sharedID := w.notification("staff2", "esc-acted")
	if code := w.inbox("staff2", sharedID+"/actions", `{"type": "CONFIRMED"}`); code != http.StatusOK {
		t.Fatalf("action: %d", code)
	}
	for _, u := range []string{"staff1", "staff2", "staff3"} {
		if st, why := w.email(u, "esc-acted"); st != store.StatusCancelled || !strings.HasPrefix(why, "acted on by staff2 (CONFIRMED) at ") {
			t.Errorf("EMAIL of %s for the handled reservation: %s %q, want CANCELLED by staff2's action", u, st, why)
		}
	}

	// The unread one waits, with its due time.
	w.notification("staff1", "esc-unread")
	st, err := w.client().Event(ctx, "esc-unread")
	if err != nil {
		t.Fatal(err)
	}
	var waiting *producer.DeliveryStatus
	for i, d := range st.Deliveries {
		if d.Channel == "EMAIL" {
			waiting = &st.Deliveries[i]
		}
	}
	if waiting == nil {
		t.Fatalf("no EMAIL delivery in %+v", st.Deliveries)
	}
	if waiting.Status == store.StatusWaiting {
		left := time.Until(waiting.NextAttemptAt)
		if waiting.Hold != store.HoldEscalation || !slices.Equal(waiting.EscalateUnless, []string{"read"}) || left > 3*time.Second {
			t.Errorf("waiting EMAIL: %+v (due in %s), want hold escalation, unless [read], due within 3s", *waiting, left)
		}
	} else {
		t.Logf("the EMAIL was already %s when asked (a slow machine): the wait is checked by its due time below", waiting.Status)
	}
	w.until(30*time.Second, func() bool {
		s, _ := w.email("staff1", "esc-unread")
		return s == store.StatusSent
	}, w.statusSummary)
	var due, created time.Time
	if err := w.db.Pool.QueryRow(ctx, `SELECT d.updated_at, n.created_at FROM deliveries d JOIN notifications n USING (notification_id)
		WHERE d.channel = 'EMAIL' AND d.event_id = 'esc-unread'`).Scan(&due, &created); err != nil {
		t.Fatal(err)
	}
	if due.Sub(created) < 3*time.Second {
		t.Errorf("the unread EMAIL was sent %s after its event, before its 3s wait", due.Sub(created))
	}
	mails, repeats := w.mails()
	if mails["Unread esc-unread for staff1"] != 1 || repeats != 0 || len(mails) != 1 {
		t.Errorf("the SMTP peer accepted %v (%d repeats), want the unread reservation's EMAIL once and nothing else:\n%s", mails, repeats, w.smtp.String())
	}
	// The cancelled ones are final: nothing the poller does sends them
	// (it ran past their due time before the unread one went out).
	for _, ev := range []string{"esc-read", "esc-acted"} {
		out, err := w.cli("events", "show", ev, "--url", w.apiURL, "--api-key", w.apiKey)
		if err != nil || !strings.Contains(out, "CANCELLED") || !strings.Contains(out, "escalation: ") {
			t.Errorf("events show %s: %v\n%s", ev, err, out)
		}
	}
	out, err := w.cli("events", "show", "esc-unread", "--url", w.apiURL, "--api-key", w.apiKey)
	if err != nil || !regexp.MustCompile(`staff1\s+EMAIL\s+SENT`).MatchString(out) {
		t.Errorf("events show esc-unread: %v\n%s", err, out)
	}
	t.Logf("events show esc-unread:\n%s", out)
}

// TestEscalationReadRacesThePoller reads 40 notifications while their
// escalations fall due and the poller releases them: every EMAIL ends
// exactly one of SENT and CANCELLED, a CANCELLED one never reaches the SMTP
// peer, and every SENT one reaches it once.
func TestEscalationReadRacesThePoller(t *testing.T) {
	const n = 40
	w := newEscalationWorld(t, "2s")
	w.start()
	ids := make([]string, n)
	for i := range n {
		w.emit("RESERVATION_REQUESTED", fmt.Sprintf("race-%02d", i))
	}
	for i := range n {
		ids[i] = w.notification("staff1", fmt.Sprintf("race-%02d", i))
	}
	// The readers start when the first escalation fell due, last emitted
	// first: the early ones race the poller, the late ones are read in time.
	w.until(30*time.Second, func() bool {
		return w.count(`SELECT count(*) FROM deliveries WHERE channel = 'EMAIL' AND status <> 'WAITING'`) > 0
	}, w.statusSummary)
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := n - 1 - r; i >= 0; i -= 4 {
				if code := w.inbox("staff1", ids[i]+"/read", ""); code != http.StatusOK {
					t.Errorf("read %d: %d", i, code)
				}
			}
		}()
	}
	wg.Wait()
	w.until(60*time.Second, func() bool {
		return w.count(`SELECT count(*) FROM deliveries WHERE channel = 'EMAIL' AND status IN ('SENT', 'CANCELLED')`) == n
	}, w.statusSummary)
	sent, cancelled := 0, 0
	mails, repeats := w.mails()
	for i := range n {
		ev := fmt.Sprintf("race-%02d", i)
		st, why := w.email("staff1", ev)
		subject := "Unread " + ev + " for staff1"
		switch st {
		case store.StatusSent:
			sent++
			if mails[subject] != 1 {
				t.Errorf("%s SENT, accepted %d times by the peer", ev, mails[subject])
			}
		case store.StatusCancelled:
			cancelled++
			if !strings.HasPrefix(why, "read at ") || mails[subject] != 0 {
				t.Errorf("%s CANCELLED (%q), accepted %d times by the peer", ev, why, mails[subject])
			}
		}
	}
	if repeats != 0 || sent+cancelled != n {
		t.Errorf("%d sent + %d cancelled of %d, %d repeats", sent, cancelled, n, repeats)
	}
	if cancelled == 0 {
		t.Errorf("no read came in time: every escalation was sent")
	}
	t.Logf("%d sent unread, %d cancelled by reads", sent, cancelled)
}

// TestEscalationsSurviveSIGKILL kills herald serve with SIGKILL while 30
// escalations wait (10 of them read first), starts it again next to a
// second daemon, and kills the first once more as the escalations are
// being released (the first wave out, the later ones still waiting). The second daemon finishes: the 20 unread ones are each
// SENT once (one successful attempt, one message at the peer), the 10 read
// ones stay CANCELLED and never reach it; nothing lost, nothing doubled.
func TestEscalationsSurviveSIGKILL(t *testing.T) {
	const n, read = 30, 10
	w := newEscalationWorld(t, "6s")
	a := w.start()
	// Three waves 1.5s apart, so that their escalations fall due one
	// after another and the second kill finds some released, some waiting.
	for i := range n {
		if i > 0 && i%10 == 0 {
			w.notification("staff1", fmt.Sprintf("kill-%02d", i-1))
			time.Sleep(1500 * time.Millisecond)
		}
		w.emit("RESERVATION_REQUESTED", fmt.Sprintf("kill-%02d", i))
	}
	for i := range read {
		id := w.notification("staff1", fmt.Sprintf("kill-%02d", i))
		if code := w.inbox("staff1", id+"/read", ""); code != http.StatusOK {
			t.Fatalf("read: %d", code)
		}
	}
	w.until(30*time.Second, func() bool {
		return w.count(`SELECT count(*) FROM deliveries WHERE channel = 'EMAIL'`) == n
	}, w.statusSummary)
	if waiting := w.count(`SELECT count(*) FROM deliveries WHERE channel = 'EMAIL' AND status = 'WAITING'`); waiting == 0 {
		t.Fatalf("no escalation waiting at the first kill: %s", w.statusSummary())
	}
	a.stop(syscall.SIGKILL)
	t.Logf("killed while waiting: %s", w.statusSummary())

	a = w.start()
	b := w.sibling()
	b.start()
	// Kill the first again as soon as releases begin.
	w.until(30*time.Second, func() bool {
		return w.count(`SELECT count(*) FROM deliveries WHERE channel = 'EMAIL' AND status NOT IN ('WAITING', 'CANCELLED')`) > 0
	}, w.statusSummary)
	a.stop(syscall.SIGKILL)
	t.Logf("killed at release: %s", w.statusSummary())
	if w.count(`SELECT count(*) FROM deliveries WHERE channel = 'EMAIL' AND status = 'WAITING'`) == 0 {
		t.Log("every escalation was released before the second kill (a slow restart): the kill came after the release")
	}

	w.until(90*time.Second, func() bool {
		return w.count(`SELECT count(*) FROM deliveries WHERE channel = 'EMAIL' AND status = 'SENT'`) == n-read
	}, w.statusSummary)
	if c := w.count(`SELECT count(*) FROM deliveries WHERE channel = 'EMAIL' AND status = 'CANCELLED' AND last_error LIKE 'read at %'`); c != read {
		t.Errorf("%d cancelled by their read, want %d: %s", c, read, w.statusSummary())
	}
	if c := w.count(`SELECT count(*) FROM (SELECT d.delivery_id FROM deliveries d JOIN delivery_attempt_log a ON a.delivery_id = d.delivery_id
		WHERE d.channel = 'EMAIL' AND a.outcome = 'sent' GROUP BY 1 HAVING count(*) <> 1) x`); c != 0 {
		t.Errorf("%d EMAIL deliveries have more than one successful attempt", c)
	}
	mails, repeats := w.mails()
	for i := range n {
		subject := fmt.Sprintf("Unread kill-%02d for staff1", i)
		want := 1
		if i < read {
			want = 0
		}
		// A kill in the middle of an SMTP conversation may make the
		// delivery go out again under the same Message-ID (marked repeat):
		// at-least-once at the provider, one delivery in Herald's record.
		if got := mails[subject]; got < want || (want == 0 && got != 0) {
			t.Errorf("%s: accepted %d times, want %d", subject, got, want)
		}
	}
	if len(mails) != n-read {
		t.Errorf("the peer accepted %d distinct subjects, want %d: %v", len(mails), n-read, mails)
	}
	t.Logf("messages at the peer %v; %d repeats (same Message-ID after a kill)", len(mails), repeats)
}
