package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// chromiumPath is the browser the web inbox test drives: Debian's chromium
// (scripts/test.sh installs it), or HERALD_CHROMIUM. Without one the test
// fails, unless -short is set.
func chromiumPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath(testenv.Env("HERALD_CHROMIUM", "/usr/bin/chromium"))
	if err != nil {
		if testing.Short() {
			t.Skipf("chromium unavailable in -short mode: %v", err)
		}
		t.Fatalf("chromium unavailable (scripts/test.sh installs Debian's chromium package; HERALD_CHROMIUM names another): %v", err)
	}
	return p
}

// startChromium runs a headless Chromium with a fresh profile until ctx
// ends and returns its context; each user's page is a tab of it. extra
// are more options.
func startChromium(ctx context.Context, t *testing.T, exe string, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1000, 700),
	}, extra...)...)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return bctx
}

// inboxRoot is the shadow root of the page's <herald-inbox>: the page
// scripts waitFor and eval run may name it $inbox.
const inboxRoot = `document.querySelector("herald-inbox").shadowRoot`

// inShadow replaces $inbox in a script with inboxRoot.
func inShadow(js string) string { return strings.ReplaceAll(js, "$inbox", inboxRoot) }

// inboxPage is one user's /inbox in a tab of the browser.
type inboxPage struct {
	t    *testing.T
	user string
	ctx  context.Context

	mu sync.Mutex
	// faults are uncaught exceptions and Content-Security-Policy refusals.
	faults []string
}

// audience is the aud claim the daemon's user tokens carry: its
// deployment's own (the harness leaves auth.audience empty).
func (e *env) audience(t *testing.T) string {
	t.Helper()
	aud, err := store.DeploymentAudience(context.Background(), e.db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	return aud
}

// userToken signs a 5-minute token for user, for the daemon's audience.
func (e *env) userToken(t *testing.T, key store.TokenKey, user string) string {
	t.Helper()
	tok, err := auth.Issue(key, e.audience(t), auth.User{UserID: user, UserType: "STAFF", Roles: []string{"MANAGER"}}, 5*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// newTab opens a tab of the browser at path on the daemon, 1000×700,
// recording its uncaught exceptions and CSP refusals.
func (e *env) newTab(browser context.Context, user, path string) *inboxPage {
	e.t.Helper()
	p := e.blankTab(browser, user)
	if err := chromedp.Do(p.ctx, chromedp.EmulateViewport(1000, 700), chromedp.Navigate(e.apiURL+path)); err != nil {
		e.t.Fatalf("%s: open %s: %v", user, path, err)
	}
	return p
}

// blankTab opens an empty tab of the browser, recording its uncaught
// exceptions and CSP refusals.
func (e *env) blankTab(browser context.Context, user string) *inboxPage {
	e.t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	e.t.Cleanup(cancel)
	p := &inboxPage{t: e.t, user: user, ctx: ctx}
	if err := chromedp.Do(ctx); err != nil { // opens the tab
		e.t.Fatalf("%s: open a tab: %v", user, err)
	}
	console := chromedp.Console(ctx)
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			e.t.Logf("browser %s: %s (%s:%d)", user, m, m.URL, m.Line+1)
			if m.IsException() || m.Source == "security" || strings.Contains(m.Text, "Content Security Policy") {
				p.mu.Lock()
				p.faults = append(p.faults, m.String())
				p.mu.Unlock()
			}
		}
	}()
	return p
}

// openInbox opens /inbox#token=... for user in a new tab and waits until
// the page holds a live session (the "ready" frame came: from then on the
// user's updates reach it).
func (e *env) openInbox(browser context.Context, key store.TokenKey, user string) *inboxPage {
	e.t.Helper()
	p := e.newTab(browser, user, "/inbox#token="+e.userToken(e.t, key, user))
	p.waitLive()
	if got := p.eval(`location.hash`); got != `""` {
		e.t.Fatalf("%s: the token stays in the address bar: %s", user, got)
	}
	return p
}

// waitLive waits until the page shows the inbox and holds a live session.
func (p *inboxPage) waitLive() {
	p.t.Helper()
	p.waitFor("the inbox is shown", `() => !document.getElementById("inbox").hidden`)
	p.waitFor("the live session is ready", `() => $inbox.getElementById("live").dataset.state === "live"`)
}

// signIn types token into the sign-in form and submits it.
func (p *inboxPage) signIn(token string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.ID("signin")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.CSS(`#signin button[type="submit"]`)),
	); err != nil {
		p.t.Fatalf("%s's page: sign in: %v", p.user, err)
	}
}

