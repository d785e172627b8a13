package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/core/internal/webinbox"
	heraldinbox "github.com/heraldhq/herald/web/herald-inbox"
)

// hostApp is a team's web app embedding <herald-inbox>: its web server,
// on an origin of its own (127.0.0.1 and a port of its own), serving its
// pages, a picture for the notifications' icons and its backend's token
// endpoint. The pages call Herald on another origin (localhost and the
// daemon's port), so every API request is cross-origin and needs the
// tenant's CORS grant.
type hostApp struct {
	t   *testing.T
	e   *env
	key store.TokenKey
	ttl time.Duration
	// api is Herald's base URL as the pages name it: another origin
	// (localhost) than the host's (127.0.0.1).
	api string

	mu sync.Mutex
	// issued counts the tokens the backend signed per user; lastExp is
	// the exp of the last one; badNext makes the next token one the API
	// refuses (another deployment's audience).
	issued  map[string]int
	lastExp time.Time
	badNext bool
}

func newHostApp(t *testing.T, e *env, key store.TokenKey, ttl time.Duration) *hostApp {
	return &hostApp{t: t, e: e, key: key, ttl: ttl, issued: map[string]int{},
		api: strings.Replace(e.apiURL, "//127.0.0.1:", "//localhost:", 1) + "/"}
}

// serve starts one of the team's web servers on a loopback port of its
// own and returns its origin.
func (h *hostApp) serve() string {
	srv := httptest.NewServer(http.HandlerFunc(h.answer))
	h.t.Cleanup(srv.Close)
	return srv.URL
}

// component is the script tag that loads the component from Herald with
// its integrity hash.
func (h *hostApp) component() string {
	return `<script type="module" src="` + strings.TrimSuffix(h.api, "/") + webinbox.ComponentPath() + `" integrity="` + heraldinbox.Integrity() + `" crossorigin="anonymous"></script>`
}

// tokenScript sets a token provider on the element id that fetches a
// fresh token from the team's backend (its own origin), and records the
// element's events.
func tokenScript(id, user string) string {
	return `<script>
window.__tokens = 0; window.__opened = []; window.__toasts = []; window.__authErrors = []; window.__bellClicks = 0;
const el = document.getElementById("` + id + `");
// Set before the module defines the element: the component takes it over.
el.tokenProvider = async () => {
  window.__tokens++;
  const r = await fetch("/token?user=` + user + `");
  return r.text();
};
el.addEventListener("herald-open", (e) => window.__opened.push(e.detail.url));
el.addEventListener("herald-toast", (e) => window.__toasts.push(e.detail.title));
el.addEventListener("herald-auth-error", (e) => window.__authErrors.push(e.detail.message));
document.addEventListener("herald-bell-click", () => window.__bellClicks++);
</script>`
}

// appPage is the team's page: the component, a bell mirroring the inbox,
// and a token provider.
func (h *hostApp) appPage(user string) string {
	return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Acme</title>
` + h.component() + `
<style>
body { margin: 0; font: 15px system-ui, sans-serif; }
.top { display: flex; justify-content: space-between; align-items: center; padding: 8px 16px; }
herald-inbox::part(title) { letter-spacing: 1px; }
</style></head>
<body>
<div class="top"><b>Acme</b><herald-bell id="bell" for="inbox"></herald-bell></div>
<herald-inbox id="inbox" api="` + h.api + `"></herald-inbox>
` + tokenScript("inbox", user) + `
</body></html>`
}

// bellPage is a team's header with a <herald-bell> of its own (no for=):
// it reads the count itself; a click is the host's to handle.
func (h *hostApp) bellPage(user string) string {
	return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Acme</title>
` + h.component() + `
</head>
<body>
<header><b>Acme</b> <herald-bell id="bell" api="` + h.api + `"></herald-bell></header>
` + tokenScript("bell", user) + `
</body></html>`
}

// open opens the host page path (on origin) for user in a new tab of
// browser.
func (h *hostApp) open(browser context.Context, origin, path, user string, width, height int64) *inboxPage {
	h.t.Helper()
	p := h.e.blankTab(browser, user)
	if err := chromedp.Do(p.ctx, chromedp.EmulateViewport(width, height), chromedp.Navigate(origin+path+"?user="+user)); err != nil {
		h.t.Fatalf("%s: open the host page: %v", user, err)
	}
	return p
}

