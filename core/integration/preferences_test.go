package integration

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/internal/pushpeer"
)

// addTokenKey registers an HS256 token key for the env's tenant.
func (e *env) addTokenKey() store.TokenKey {
	e.t.Helper()
	secret, _ := auth.NewSecret()
	key := store.TokenKey{TenantID: e.tenant, Kid: "k1", Alg: "HS256", Issuer: "https://acme.example", Key: secret}
	if err := store.AddTokenKey(context.Background(), e.db.Pool, key); err != nil {
		e.t.Fatal(err)
	}
	return key
}

// userCall sends a request with a user token to the daemon, as the curl
// of the walk-through does, and returns the status and body.
func (e *env) userCall(token, method, path, body string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.apiURL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// channelsOf lists the channels of a user's deliveries of one event.
func (e *env) channelsOf(event, user string) string {
	e.t.Helper()
	var s string
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(channel, ',' ORDER BY channel), '')
		FROM deliveries WHERE event_id = $1 AND user_id = $2`, event, user).Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// TestPreferenceSwitchOffRespected is the walk-through of the README
// ("A user switches a channel off") against a real herald serve with real
// plugins: staff1 gets the reservation by EMAIL; with their user token
// they switch EMAIL off through PUT /v1/me/preferences (switching off the
// mandatory WEBSOCKET is refused, 422 naming the field); the next event
// reaches them on every other channel but EMAIL, while staff2 still gets
// EMAIL; switched back on, the one after reaches them by EMAIL again.
func TestPreferenceSwitchOffRespected(t *testing.T) {
	e := newEnv(t, "sent")
	key := e.addTokenKey()
	e.start()
	ctx := context.Background()
	emit := func(id string) {
		t.Helper()
		if _, _, err := e.client().Emit(ctx, reservation(id)); err != nil {
			t.Fatal(err)
		}
	}
	settled := func(id string, n int) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, func() bool {
			return e.count(`SELECT count(*) FROM deliveries WHERE event_id = $1 AND status = 'SENT'`, id) == n
		}, "%d deliveries of %s SENT (now: %s)", n, id, e.statusSummary())
	}
	emit("prefs-1")
	settled("prefs-1", deliveriesPerEvent)
	if got := e.channelsOf("prefs-1", "staff1"); got != "EMAIL,PUSH,WEBSOCKET" {
		t.Fatalf("before: staff1's channels %s", got)
	}

	tok := e.userToken(t, key, "staff1")
	code, body := e.userCall(tok, "GET", "/v1/me/preferences", "")
	if code != http.StatusOK || !strings.Contains(body, `"why":"mandatory for every event type that sends it (RESERVATION_REQUESTED)"`) {
		t.Fatalf("GET /v1/me/preferences: %d %s", code, body)
	}
	code, body = e.userCall(tok, "PUT", "/v1/me/preferences", `{"channels": [{"channel": "WEBSOCKET", "enabled": false}]}`)
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, `"field":"channels[0].channel"`) {
		t.Fatalf("switching the mandatory WEBSOCKET off: %d %s", code, body)
	}
	code, body = e.userCall(tok, "PUT", "/v1/me/preferences", `{"channels": [{"channel": "EMAIL", "enabled": false}]}`)
	if code != http.StatusOK {
		t.Fatalf("switching EMAIL off: %d %s", code, body)
	}

	emit("prefs-2")
	settled("prefs-2", deliveriesPerEvent-1)
	if got := e.channelsOf("prefs-2", "staff1"); got != "PUSH,WEBSOCKET" {
		t.Errorf("after switching EMAIL off: staff1's channels %s, want PUSH,WEBSOCKET", got)
	}
	if got := e.channelsOf("prefs-2", "staff2"); got != "EMAIL,PUSH,WEBSOCKET" {
		t.Errorf("staff2's channels %s: another user's switch changed theirs", got)
	}

	code, body = e.userCall(tok, "PUT", "/v1/me/preferences", `{"channels": [{"channel": "EMAIL", "enabled": true}]}`)
	if code != http.StatusOK {
		t.Fatalf("switching EMAIL on: %d %s", code, body)
	}
	emit("prefs-3")
	settled("prefs-3", deliveriesPerEvent)
	if got := e.channelsOf("prefs-3", "staff1"); got != "EMAIL,PUSH,WEBSOCKET" {
		t.Errorf("after switching EMAIL on again: staff1's channels %s", got)
	}
}

// webPushRules replaces the PUSH channel of sinkRules with the real push
// plugin sending Web Push to our peer (an HTTPS server on loopback), and
// returns the peer, its base URL and the VAPID pair.
func (e *env) webPushRules() (*pushpeer.WebPush, string, pushpeer.VAPIDKeys) {
	t := e.t
	t.Helper()
	vapid, err := pushpeer.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	wp := pushpeer.NewWebPush(vapid.Public)
	mux := http.NewServeMux()
	mux.Handle(pushpeer.WebPushPath, wp)
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(e.dir, "push-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	push := fmt.Sprintf(`providers = [{ plugin = "push", config = {
    providers = ["webpush"]
    ca_file = %q
    vapid_subject = "mailto:ops@example.com"
    webpush_private_endpoints = true
    vapid_public_key = %q
    vapid_private_key = %q
  } }]`, ca, vapid.Public, vapid.Private)
	body := fmt.Sprintf(sinkRules, e.record, "sent")
	sinkPush := fmt.Sprintf(`providers = [{ plugin = "sink", config = { record_file = "%s", outcome = "sent" } }]
}
channel "WEBSOCKET"`, e.record)
	if !strings.Contains(body, sinkPush) {
		t.Fatal("sinkRules changed: cannot find the PUSH provider to replace")
	}
	e.writeRules(strings.Replace(body, sinkPush, push+"\n}\nchannel \"WEBSOCKET\"", 1))
	return wp, srv.URL, vapid
}

// pushStub replaces the browser's push service for the page: headless
// Chromium here reaches no push service, so PushManager.subscribe records
// the applicationServerKey the page passed and answers with a
// subscription our Web Push peer made (its endpoint and keys), which the
// page then posts to /v1/me/devices as it would a real one.
const pushStub = `(sub) => {
	window.__pushStub = {calls: 0};
	PushManager.prototype.getSubscription = async function () { return null; };
	PushManager.prototype.subscribe = async function (opts) {
		const k = new Uint8Array(opts.applicationServerKey);
		window.__pushStub.calls++;
		window.__pushStub.userVisibleOnly = opts.userVisibleOnly;
		window.__pushStub.key = btoa(String.fromCharCode(...k)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
		return { endpoint: sub.endpoint, options: opts, toJSON: () => sub, unsubscribe: async () => true };
	};
	return true;
}`

// TestWebInboxPreferencesAndPush drives the web inbox's preferences panel
// in headless Chromium against a real herald serve whose PUSH channel is
// the real push plugin sending Web Push to our peer:
//
//   - the panel shows WEBSOCKET locked with the rules' reason and EMAIL
//     and PUSH as switches; staff1 unticks EMAIL and saves, and the
//     database holds the switch;
//   - "Notify me in this browser" registers the service worker
//     (inbox/sw.js, active), asks for the notification permission (granted
//     through the DevTools protocol), subscribes with the VAPID public key
//     of /v1/me/push-config, and posts the subscription to
//     /v1/me/devices. No push service is reachable here, so the browser's
//     PushManager.subscribe answers with a subscription our Web Push peer
//     made (pushStub): the page's own code does everything else;
//   - the next reservation reaches staff1's browser subscription through
//     the push plugin (the peer decrypts it) and not by EMAIL, while
//     staff2 still gets EMAIL.
//
// The page may throw no uncaught exception and trip no CSP refusal.
func TestWebInboxPreferencesAndPush(t *testing.T) {
	exe := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newEnv(t, "sent")
	e.pluginDir = testenv.PluginBinaries(t, "sink", "push")
	e.writeConfig()
	wp, peerURL, vapid := e.webPushRules()
	key := e.addTokenKey()
	e.start()
	browserCtx := startChromium(ctx, t, exe)

	staff1 := e.openInbox(browserCtx, key, "staff1")
	staff1.click0("prefs-open")
	staff1.waitFor("the panel lists the channels", `() => $inbox.querySelectorAll("#prefs-channels li").length === 3`)
	got := staff1.waitFor("WEBSOCKET is locked with why", `() => {
		const li = $inbox.querySelector('#prefs-channels li[data-channel="WEBSOCKET"]');
		return li && li.querySelector("input").disabled && !li.querySelector(".why").hidden && li.querySelector(".why").textContent;
	}`)
	if !strings.Contains(got, "mandatory for every event type that sends it") {
		t.Errorf("WEBSOCKET's reason: %s", got)
	}
	staff1.waitFor("EMAIL is a switch, on", `() => {
		const b = $inbox.querySelector('#prefs-channels li[data-channel="EMAIL"] input');
		return b && !b.disabled && b.checked;
	}`)
	staff1.clickCSS(`#prefs-channels li[data-channel="EMAIL"] input`)
	staff1.clickCSS(`#prefs-save`)
	staff1.waitFor("saved", `() => $inbox.getElementById("prefs-status").textContent === "Saved."`)
	staff1.waitFor("EMAIL shown off, by the user's choice", `() => {
		const li = $inbox.querySelector('#prefs-channels li[data-channel="EMAIL"]');
		return li && !li.querySelector("input").checked && li.querySelector(".source").textContent === "(your choice)";
	}`)
	if n := e.count(`SELECT count(*) FROM user_preferences WHERE tenant_id = $1 AND user_id = 'staff1' AND event_type = '' AND channel = 'EMAIL' AND NOT enabled`, e.tenant); n != 1 {
		t.Fatalf("the page shows EMAIL off, the database holds %d such switch", n)
	}

	// Web Push for this browser.
	sub := pushpeer.DevSubscription(peerURL, "staff1-chromium")
	if _, err := chromedp.CallBrowser(staff1.ctx, browser.SetPermission, browser.SetPermissionParams{
		Permission: &browser.PermissionDescriptor{Name: "notifications"}, Setting: browser.PermissionSettingGranted, Origin: e.apiURL,
	}); err != nil {
		t.Fatalf("grant notifications: %v", err)
	}
	subJSON, _ := json.Marshal(map[string]any{"endpoint": sub.Endpoint, "keys": map[string]string{"p256dh": sub.P256dh, "auth": sub.Auth}})
	var subArg any
	_ = json.Unmarshal(subJSON, &subArg)
	staff1.waitFor("the push service stub is in place", pushStub, subArg)
	staff1.clickCSS(`#push-on`)
	staff1.waitFor("the browser is registered", `() => $inbox.getElementById("push-status").textContent === "This browser is registered for push notifications."`)
	if got := staff1.eval(`window.__pushStub.key`); got != fmt.Sprintf("%q", vapid.Public) {
		t.Errorf("the page subscribed with key %s, want the tenant's VAPID public key %s", got, vapid.Public)
	}
	if got := staff1.eval(`window.__pushStub.userVisibleOnly`); got != "true" {
		t.Errorf("userVisibleOnly %s", got)
	}
	staff1.waitFor("the service worker is active", `() => {
		if (!window.__reg) {
			navigator.serviceWorker.getRegistration("inbox/").then((r) => { window.__reg = r || null; });
			return false;
		}
		return !!(window.__reg.active && window.__reg.active.scriptURL.endsWith("/inbox/sw.js"));
	}`)
	if n := e.count(`SELECT count(*) FROM recipient_devices WHERE tenant_id = $1 AND user_id = 'staff1' AND platform = 'webpush' AND token = $2 AND p256dh = $3 AND auth = $4`,
		e.tenant, sub.Endpoint, sub.P256dh, sub.Auth); n != 1 {
		t.Fatalf("staff1's subscription is not in the directory (%d rows)", n)
	}

	if _, _, err := e.client().Emit(ctx, reservation("prefs-web")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		for _, m := range wp.Messages() {
			if m.Subscription == "staff1-chromium" {
				return true
			}
		}
		return false
	}, "the reservation reaches staff1's browser subscription (now: %s)", e.statusSummary())
	msgs := wp.Messages()
	var payload struct {
		Title string `json:"title"`
	}
	if err := json.Unmarshal(msgs[0].Plaintext, &payload); err != nil || payload.Title != "New reservation" {
		t.Errorf("decrypted payload %s (%v)", msgs[0].Plaintext, err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE event_id = 'prefs-web' AND user_id = 'staff2' AND channel = 'EMAIL' AND status = 'SENT'`) == 1
	}, "staff2's EMAIL SENT (now: %s)", e.statusSummary())
	if got := e.channelsOf("prefs-web", "staff1"); strings.Contains(got, "EMAIL") || !strings.Contains(got, "PUSH") {
		t.Errorf("staff1's channels %s: want PUSH and no EMAIL", got)
	}

	// Stop: the device goes from the directory.
	staff1.clickCSS(`#push-off`)
	staff1.waitFor("the browser is unregistered", `() => $inbox.getElementById("push-status").textContent === "This browser no longer gets push notifications."`)
	if n := e.count(`SELECT count(*) FROM recipient_devices WHERE tenant_id = $1 AND user_id = 'staff1' AND token = $2`, e.tenant, sub.Endpoint); n != 0 {
		t.Errorf("the subscription stays in the directory after Stop")
	}
	staff1.checkFaults()
}

// click0 clicks the element with the id.
func (p *inboxPage) click0(id string) {
	p.t.Helper()
	p.clickCSS("#" + id)
}

// clickCSS clicks the element of the inbox component the selector names.
func (p *inboxPage) clickCSS(sel string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, clickIn(sel)); err != nil {
		p.t.Fatalf("%s's page: click %s: %v", p.user, sel, err)
	}
}