// waitFor polls the page until the JavaScript function fn(...args) returns
// a truthy value (30 s at most) and returns that value as JSON.
func (p *inboxPage) waitFor(what, fn string, args ...any) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.PollFunction[[]byte](inShadow(fn), chromedp.WithPollingArgs(args...),
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(0)))
	if err != nil {
		p.mu.Lock()
		faults := strings.Join(p.faults, "\n")
		p.mu.Unlock()
		p.t.Fatalf("%s's page: %s: %v\nfilters: %s\npage text:\n%s\npage faults:\n%s", p.user, what, err,
			p.eval(`["status", "severity", "q"].map((id) => id + "=" + $inbox.getElementById(id).value).join(" ")`),
			p.eval(`document.body.innerText + "\n--- the inbox component ---\n" + ($inbox ? $inbox.textContent : "")`), faults)
	}
	return string(v)
}

// eval evaluates a JavaScript expression and returns its value as JSON (or
// the error text).
func (p *inboxPage) eval(expr string) string {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](inShadow(expr)))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return string(v)
}

// itemWith waits until the list shows a notification whose body contains
// text and returns its id.
func (p *inboxPage) itemWith(text string) string {
	p.t.Helper()
	var id string
	v := p.waitFor("a notification with "+text, `(text) => {
		for (const li of $inbox.querySelectorAll("#list li[data-id]")) {
			if (li.querySelector(".body").textContent.includes(text)) return li.dataset.id;
		}
		return "";
	}`, text)
	if err := json.Unmarshal([]byte(v), &id); err != nil {
		p.t.Fatal(err)
	}
	return id
}

// waitCount waits until the bell shows n.
func (p *inboxPage) waitCount(n int) {
	p.t.Helper()
	p.waitFor(fmt.Sprintf("the bell shows %d", n), `(n) => $inbox.getElementById("unread").textContent === n`, fmt.Sprint(n))
}

// click clicks a button of the notification id.
func (p *inboxPage) click(id, op string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, clickIn(fmt.Sprintf(`#list li[data-id=%q] button[data-op=%q]`, id, op))); err != nil {
		p.t.Fatalf("%s's page: click %s on %s: %v", p.user, op, id, err)
	}
}

// clickIn clicks (with the mouse, as a user) the element of the inbox
// component the CSS selector names.
func clickIn(sel string) chromedp.Action[chromedp.Void] {
	q, _ := json.Marshal(sel)
	return chromedp.Click(chromedp.JSPath(inboxRoot + ".querySelector(" + string(q) + ")"))
}

// filter sets the value of a filter (a select or the search box) as a
// user's change would.
func (p *inboxPage) filter(id, value string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.PollFunction[bool](inShadow(`(id, value) => {
		const el = $inbox.getElementById(id);
		el.value = value || ""; // an empty string arrives as undefined
		el.dispatchEvent(new Event(el.tagName === "SELECT" ? "change" : "input"));
		return true;
	}`), chromedp.WithPollingArgs(id, value)))
	if err != nil {
		p.t.Fatalf("%s's page: set %s to %q: %v", p.user, id, value, err)
	}
}

// checkFaults fails the test on an uncaught exception or a refusal by the
// page's own Content-Security-Policy.
func (p *inboxPage) checkFaults() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.faults) > 0 {
		p.t.Fatalf("%s's page: %s", p.user, strings.Join(p.faults, "\n"))
	}
}