// answer is the team's web server: its pages, its token endpoint and a
// picture.
func (h *hostApp) answer(w http.ResponseWriter, r *http.Request) {
	user := r.URL.Query().Get("user")
	w.Header().Set("Cache-Control", "no-store")
	page := func(body string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, body)
	}
	switch r.URL.Path {
	case "/app.html":
		page(h.appPage(user))
	case "/bell.html":
		page(h.bellPage(user))
	case "/avatar.png":
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(avatarPNG)
	case "/token":
		h.mu.Lock()
		defer h.mu.Unlock()
		aud := h.e.audience(h.t)
		if h.badNext {
			aud, h.badNext = "https://another.example", false
		}
		now := time.Now()
		tok, err := auth.Issue(h.key, aud, auth.User{UserID: user, UserType: "STAFF", Roles: []string{"MANAGER"}}, h.ttl, now)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		h.issued[user]++
		h.lastExp = now.Add(h.ttl)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, tok)
	default:
		http.NotFound(w, r)
	}
}

// avatarPNG is a 48×48 picture, the icon the host serves.
var avatarPNG = func() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 48, 48))
	for y := range 48 {
		for x := range 48 {
			img.Set(x, y, color.RGBA{R: 40, G: 120, B: uint8(4 * y), A: 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		panic(err)
	}
	return b.Bytes()
}()

func (h *hostApp) tokens(user string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.issued[user]
}

// componentEnv is a herald serve for the component's tests (the sink and
// the real websocket plugin; a reservation's inbox data carries its
// payload's url and icon), with a token key, started, and emit, which
// posts a reservation.
func componentEnv(ctx context.Context, t *testing.T) (*env, store.TokenKey, func(id, customer, link, icon string)) {
	e := newEnv(t, "sent")
	e.withLivePlugins()
	e.writeConfig()
	rules := liveRules(e.record, e.broker.URL)
	body := `    body  = "{{ .payload.customer_name }}, {{ .payload.pax }} people"` + "\n"
	if !strings.Contains(rules, body) {
		t.Fatal("sinkRules changed: update componentEnv")
	}
	rules = strings.Replace(rules, body, body+`    data  = { url = "{{ .payload.url }}", icon = "{{ .payload.icon }}" }`+"\n", 1)
	e.writeRules(rules)
	key := e.addTokenKey()
	e.start()
	emit := func(id, customer, link, icon string) {
		t.Helper()
		ev := reservation(id)
		ev.Payload, _ = json.Marshal(map[string]any{"restaurant_id": 5, "customer_name": customer, "pax": 2, "url": link, "icon": icon})
		if _, _, err := e.client().Emit(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	return e, key, emit
}

// allowOrigin lets origin call the API for the env's tenant, as an
// operator does.
func (e *env) allowOrigin(origin string) {
	e.t.Helper()
	if out, err := e.cli("tenants", "origins", "add", "--tenant", e.tenant, origin); err != nil {
		e.t.Fatalf("herald tenants origins add %s: %v\n%s", origin, err, out)
	}
}

// TestInboxComponent drives <herald-inbox> embedded in a team's page, in
// headless Chromium against a real herald serve (real websocket plugin).
// The page comes from the team's own web server on another origin
// (127.0.0.1 and its own port) and calls Herald on localhost: every
// request is cross-origin, granted by the tenant's allowed origins.
//
//   - the page loads the component from its versioned path with its SRI
//     hash, and its token provider hands out 3-second tokens: across
//     rounds in which the last token has expired (past the API's leeway)
//     an event arrives live (with a toast), is marked read, and the
//     component asks the provider for a new token each time, never
//     surfacing a refusal; once the backend hands out a token the API
//     refuses, the component asks again and goes on;
//   - the bell on the page mirrors the inbox's unread count, and a click
//     on it hides and shows the inbox;
//   - a notification whose data.url is http(s) opens on click and is
//     marked read; a javascript: URL is not offered;
//   - a notification's data.icon (a relative URL) is shown as its
//     picture; one that does not load falls back to the title's initial;
//     one that is neither https nor relative is not loaded;
//   - two tabs share a reservation: the first to confirm wins and the
//     other shows it live;
//   - arrow keys move the focus through the list;
//   - a locale switch (Italian), a host override of one string, right to
//     left; the dark theme, a custom property and a ::part rule;
//   - at 390 and 360 px wide nothing overflows horizontally and no
//     severity tag wraps;
//   - scrolling to the end loads the next page on the cursor;
//   - the same page on an origin the tenant does not allow shows the
//     component's error state: the browser blocked the API's answers
//     (CORS), and the API granted that origin nothing.
//
// No uncaught exception, no CSP refusal, and no request blocked on the
// allowed origin: Chromium runs without switching off any of its checks
// (its local network access checks let a loopback page call loopback).
// With HERALD_DOCS_SCREENSHOTS=1 it writes
// docs/img/inbox-{light,dark,custom}.png.
func TestInboxComponent(t *testing.T) {
	exe := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // a hang guard; a loaded machine is slow
	defer cancel()

	e, key, emit := componentEnv(ctx, t)
	browser := startChromium(ctx, t, exe)
	host := newHostApp(t, e, key, 3*time.Second)
	app, stranger := host.serve(), host.serve()
	e.allowOrigin(app)

	staff1 := host.open(browser, app, "/app.html", "staff1", 1000, 800)
	blocked1 := watchBlocked(staff1)
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
		emit(id, fmt.Sprintf("Guest%d", round), "", "")
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

	// The page's bell (for="inbox") hides the inbox and shows it again.
	bellButton := chromedp.JSPath(`document.getElementById("bell").shadowRoot.querySelector("button")`)
	for i, hidden := range []bool{true, false} {
		if err := chromedp.Do(staff1.ctx, chromedp.Click(bellButton)); err != nil {
			t.Fatal(err)
		}
		staff1.waitFor("the bell toggles the inbox", `(hidden, clicks) => document.getElementById("inbox").hidden === hidden && window.__bellClicks === clicks`, hidden, i+1)
	}

	// Click-through: an http(s) URL opens and marks read; javascript: is
	// not offered.
	target := e.apiURL + "/inbox?from=notification"
	emit("comp-link", "Linked", target, "")
	emit("comp-js", "Scripted", "javascript:alert(1)", "")
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
	staff2 := host.open(browser, app, "/app.html", "staff2", 1000, 800)
	blocked2 := watchBlocked(staff2)
	staff2.waitFor("staff2 is live", `() => $inbox && $inbox.getElementById("live").dataset.state === "live"`)
	emit("comp-share", "Shared", "", "")
	id1, id2 := staff1.itemWith("Shared, 2 people"), staff2.itemWith("Shared, 2 people")
	staff1.click(id1, "CONFIRMED")
	handled := `(id) => {
		const li = $inbox.querySelector('#list li[data-id="' + id + '"]');
		return li && li.querySelector(".handled").textContent === "Handled by staff1 (CONFIRMED)" && li.querySelector('[data-op="CONFIRMED"]').hidden;
	}`
	staff2.waitFor("staff2 sees staff1's confirmation", handled, id2)
	staff1.waitFor("staff1 sees its confirmation", handled, id1)

	// The user goes back to staff1's tab: a page in a background tab is
	// not rendered, so its lazy pictures and its scroll sentinel wait.
	staff1.front()

	// Pictures: the host's own picture by a relative URL is shown in its
	// box; one that does not load, a javascript: one and a plain http one
	// (neither https nor relative) show the title's initial instead.
	emit("comp-icon-404", "Missing", "", "/missing.png")
	emit("comp-icon-js", "Tricky", "", "javascript:alert(1)")
	emit("comp-icon-http", "Plain", "", app+"/avatar.png")
	emit("comp-icon", "Iconic", "", "/avatar.png")
	staff1.waitFor("the picture is shown, 40 px", `(id) => {
		const img = $inbox.querySelector('li[data-id="' + id + '"] .avatar img');
		return img && img.complete && img.naturalWidth === 48 && img.getAttribute("src").endsWith("/avatar.png") &&
			Math.round(img.getBoundingClientRect().width) === 40 && Math.round(img.getBoundingClientRect().height) === 40;
	}`, staff1.itemWith("Iconic, 2 people"))
	for _, who := range []string{"Missing", "Tricky", "Plain"} {
		staff1.waitFor(who+"'s picture falls back to the initial", `(id) => {
			const a = $inbox.querySelector('li[data-id="' + id + '"] .avatar');
			return a && !a.querySelector("img") && a.textContent === "N";
		}`, staff1.itemWith(who+", 2 people"))
	}
	// Which picture URLs load, as the module's safeIcon decides.
	icons := staff1.waitFor("safeIcon's answers", `(src) => window.__icons || (import(src).then((m) => {
		window.__icons = [m.safeIcon("https://cdn.example.com/a.png"), m.safeIcon("/a.png") === location.origin + "/a.png",
			m.safeIcon("a.png?x=1") === location.origin + "/a.png?x=1", m.safeIcon("//cdn.example.com/a.png"),
			m.safeIcon("http://cdn.example.com/a.png"), m.safeIcon("javascript:alert(1)"), m.safeIcon("JaVaScRiPt:alert(1)"),
			m.safeIcon("data:image/png;base64,AAAA"), m.safeIcon(" /a.png"), m.safeIcon("/a\\b.png"), m.safeIcon("/" + "a".repeat(2048)),
			m.safeIcon(42), m.safeIcon(null)];
	}), false)`, strings.TrimSuffix(host.api, "/")+webinbox.ComponentPath())
	if want := `["https://cdn.example.com/a.png",true,true,"","","","","","","","","",""]`; icons != want {
		t.Fatalf("safeIcon: %s, want %s", icons, want)
	}
	if got := staff1.eval(`$inbox.querySelectorAll('#list .avatar img').length + " " + $inbox.querySelectorAll('#list li[data-id]:not(:has(.avatar))').length`); !strings.HasPrefix(got, `"1 `) {
		t.Fatalf("pictures shown, items without one: %s", got)
	}

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
		emit(fmt.Sprintf("comp-page-%d", i), fmt.Sprintf("Paged%d", i), "", "")
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

	// The same page on an origin the tenant does not allow: the component
	// loads (a public file), its token provider answers, and every API
	// answer is blocked by the browser; the component says so.
	outsider := host.open(browser, stranger, "/app.html", "staff1", 1000, 800)
	blockedOut := watchBlocked(outsider)
	outsider.waitFor("the error state", `() => customElements.get("herald-inbox") && !$inbox.getElementById("error").hidden &&
		$inbox.getElementById("error").textContent.startsWith("Cannot reach the notification service") && $inbox.querySelectorAll("#list li[data-id]").length === 0`)
	if got := outsider.eval(`[window.__tokens > 0, $inbox.getElementById("live").dataset.state !== "live"]`); got != "[true,true]" {
		t.Fatalf("on the disallowed origin: token asked, not live: %s", got)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return len(blockedOut.cors()) > 0 },
		"the browser reports the API's answers blocked by CORS on %s", stranger)
	t.Logf("blocked on %s: %s", stranger, strings.Join(blockedOut.cors(), "; "))
	for _, path := range []string{"/v1/inbox/unread-count", "/v1/live/tickets"} {
		req, _ := http.NewRequest("OPTIONS", e.apiURL+path, nil)
		req.Header.Set("Origin", stranger)
		req.Header.Set("Access-Control-Request-Method", "GET")
		req.Header.Set("Access-Control-Request-Headers", "authorization")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("preflight of %s from %s: %d, Access-Control-Allow-Origin %q; want 403 and no grant", path, stranger, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
	}

	for _, p := range []*inboxPage{staff1, staff2, outsider} {
		p.checkFaults()
	}
	for _, b := range []*blockedLoads{blocked1, blocked2} {
		if got := b.all(); len(got) > 0 {
			t.Fatalf("requests of the allowed origin blocked: %s", strings.Join(got, "; "))
		}
	}
}

// front brings p's tab to the front, as a user switching to it.
func (p *inboxPage) front() {
	p.t.Helper()
	if _, err := chromedp.Call(p.ctx, page.BringToFront, cdp.Empty{}); err != nil {
		p.t.Fatalf("%s: bring the tab to the front: %v", p.user, err)
	}
}

// blockedLoads are the requests of a tab the browser failed for a reason
// of its own (CORS, a blocked request), with their URLs.
type blockedLoads struct {
	mu     sync.Mutex
	urls   map[network.RequestID]string
	what   []string
	byCORS []string
}

// watchBlocked records the requests of p the browser blocks.
func watchBlocked(p *inboxPage) *blockedLoads {
	b := &blockedLoads{urls: map[network.RequestID]string{}}
	if err := chromedp.Listen(p.ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.urls[ev.RequestID] = ev.Request.Method + " " + ev.Request.URL
		case *network.EventLoadingFailed:
			switch {
			case ev.CorsErrorStatus != nil:
				b.byCORS = append(b.byCORS, b.urls[ev.RequestID]+": "+string(ev.CorsErrorStatus.CorsError))
			case ev.BlockedReason != "":
				b.what = append(b.what, b.urls[ev.RequestID]+": blocked "+string(ev.BlockedReason))
			}
		}
	}); err != nil {
		p.t.Fatal(err)
	}
	return b
}

func (b *blockedLoads) cors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.byCORS)
}

