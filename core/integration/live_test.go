package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// liveRules sends WEBSOCKET through the real websocket plugin (publishing
// to the vhost's live exchange) and the other channels to the sink.
func liveRules(record, amqpURL string) string {
	r := fmt.Sprintf(sinkRules, record, "sent")
	old := `channel "WEBSOCKET" {
  best_effort = true
  providers   = [{ plugin = "sink", config = { record_file = "` + record + `", outcome = "sent" } }]
}`
	if !strings.Contains(r, old) {
		panic("sinkRules changed: update liveRules")
	}
	return strings.Replace(r, old, fmt.Sprintf(`channel "WEBSOCKET" {
  best_effort = true
  providers   = [{ plugin = "websocket", config = { amqp_url = %q } }]
}`, amqpURL), 1)
}

// withLivePlugins gives e a plugin folder of its own with the sink and
// the real websocket plugin.
func (e *env) withLivePlugins() {
	e.t.Helper()
	e.pluginDir = filepath.Join(e.dir, "plugins")
	if err := os.MkdirAll(e.pluginDir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	testenv.InstallPlugin(e.t, testenv.PluginVariant(e.t, "sink"), e.pluginDir, "sink")
	testenv.InstallPlugin(e.t, testenv.PluginVariant(e.t, "websocket"), e.pluginDir, "websocket")
}

// sibling is a second daemon of e's world: same database, vhost, plugins
// and rules, its own listeners.
func (e *env) sibling() *env {
	e.t.Helper()
	s := *e
	s.apiURL, s.admin = "http://"+freePort(e.t), "http://"+freePort(e.t)
	s.cfgPath = filepath.Join(e.dir, "herald-2.hcl")
	s.writeConfig()
	return &s
}

// liveBrowser is a real WebSocket client on a daemon's live gateway.
type liveBrowser struct {
	conn   *websocket.Conn
	mu     sync.Mutex
	frames []map[string]any
	closed chan struct{}
}

func (e *env) openLive(t *testing.T, key store.TokenKey, user string) *liveBrowser {
	t.Helper()
	tok, err := auth.Issue(key, e.audience(t), auth.User{UserID: user, UserType: "STAFF"}, 5*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", e.apiURL+"/v1/live/tickets", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tk struct{ URL string }
	_ = json.NewDecoder(resp.Body).Decode(&tk)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("ticket: %s", resp.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.apiURL, "http")+tk.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, msg, err := conn.Read(ctx); err != nil || !strings.Contains(string(msg), `"ready"`) {
		t.Fatalf("ready: %s %v", msg, err)
	}
	b := &liveBrowser{conn: conn, closed: make(chan struct{})}
	go func() {
		defer close(b.closed)
		for {
			_, msg, err := conn.Read(context.Background())
			if err != nil {
				return
			}
			var f map[string]any
			_ = json.Unmarshal(msg, &f)
			b.mu.Lock()
			b.frames = append(b.frames, f)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = conn.CloseNow() })
	return b
}

// notifications returns the event ids of the notification frames so far.
func (b *liveBrowser) notifications() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, f := range b.frames {
		if f["type"] == "notification" {
			out = append(out, fmt.Sprint(f["body"]))
		}
	}
	return out
}

// TestLiveDeliveryReachesTheUserOnAnotherDaemon: staff1's browser sits on
// daemon 2; events are posted to daemon 1, whose pipeline (or daemon 2's)
// sends the WEBSOCKET deliveries through the real websocket plugin. staff1
// gets each notification once; staff2 and staff3 hold no session anywhere
// and their WEBSOCKET deliveries end SKIPPED "offline" (not FAILED: an
// attempt logged as skipped, counted as skipped in the metrics, never
// requeued by `herald deliveries retry`). Then the websocket
// plugin is hot-swapped on both daemons to another build: the browser's
// session stays open and the next event still reaches it.
func TestLiveDeliveryReachesTheUserOnAnotherDaemon(t *testing.T) {
	e := newEnv(t, "sent")
	e.withLivePlugins()
	e.writeConfig()
	e.writeRules(liveRules(e.record, e.broker.URL))
	ctx := context.Background()
	secret, _ := auth.NewSecret()
	key := store.TokenKey{TenantID: e.tenant, Kid: "k1", Alg: "HS256", Issuer: "https://acme.example", Key: secret}
	if err := store.AddTokenKey(ctx, e.db.Pool, key); err != nil {
		t.Fatal(err)
	}
	e.start()
	e2 := e.sibling()
	e2.start()
	browser := e2.openLive(t, key, "staff1")

	c := e.client()
	for i := range 3 {
		ev := reservation(fmt.Sprintf("live-%d", i))
		ev.Payload = json.RawMessage(fmt.Sprintf(`{"restaurant_id": 5, "customer_name": "Guest%d", "pax": 2}`, i))
		if _, _, err := c.Emit(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 60*time.Second, func() bool { return len(browser.notifications()) == 3 },
		"staff1's browser on daemon 2 gets 3 notifications (has %v)", browser.notifications())
	testenv.Eventually(t, 60*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE channel = 'WEBSOCKET' AND status = ANY($1)`, store.FinalStatuses) == 9
	}, "every WEBSOCKET delivery final (%s)", e.statusSummary())
	if n := e.count(`SELECT count(*) FROM deliveries WHERE channel = 'WEBSOCKET' AND user_id = 'staff1' AND status = 'SENT'`); n != 3 {
		t.Fatalf("staff1: %d WEBSOCKET deliveries SENT, want 3", n)
	}
	if n := e.count(`SELECT count(*) FROM deliveries WHERE channel = 'WEBSOCKET' AND user_id <> 'staff1'
			AND status = 'SKIPPED' AND last_error = 'offline'`); n != 6 {
		t.Fatalf("staff2 and staff3: %d WEBSOCKET deliveries SKIPPED offline, want 6 (%s)", n, e.statusSummary())
	}
	if n := e.count(`SELECT count(*) FROM delivery_attempt_log a JOIN deliveries d ON d.delivery_id = a.delivery_id
			WHERE d.channel = 'WEBSOCKET' AND d.user_id <> 'staff1' AND a.outcome = 'skipped' AND a.error = 'offline'`); n != 6 {
		t.Fatalf("staff2 and staff3: %d attempts logged skipped offline, want 6", n)
	}
	// Counted as skipped, never as failed, on the two daemons together
	// (either may have sent them).
	testenv.Eventually(t, 30*time.Second, func() bool {
		s1, s2 := e.scrapeMetrics(), e2.scrapeMetrics()
		return max(s1.sum("herald_deliveries_total", "channel", "WEBSOCKET", "outcome", "skipped"), 0)+
			max(s2.sum("herald_deliveries_total", "channel", "WEBSOCKET", "outcome", "skipped"), 0) == 6
	}, "6 WEBSOCKET deliveries counted skipped")
	for _, d := range []*env{e, e2} {
		if got := d.scrapeMetrics().sum("herald_deliveries_total", "channel", "WEBSOCKET", "outcome", "failed"); got > 0 {
			t.Fatalf("herald_deliveries_total{channel=WEBSOCKET,outcome=failed} = %g, want 0", got)
		}
	}
	if out, err := e.cli("deliveries", "retry", "--tenant", e.tenant); err != nil || !strings.Contains(out, "requeued 0 ") {
		t.Fatalf("deliveries retry: %v\n%s; want nothing requeued (SKIPPED is not a failure)", err, out)
	}

	// Hot swap: another build of the plugin on both daemons.
	testenv.InstallPlugin(t, testenv.PluginVariant(t, "websocket", "Version=0.2.1-swapped"), e.pluginDir, "websocket")
	for _, d := range []*env{e, e2} {
		if out, err := d.cli("plugins", "reload", "websocket"); err != nil {
			t.Fatalf("plugins reload websocket: %v\n%s", err, out)
		}
		d.until(30*time.Second, func() bool { return d.plugin("WEBSOCKET", "websocket").Version == "0.2.1-swapped" },
			func() string { return fmt.Sprintf("%+v", d.plugin("WEBSOCKET", "websocket")) })
	}
	select {
	case <-browser.closed:
		t.Fatal("the hot swap closed the browser's session")
	default:
	}
	ev := reservation("live-after-swap")
	ev.Payload = json.RawMessage(`{"restaurant_id": 5, "customer_name": "AfterSwap", "pax": 2}`)
	if _, _, err := c.Emit(ctx, ev); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() bool { return len(browser.notifications()) == 4 },
		"the session gets the event after the swap (has %v)", browser.notifications())
}

// TestInboxChangesReachSharersOnOtherDaemons: staff1's browser sits on
// daemon 2; staff2 (a sharer of the same reservation) confirms it through
// daemon 1's inbox API. staff1's session gets the inbox frame with the
// notification and the new unread count, and staff1's view shows who
// handled it.
func TestInboxChangesReachSharersOnOtherDaemons(t *testing.T) {
	e := newEnv(t, "sent")
	ctx := context.Background()
	secret, _ := auth.NewSecret()
	key := store.TokenKey{TenantID: e.tenant, Kid: "k1", Alg: "HS256", Issuer: "https://acme.example", Key: secret}
	if err := store.AddTokenKey(ctx, e.db.Pool, key); err != nil {
		t.Fatal(err)
	}
	e.start()
	e2 := e.sibling()
	e2.start()
	if _, _, err := e.client().Emit(ctx, reservation("shared-1")); err != nil {
		t.Fatal(err)
	}
	e.waitAllSent(deliveriesPerEvent, 60*time.Second)
	browser := e2.openLive(t, key, "staff1")

	tok := func(user string) string {
		s, err := auth.Issue(key, e.audience(t), auth.User{UserID: user, UserType: "STAFF"}, 5*time.Minute, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var id string
	if err := e.db.Pool.QueryRow(ctx, `SELECT notification_id::text FROM notifications WHERE user_id = 'staff2'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", e.apiURL+"/v1/inbox/"+id+"/actions", strings.NewReader(`{"type":"CONFIRMED"}`))
	req.Header.Set("Authorization", "Bearer "+tok("staff2"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("staff2 confirms: %s", resp.Status)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		browser.mu.Lock()
		defer browser.mu.Unlock()
		for _, f := range browser.frames {
			if f["type"] == "inbox" && f["unread"] == float64(0) {
				return true
			}
		}
		return false
	}, "staff1's session on daemon 2 gets the inbox frame with unread 0 (frames %v)", browser.frames)
	req, _ = http.NewRequest("GET", e2.apiURL+"/v1/inbox?status=all", nil)
	req.Header.Set("Authorization", "Bearer "+tok("staff1"))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var page struct {
		Items []struct {
			HandledBy *struct {
				UserID string `json:"user_id"`
				Type   string `json:"type"`
			} `json:"handled_by"`
		} `json:"items"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	if len(page.Items) != 1 || page.Items[0].HandledBy == nil || page.Items[0].HandledBy.UserID != "staff2" {
		t.Fatalf("staff1's view: %+v", page)
	}
}