// TestWebInbox drives /inbox in headless Chromium against a real herald
// serve whose WEBSOCKET channel is the real websocket plugin.
//
// A: staff1 signs in with a token in the URL fragment; an event posted
// with the API key while the page is open appears in the list and the bell
// goes to 1 without a reload (the live session's frame); its text is shown
// as text, not markup; "Mark read" takes the bell back to 0, in the
// database too; the status filter and the search box narrow the list.
//
// B: staff1 and staff2 (two tabs) share a reservation; staff1 confirms it
// and staff2's page shows "Handled by staff1 (CONFIRMED)", no Confirm
// button and a bell at 0, again without a reload.
//
// Then staff3 uses the sign-in form: a refused token is sent back with the
// server's reason, a good one signs in.
//
// C: herald serve restarts under the three pages; each notices the closed
// session, reconnects with a fresh ticket, and the next event arrives live.
//
// No page may throw an uncaught exception or trip its own
// Content-Security-Policy. The whole test is bounded by 2 minutes. With
// HERALD_SCREENSHOT=file.png it saves a screenshot of staff1's page.
func TestWebInbox(t *testing.T) {
	exe := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	e := newEnv(t, "sent")
	e.withLivePlugins()
	e.writeConfig()
	e.writeRules(liveRules(e.record, e.broker.URL))
	secret, _ := auth.NewSecret()
	key := store.TokenKey{TenantID: e.tenant, Kid: "k1", Alg: "HS256", Issuer: "https://acme.example", Key: secret}
	if err := store.AddTokenKey(ctx, e.db.Pool, key); err != nil {
		t.Fatal(err)
	}
	d := e.start()
	browser := startChromium(ctx, t, exe)
	emit := func(id, customer string) {
		t.Helper()
		ev := reservation(id)
		ev.Payload, _ = json.Marshal(map[string]any{"restaurant_id": 5, "customer_name": customer, "pax": 2})
		if _, _, err := e.client().Emit(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}

	// A: a live notification, then read.
	staff1 := e.openInbox(browser, key, "staff1")
	staff1.waitCount(0)
	staff1.waitFor("the empty list says so", `() => !$inbox.getElementById("empty").hidden`)
	emit("web-a", "<b>Rossi</b>")
	id := staff1.itemWith("<b>Rossi</b>, 2 people")
	staff1.waitCount(1)
	if n := e.count(`SELECT count(*) FROM notifications WHERE notification_id = $1 AND user_id = 'staff1' AND event_id = 'web-a'`, id); n != 1 {
		t.Fatalf("the page lists %s, which is not staff1's notification of web-a", id)
	}
	if got := staff1.eval(`$inbox.querySelectorAll("#list b").length`); got != "0" {
		t.Fatalf("the notification's text became markup: %s <b> elements", got)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE event_id = 'web-a' AND user_id = 'staff1' AND channel = 'WEBSOCKET' AND status = 'SENT'`) == 1
	}, "staff1's WEBSOCKET delivery of web-a SENT through the websocket plugin (%s)", e.statusSummary())
	staff1.click(id, "read")
	staff1.waitCount(0)
	staff1.waitFor("the item is read", `(id) => {
		const li = $inbox.querySelector('#list li[data-id="' + id + '"]');
		return li && li.classList.contains("read") && !li.querySelector('[data-op="unread"]').hidden;
	}`, id)
	if n := e.count(`SELECT count(*) FROM notifications WHERE notification_id = $1 AND read_at IS NOT NULL`, id); n != 1 {
		t.Fatal("the page shows the notification read, the database does not")
	}
	// The filters and the search box query the API.
	listed := `(id) => $inbox.getElementById("empty").hidden && !!$inbox.querySelector('#list li[data-id="' + id + '"]')`
	staff1.filter("status", "unread")
	staff1.waitFor("no unread notification listed", `() => !$inbox.getElementById("empty").hidden`)
	staff1.filter("status", "read")
	staff1.waitFor("the read notification listed", listed, id)
	staff1.filter("q", "nobody")
	staff1.waitFor("a search that matches nothing lists nothing", `() => !$inbox.getElementById("empty").hidden`)
	staff1.filter("q", "")
	staff1.filter("status", "active")
	staff1.waitFor("the notification listed again", listed, id)

	// B: two sharers; the first to act wins, the other sees it live.
	staff2 := e.openInbox(browser, key, "staff2")
	emit("web-b", "Bianchi")
	id1, id2 := staff1.itemWith("Bianchi"), staff2.itemWith("Bianchi")
	staff2.waitCount(1)
	for _, p := range []struct {
		page *inboxPage
		id   string
	}{{staff1, id1}, {staff2, id2}} {
		p.page.waitFor("Confirm is offered", `(id) => {
			const b = $inbox.querySelector('#list li[data-id="' + id + '"] [data-op="CONFIRMED"]');
			return b && !b.hidden;
		}`, p.id)
	}
	staff1.click(id1, "CONFIRMED")
	handled := `(id) => {
		const li = $inbox.querySelector('#list li[data-id="' + id + '"]');
		return li && li.querySelector(".handled").textContent === "Handled by staff1 (CONFIRMED)" &&
			!li.querySelector(".handled").hidden && li.querySelector('[data-op="CONFIRMED"]').hidden;
	}`
	staff2.waitFor("staff2 sees staff1's confirmation", handled, id2)
	staff2.waitCount(0)
	staff1.waitFor("staff1 sees its confirmation", handled, id1)
	if n := e.count(`SELECT count(*) FROM notification_actions WHERE user_id = 'staff1' AND action = 'CONFIRMED'`); n != 1 {
		t.Fatalf("%d CONFIRMED actions by staff1 recorded, want 1", n)
	}

	// The form: a refused token is sent back with the server's reason, a
	// good one signs in.
	staff3 := e.newTab(browser, "staff3", "/inbox")
	staff3.signIn("not-a-token")
	staff3.waitFor("the refused token's reason is shown", `() =>
		!document.getElementById("signin").hidden && document.getElementById("error").textContent.includes("refused")`)
	// A token for another deployment (another aud) is neither stored nor
	// sent: the page refuses it itself.
	foreign, err := auth.Issue(key, "https://other.example", auth.User{UserID: "staff3", UserType: "STAFF"}, 5*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	staff3.signIn(foreign)
	staff3.waitFor("the foreign token is refused by the page", `() =>
		!document.getElementById("signin").hidden && document.getElementById("error").textContent.includes("another deployment") &&
		sessionStorage.getItem("herald.token") === null`)
	staff3.signIn(e.userToken(t, key, "staff3"))
	staff3.waitLive()
	staff3.itemWith("Bianchi")

	// C: the daemon restarts under the open pages; they reconnect with a
	// fresh ticket and the next event arrives live again.
	d.stop(syscall.SIGTERM)
	for _, p := range []*inboxPage{staff1, staff2, staff3} {
		// offline at the close, then connecting while it retries: the
		// window of offline alone can be shorter than a poll on a busy
		// machine.
		p.waitFor("the page notices the closed session", `() => ["offline", "connecting"].includes($inbox.getElementById("live").dataset.state)`)
	}
	e.start()
	for _, p := range []*inboxPage{staff1, staff2, staff3} {
		p.waitFor("the page reconnects", `() => $inbox.getElementById("live").dataset.state === "live"`)
	}
	emit("web-c", "Verdi")
	staff1.itemWith("Verdi")
	staff2.itemWith("Verdi")
	staff1.waitCount(1)

	if path := os.Getenv("HERALD_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(staff1.ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot of staff1's inbox: %s", path)
	}
	for _, p := range []*inboxPage{staff1, staff2, staff3} {
		p.checkFaults()
	}
}