func (b *blockedLoads) all() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append(slices.Clone(b.what), b.byCORS...)
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
	p.front()
	p.eval(`(() => { window.scrollTo(0, 0); $inbox.getElementById("toast").hidden = true; })()`)
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

// TestHeraldBell drives a <herald-bell> on its own (no for=) in a team's
// header on another origin, in headless Chromium against a real herald
// serve: with the host's token provider it reads the unread count, follows
// live arrivals and a read-all made elsewhere, shows "99+" above 99 (with
// the exact count in its label), and a click is the host's to handle
// (herald-bell-click; there is no inbox for it to toggle).
func TestHeraldBell(t *testing.T) {
	exe := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // a hang guard; a loaded machine is slow
	defer cancel()
	e, key, emit := componentEnv(ctx, t)
	browser := startChromium(ctx, t, exe)
	host := newHostApp(t, e, key, time.Minute)
	app := host.serve()
	e.allowOrigin(app)
	unread := func() int {
		return e.count(`SELECT count(*) FROM notifications WHERE user_id = 'staff3' AND read_at IS NULL AND archived_at IS NULL`)
	}

	emit("bell-0", "Early", "", "")
	testenv.Eventually(t, 30*time.Second, func() bool { return unread() == 1 }, "staff3's first notification (now: %s)", e.statusSummary())
	p := host.open(browser, app, "/bell.html", "staff3", 800, 600)
	blocked := watchBlocked(p)
	shows := `(text, n) => {
		const root = document.getElementById("bell").shadowRoot;
		const b = root.getElementById("unread");
		return b.textContent === text && b.dataset.count === String(n) &&
			root.querySelector("button").getAttribute("aria-label") === n + " unread notifications";
	}`
	p.waitFor("the bell reads the count", shows, "1", 1)
	p.waitFor("the bell's live session is open", `() => { const l = document.getElementById("bell").live; return l && l.socket && l.socket.readyState === 1; }`)

	emit("bell-1", "Live", "", "")
	p.waitFor("a live arrival counts", shows, "2", 2)

	for i := 2; i <= 100; i++ {
		emit(fmt.Sprintf("bell-%d", i), fmt.Sprintf("Guest%d", i), "", "")
	}
	testenv.Eventually(t, 120*time.Second, func() bool { return unread() == 101 }, "staff3's 101 notifications (now %d: %s)", unread(), e.statusSummary())
	p.waitFor("the bell caps at 99+", shows, "99+", 101)

	if code, body := e.userCall(e.userToken(t, key, "staff3"), "POST", "/v1/inbox/read-all", ""); code != http.StatusOK && code != http.StatusNoContent {
		t.Fatalf("read-all elsewhere: %d %s", code, body)
	}
	p.waitFor("a read-all elsewhere clears the bell", shows, "0", 0)

	if err := chromedp.Do(p.ctx, chromedp.Click(chromedp.JSPath(`document.getElementById("bell").shadowRoot.querySelector("button")`))); err != nil {
		t.Fatal(err)
	}
	p.waitFor("a click is the host's", `() => window.__bellClicks === 1 && !document.getElementById("bell").hidden`)
	if got := p.eval(`[window.__tokens > 0, window.__authErrors.length]`); got != "[true,0]" {
		t.Fatalf("tokens asked, refusals: %s", got)
	}
	p.checkFaults()
	if got := blocked.all(); len(got) > 0 {
		t.Fatalf("requests blocked: %s", strings.Join(got, "; "))
	}
}
