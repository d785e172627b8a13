package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestBrowserCallsTheInboxFromAnAllowedOriginOnly: in headless Chromium, a
// page on a second loopback origin (another port) that tenant a allows
// reads /v1/inbox with a's user token through fetch (preflight, then the
// request); the same page with b's token, and a page on a third origin
// with a's token, are blocked by the browser itself.
func TestBrowserCallsTheInboxFromAnAllowedOriginOnly(t *testing.T) {
	exe, err := exec.LookPath(testenv.Env("HERALD_CHROMIUM", "/usr/bin/chromium"))
	if err != nil {
		if testing.Short() {
			t.Skipf("chromium unavailable in -short mode: %v", err)
		}
		t.Fatalf("chromium unavailable (scripts/test.sh installs Debian's chromium package; HERALD_CHROMIUM names another): %v", err)
	}
	w := newCORSWorld(t)
	host := func() string {
		srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			rw.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = rw.Write([]byte("<!doctype html><title>host</title><p>a team's app</p>"))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	allowed, other := host(), host()
	r := w.do(t, "PUT", "/v1/settings/cors", w.keys["a"], `{"origins": [{"origin": "`+allowed+`"}]}`)
	if r.code != http.StatusOK {
		t.Fatalf("allow %s: %d %s", allowed, r.code, r.body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a guard against a hang, not a speed bound: a loaded machine starts Chromium slowly
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()

	// call runs fetch in a page of origin and says what the page could
	// read: the status and the exposed ETag, or the browser's refusal.
	call := func(origin, path, token string) string {
		t.Helper()
		tab, cancelTab := chromedp.NewContext(bctx)
		defer cancelTab()
		js := fmt.Sprintf(`fetch(%q, {headers: {Authorization: %q}})
			.then(r => r.json().then(b => r.status + " etag=" + (r.headers.get("ETag") !== null) + " items=" + Array.isArray(b.items)))
			.catch(e => "blocked " + e.name)`, w.url+path, "Bearer "+token)
		if err := chromedp.Do(tab, chromedp.Navigate(origin+"/")); err != nil {
			t.Fatalf("open %s: %v", origin, err)
		}
		out, err := chromedp.Run(tab, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("fetch from %s: %v", origin, err)
		}
		return out
	}
	tokA, tokB := w.token(t, "a"), w.token(t, "b")
	if got := call(allowed, "/v1/inbox", tokA); got != "200 etag=false items=true" {
		t.Fatalf("a's token from a's origin %s: %q; want the inbox read", allowed, got)
	}
	// The preferences answer an ETag (for If-Match): exposed to the page.
	if got := call(allowed, "/v1/me/preferences", tokA); got != "200 etag=true items=false" {
		t.Fatalf("a's token from a's origin %s, /v1/me/preferences: %q; want it read with its ETag", allowed, got)
	}
	if got := call(allowed, "/v1/inbox", tokB); got != "blocked TypeError" {
		t.Fatalf("b's token from a's origin: %q; want the browser to block it", got)
	}
	if got := call(other, "/v1/inbox", tokA); got != "blocked TypeError" {
		t.Fatalf("a's token from %s, which no tenant allows: %q; want the browser to block it", other, got)
	}

	// A live session: opened from a's origin, refused from the other (the
	// ticket is a's either way, fetched here).
	live := func(origin string) string {
		t.Helper()
		r := w.do(t, "POST", "/v1/live/tickets", tokA, "")
		var tk struct {
			URL string `json:"url"`
		}
		if err := json.Unmarshal(r.body, &tk); r.code != http.StatusCreated || err != nil {
			t.Fatalf("ticket: %d %s", r.code, r.body)
		}
		tab, cancelTab := chromedp.NewContext(bctx)
		defer cancelTab()
		if err := chromedp.Do(tab, chromedp.Navigate(origin+"/")); err != nil {
			t.Fatalf("open %s: %v", origin, err)
		}
		js := fmt.Sprintf(`new Promise(done => {
			const ws = new WebSocket(%q);
			ws.onmessage = m => { done("open " + JSON.parse(m.data).type); ws.close(); };
			ws.onerror = () => done("refused");
		})`, "ws"+strings.TrimPrefix(w.url, "http")+tk.URL)
		out, err := chromedp.Run(tab, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("WebSocket from %s: %v", origin, err)
		}
		return out
	}
	if got := live(allowed); got != "open ready" {
		t.Fatalf("a live session from a's origin: %q", got)
	}
	if got := live(other); got != "refused" {
		t.Fatalf("a live session from %s: %q; want it refused", other, got)
	}
}
