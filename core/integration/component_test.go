package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/core/internal/webinbox"
	heraldinbox "github.com/heraldhq/herald/web/herald-inbox"
)

// hostApp is a team's web app embedding <herald-inbox>: its page and its
// backend's token endpoint, answered by the test for the browser's
// requests to /host/... (the DevTools Fetch domain), on the daemon's
// origin (same origin: cross-origin embedding needs the API's CORS).
type hostApp struct {
	t   *testing.T
	e   *env
	key store.TokenKey
	ttl time.Duration

	mu sync.Mutex
	// issued counts the tokens the backend signed per user; lastExp is
	// the exp of the last one; badNext makes the next token one the API
	// refuses (another deployment's audience).
	issued  map[string]int
	lastExp time.Time
	badNext bool
}

// hostPage is the team's page: the component loaded from the daemon with
// its integrity hash, a bell mirroring the inbox, and a token provider
// that fetches a fresh token from the team's backend.
func hostPage(user string) string {
	return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Acme</title>
<script type="module" src="` + webinbox.ComponentPath() + `" integrity="` + heraldinbox.Integrity() + `" crossorigin="anonymous"></script>
<style>
body { margin: 0; font: 15px system-ui, sans-serif; }
.top { display: flex; justify-content: space-between; align-items: center; padding: 8px 16px; }
herald-inbox::part(title) { letter-spacing: 1px; }
</style></head>
<body>
<div class="top"><b>Acme</b><herald-bell id="bell" for="inbox"></herald-bell></div>
<herald-inbox id="inbox" api="/"></herald-inbox>
<script>
window.__tokens = 0; window.__opened = []; window.__toasts = []; window.__authErrors = [];
const el = document.getElementById("inbox");
// Set before the module defines the element: the component takes it over.
el.tokenProvider = async () => {
  window.__tokens++;
  const r = await fetch("/host/token?user=` + user + `");
  return r.text();
};
el.addEventListener("herald-open", (e) => window.__opened.push(e.detail.url));
el.addEventListener("herald-toast", (e) => window.__toasts.push(e.detail.title));
el.addEventListener("herald-auth-error", (e) => window.__authErrors.push(e.detail.message));
</script>
</body></html>`
}

// open opens the host page for user in a new tab of browser.
func (h *hostApp) open(browser context.Context, user string, width, height int64) *inboxPage {
	h.t.Helper()
	p := h.e.blankTab(browser, user)
	if _, err := chromedp.Call(p.ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{
		{URLPattern: "*/host/*", RequestStage: fetch.RequestStageRequest},
	}}); err != nil {
		h.t.Fatalf("enable request interception: %v", err)
	}
	paused := chromedp.Events(p.ctx, fetch.RequestPaused)
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			status, ctype, body := h.answer(ev.Request.URL)
			_, _ = chromedp.Call(p.ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{
				RequestID: ev.RequestID, ResponseCode: int64(status), Body: []byte(body),
				ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: ctype}, {Name: "Cache-Control", Value: "no-store"}},
			})
		}
	}()
	if err := chromedp.Do(p.ctx, chromedp.EmulateViewport(width, height), chromedp.Navigate(h.e.apiURL+"/host/app.html?user="+user)); err != nil {
		h.t.Fatalf("%s: open the host page: %v", user, err)
	}
	return p
}

// answer is the team's web server: its page and its token endpoint.
func (h *hostApp) answer(raw string) (int, string, string) {
	u, err := url.Parse(raw)
	if err != nil {
		return 400, "text/plain", "bad URL"
	}
	user := u.Query().Get("user")
	switch u.Path {
	case "/host/app.html":
		return 200, "text/html; charset=utf-8", hostPage(user)
	case "/host/token":
		h.mu.Lock()
		defer h.mu.Unlock()
		aud := h.e.audience(h.t)
		if h.badNext {
			aud, h.badNext = "https://another.example", false
		}
		now := time.Now()
		tok, err := auth.Issue(h.key, aud, auth.User{UserID: user, UserType: "STAFF", Roles: []string{"MANAGER"}}, h.ttl, now)
		if err != nil {
			return 500, "text/plain", err.Error()
		}
		h.issued[user]++
		h.lastExp = now.Add(h.ttl)
		return 200, "text/plain", tok
	}
	return 404, "text/plain", "not found"
}

func (h *hostApp) tokens(user string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.issued[user]
}

// TestInboxComponent drives <herald-inbox> embedded in a team's page, in
// headless Chromium against a real herald serve (real websocket plugin):
//
//   - the page loads the component from its versioned path with its SRI
//     hash, and its token provider hands out 3-second tokens: across
//     rounds in which the last token has expired (past the API's leeway)
//     an event arrives live (with a toast), is marked read, and the
//     component asks the provider for a new token each time, never
//     surfacing a refusal; once the backend hands out a token the API
//     refuses, the component asks again and goes on;
//   - the bell on the page mirrors the inbox's unread count;
//   - a notification whose data.url is http(s) opens on click and is
//     marked read; a javascript: URL is not offered;
//   - two tabs share a reservation: the first to confirm wins and the
//     other shows it live;
//   - arrow keys move the focus through the list;
//   - a locale switch (Italian), a host override of one string, right to
//     left; the dark theme, a custom property and a ::part rule;
//   - at 390 and 360 px wide nothing overflows horizontally and no
//     severity tag wraps;
//   - scrolling to the end loads the next page on the cursor.
//
// No uncaught exception, no CSP refusal. With HERALD_DOCS_SCREENSHOTS=1
// it writes docs/img/inbox-{light,dark,custom}.png.
func TestInboxComponent(t *testing.T) {
	exe := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	e := newEnv(t, "sent")
	e.pluginDir = filepath.Join(e.dir, "plugins")
	if err := os.MkdirAll(e.pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.InstallPlugin(t, testenv.PluginVariant(t, "sink"), e.pluginDir, "sink")
	testenv.InstallPlugin(t, testenv.PluginVariant(t, "websocket"), e.pluginDir, "websocket")
	e.writeConfig()
	rules := liveRules(e.record, e.broker.URL)
	body := `    body  = "{{ .payload.customer_name }}, {{ .payload.pax }} people"` + "\n"
	if !strings.Contains(rules, body) {
		t.Fatal("sinkRules changed: update TestInboxComponent")
	}
	rules = strings.Replace(rules, body, body+`    data  = { url = "{{ .payload.url }}" }`+"\n", 1)
	e.writeRules(rules)
	key := e.addTokenKey()
	e.start()
	// The host page is made by the test (fulfilled through DevTools), so
	// it has no address of its own, and Chromium's local network access
	// checks would refuse it a WebSocket to loopback; a real team's page
	// comes from its server.
	browser := startChromium(ctx, t, exe, chromedp.Flag("disable-features", "LocalNetworkAccessChecks,LocalNetworkAccessChecksWebSockets"))
	host := &hostApp{t: t, e: e, key: key, ttl: 3 * time.Second, issued: map[string]int{}}
	emit := func(id, customer, link string) {
		t.Helper()
		ev := reservation(id)
		ev.Payload, _ = json.Marshal(map[string]any{"restaurant_id": 5, "customer_name": customer, "pax": 2, "url": link})
		if _, _, err := e.client().Emit(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}

	staff1 := host.open(browser, "staff1", 1000, 800)
	staff1.waitFor("the component is live", `() => customElements.get("herald-inbox") && $inbox && $inbox.getElementById("live").dataset.state === "live"`)
	staff1.waitFor("the empty list says so", `() => !$inbox.getElementById("empty").hidden && $inbox.getElementById("loading").hidden`)
	bell := `document.getElementById("bell").shadowRoot.getElementById("unread").textContent`

	// Three token lifetimes and more: each round waits until the last
	// token has expired for the API too, then an event arrives live and
	// is read, which needs a fresh token.
	leeway := 5 * time.Second // auth.Config's default
	for round := range 4 {
		host.mu.Lock()
		exp, before := host.lastExp, host.issued["staff1"]
		if round == 2 {
			host.badNext = true // the next token is refused: the component asks again
		}
		host.mu.Unlock()
		testenv.Eventually(t, 30*time.Second, func() bool { return time.Now().After(exp.Add(leeway + time.Second)) },
			"the token of round %d expires", round)
		id := fmt.Sprintf("comp-%d", round)
		emit(id, fmt.Sprintf("Guest%d", round), "")
		item := staff1.itemWith(fmt.Sprintf("Guest%d, 2 people", round))
		staff1.waitFor("the bell shows 1", `() => `+bell+` === "1"`)
		staff1.waitFor("a toast for the live arrival", `(n) => window.__toasts.length >= n &&
			!$inbox.getElementById("toast").hidden && $inbox.getElementById("toast-text").textContent === "New: New reservation"`, round+1)
		staff1.click(item, "read")
		staff1.waitFor("the bell goes back to 0", `() => `+bell+` === "0" && $inbox.getElementById("unread").textContent === "0"`)
		if n := e.count(`SELECT count(*) FROM notifications WHERE notification_id = $1 AND user_id = 'staff1' AND read_at IS NOT NULL`, item); n != 1 {
			t.Fatalf("round %d: the page shows %s read, the database does not", round, item)
		}
		if got := host.tokens("staff1"); got <= before {
			t.Fatalf("round %d: the component made its requests without a new token (%d tokens)", round, got)
		}
	}
	if got := staff1.eval(`[window.__tokens, window.__authErrors.length, $inbox.getElementById("error").hidden]`); got != fmt.Sprintf("[%d,0,true]", host.tokens("staff1")) {
		t.Fatalf("tokens asked, refusals surfaced, error hidden: %s (the backend signed %d)", got, host.tokens("staff1"))
	}
	if got := host.tokens("staff1"); got < 6 {
		t.Fatalf("the backend signed %d tokens over four expired lifetimes and one refusal, want at least 6", got)
	}

	// Click-through: an http(s) URL opens and marks read; javascript: is
	// not offered.
	target := e.apiURL + "/inbox?from=notification"
	emit("comp-link", "Linked", target)
	emit("comp-js", "Scripted", "javascript:alert(1)")
	linked := staff1.itemWith("Linked, 2 people")
	scripted := staff1.itemWith("Scripted, 2 people")
	if got := staff1.eval(fmt.Sprintf(`(() => { const li = $inbox.querySelector('li[data-id=%q]'); return [li.hasAttribute("data-url"), li.querySelector('[data-op="open"]').hidden]; })()`, scripted)); got != "[false,true]" {
		t.Fatalf("a javascript: URL is offered: %s", got)
	}
	if err := chromedp.Do(staff1.ctx, clickIn(fmt.Sprintf(`li[data-id=%q] .body`, linked))); err != nil {
		t.Fatal(err)
	}
	staff1.waitFor("the URL opened", `(u) => window.__opened.includes(u)`, target)
	testenv.Eventually(t, 30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM notifications WHERE notification_id = $1 AND read_at IS NOT NULL`, linked) == 1
	}, "the opened notification is read")
	staff1.waitFor("shown read", `(id) => $inbox.querySelector('li[data-id="' + id + '"]').classList.contains("read")`, linked)

	// Keyboard: the first item holds the tab stop; ArrowDown moves on.
	staff1.eval(`$inbox.querySelector("#list li[data-id]").focus()`)
	if err := chromedp.Do(staff1.ctx, chromedp.KeyEvent(kb.ArrowDown)); err != nil {
		t.Fatal(err)
	}
	staff1.waitFor("ArrowDown focuses the second item", `() => {
		const items = $inbox.querySelectorAll("#list li[data-id]");
		return $inbox.activeElement === items[1] && items[1].tabIndex === 0 && items[0].tabIndex === -1;
	}`)
	if got := staff1.eval(`[$inbox.getElementById("list").getAttribute("role"), $inbox.querySelector("#list li.day").getAttribute("role"), $inbox.querySelector("#list li.day").textContent]`); got != `["list","presentation","Today"]` {
		t.Errorf("list roles and day heading: %s", got)
	}

	// First to act, in two tabs.
	staff2 := host.open(browser, "staff2", 1000, 800)
	staff2.waitFor("staff2 is live", `() => $inbox && $inbox.getElementById("live").dataset.state === "live"`)
	emit("comp-share", "Shared", "")
	id1, id2 := staff1.itemWith("Shared, 2 people"), staff2.itemWith("Shared, 2 people")
	staff1.click(id1, "CONFIRMED")
	handled := `(id) => {
		const li = $inbox.querySelector('#list li[data-id="' + id + '"]');
		return li && li.querySelector(".handled").textContent === "Handled by staff1 (CONFIRMED)" && li.querySelector('[data-op="CONFIRMED"]').hidden;
	}`
	staff2.waitFor("staff2 sees staff1's confirmation", handled, id2)
	staff1.waitFor("staff1 sees its confirmation", handled, id1)

	// Locale: Italian strings and dates; a host override; right to left.
	staff1.eval(`document.getElementById("inbox").setAttribute("locale", "it")`)
	staff1.waitFor("Italian", `() => $inbox.getElementById("read-all").textContent === "Segna tutte come lette" &&
		$inbox.getElementById("heading").textContent === "Notifiche" && $inbox.querySelector("#list li.day").textContent === "Oggi" &&
		$inbox.getElementById("live").textContent === "in linea"`)
	staff1.eval(`document.getElementById("inbox").messages = {it: {readAll: "Letto tutto"}}`)
	staff1.waitFor("the host's string", `() => $inbox.getElementById("read-all").textContent === "Letto tutto"`)
	staff1.eval(`document.getElementById("inbox").setAttribute("dir", "rtl")`)
	staff1.waitFor("right to left", `() => getComputedStyle($inbox.querySelector(".wrap")).direction === "rtl"`)
	staff1.eval(`(() => { const el = document.getElementById("inbox"); el.removeAttribute("dir"); el.setAttribute("locale", "en"); el.messages = {}; })()`)
	staff1.waitFor("English again", `() => $inbox.getElementById("read-all").textContent === "Mark all read" &&
		getComputedStyle($inbox.querySelector(".wrap")).direction === "ltr"`)

	// Theme: dark, a custom property, a ::part rule of the host page.
	staff1.eval(`document.getElementById("inbox").setAttribute("theme", "dark")`)
	staff1.waitFor("dark", `() => getComputedStyle(document.getElementById("inbox")).backgroundColor === "rgb(20, 23, 28)"`)
	staff1.eval(`document.getElementById("inbox").style.setProperty("--herald-accent", "rgb(200, 0, 100)")`)
	staff1.waitFor("the host's accent", `() => getComputedStyle($inbox.querySelector("#list .item.unread")).borderInlineStartColor === "rgb(200, 0, 100)"`)
	if got := staff1.eval(`getComputedStyle($inbox.querySelector("#list .title")).letterSpacing`); got != `"1px"` {
		t.Errorf("the ::part(title) rule: letter-spacing %s", got)
	}
	staff1.eval(`(() => { const el = document.getElementById("inbox"); el.removeAttribute("theme"); el.style.removeProperty("--herald-accent"); })()`)

	// A phone: nothing overflows, severity tags stay on one line.
	for _, width := range []int64{390, 360} {
		if err := chromedp.Do(staff1.ctx, chromedp.EmulateViewport(width, 800)); err != nil {
			t.Fatal(err)
		}
		t.Logf("at %d px: %s", width, staff1.eval(`(() => {
			const wrap = $inbox.querySelector(".wrap");
			return {client: document.documentElement.clientWidth, scroll: document.documentElement.scrollWidth, wrap: [wrap.scrollWidth, wrap.clientWidth],
				sevs: [...$inbox.querySelectorAll("#list .sev")].map((s) => [s.getClientRects().length, Math.round(s.getBoundingClientRect().height)]).slice(0, 3),
				items: [...$inbox.querySelectorAll("#list li[data-id]")].filter((li) => li.scrollWidth > li.clientWidth).map((li) => [li.scrollWidth, li.clientWidth]),
				wide: [...document.querySelectorAll("*"), ...$inbox.querySelectorAll("*"), ...document.getElementById("bell").shadowRoot.querySelectorAll("*")]
					.filter((el) => el.getBoundingClientRect().right > document.documentElement.clientWidth).map((el) => el.tagName + "." + el.className + "#" + el.id + ":" + Math.round(el.getBoundingClientRect().right)).slice(0, 8)};
		})()`))
		staff1.waitFor(fmt.Sprintf("no horizontal overflow at %d px", width), `(w) => {
			const wrap = $inbox.querySelector(".wrap");
			const sevs = [...$inbox.querySelectorAll("#list .sev")];
			return document.documentElement.clientWidth === w && document.documentElement.scrollWidth <= w &&
				wrap.scrollWidth <= wrap.clientWidth && sevs.length > 0 &&
				sevs.every((s) => s.getClientRects().length === 1 && s.getBoundingClientRect().height < 24) &&
				[...$inbox.querySelectorAll("#list li[data-id]")].every((li) => li.scrollWidth <= li.clientWidth);
		}`, width)
	}
	if os.Getenv("HERALD_DOCS_SCREENSHOTS") != "" {
		e.screenshots(staff1)
	}
	if err := chromedp.Do(staff1.ctx, chromedp.EmulateViewport(1000, 800)); err != nil {
		t.Fatal(err)
	}

	// Infinite scroll: more than a page; reaching the end loads the rest.
	for i := range 22 {
		emit(fmt.Sprintf("comp-page-%d", i), fmt.Sprintf("Paged%d", i), "")
	}
	testenv.Eventually(t, 60*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM notifications WHERE user_id = 'staff1' AND event_id LIKE 'comp-page-%'`) == 22
	}, "staff1's 22 notifications made (now: %s)", e.statusSummary())
	staff1.waitFor("a full first page", `() => $inbox.querySelectorAll("#list li[data-id]").length >= 20`)
	total := e.count(`SELECT count(*) FROM notifications WHERE user_id = 'staff1' AND archived_at IS NULL`)
	staff1.waitFor("scrolled to the end, every notification listed", `(n) => {
		$inbox.getElementById("sentinel").scrollIntoView();
		return $inbox.querySelectorAll("#list li[data-id]").length === n && $inbox.getElementById("more").hidden;
	}`, total)

	for _, p := range []*inboxPage{staff1, staff2} {
		p.checkFaults()
	}
}

// screenshots writes three looks of the component at a phone's width
// into docs/img: light, dark, and a team's own (custom properties).
func (e *env) screenshots(p *inboxPage) {
	e.t.Helper()
	looks := []struct{ name, setup string }{
		{"light", `(() => { const el = document.getElementById("inbox"); el.removeAttribute("theme"); })()`},
		{"dark", `(() => { const el = document.getElementById("inbox"); el.setAttribute("theme", "dark"); document.body.style.background = "#14171c"; })()`},
		{"custom", `(() => { const el = document.getElementById("inbox"); el.removeAttribute("theme"); document.body.style.background = "#fffaf3";
			for (const [k, v] of Object.entries({"--herald-accent": "#b4461f", "--herald-bg": "#fffaf3", "--herald-card": "#fff",
				"--herald-unread": "#fdeee4", "--herald-radius": "2px", "--herald-font": "Georgia, 'DejaVu Serif', serif", "--herald-density": "0.8"})) el.style.setProperty(k, v); })()`},
	}
	dir := filepath.Join("..", "..", "docs", "img")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if _, err := chromedp.Call(p.ctx, page.BringToFront, cdp.Empty{}); err != nil {
		e.t.Fatal(err)
	}
	p.eval(`window.scrollTo(0, 0)`)
	for _, l := range looks {
		p.eval(l.setup)
		png, err := chromedp.Run(p.ctx, chromedp.CaptureScreenshot())
		if err != nil {
			e.t.Fatalf("screenshot: %v", err)
		}
		path := filepath.Join(dir, "inbox-"+l.name+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			e.t.Fatal(err)
		}
		e.t.Logf("screenshot %s: %d bytes", path, len(png))
	}
	p.eval(`(() => { const el = document.getElementById("inbox"); el.removeAttribute("style"); el.removeAttribute("theme"); document.body.style.background = ""; })()`)
}
