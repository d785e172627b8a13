package webinbox_test

import (
	"bytes"
	"context"
	"crypto/sha512"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldhq/herald/core/internal/webinbox"
	heraldinbox "github.com/heraldhq/herald/web/herald-inbox"
)

func TestHandler(t *testing.T) {
	t.Parallel()
	h := webinbox.Handler("herald")
	type want struct {
		Status      int
		ContentType string
		CSP         string
		Location    string
	}
	page := func(ct string) want {
		return want{Status: http.StatusOK, ContentType: ct, CSP: "default-src 'self'; connect-src 'self' wss://herald.test ws://herald.test; " +
			"img-src 'self' data:; worker-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"}
	}
	tests := map[string]struct {
		method, path string
		want         want
	}{
		"page":             {"GET", "/inbox", page("text/html; charset=utf-8")},
		"page head":        {"HEAD", "/inbox", page("text/html; charset=utf-8")},
		"script":           {"GET", "/inbox/app.js", page("text/javascript; charset=utf-8")},
		"styles":           {"GET", "/inbox/style.css", page("text/css; charset=utf-8")},
		"service worker":   {"GET", "/inbox/sw.js", page("text/javascript; charset=utf-8")},
		"trailing slash":   {"GET", "/inbox/", want{Status: http.StatusMovedPermanently, Location: "../inbox"}},
		"index by name":    {"GET", "/inbox/index.html", want{Status: http.StatusNotFound, ContentType: "application/problem+json"}},
		"unknown file":     {"GET", "/inbox/nope.js", want{Status: http.StatusNotFound, ContentType: "application/problem+json"}},
		"directory escape": {"GET", "/inbox/../go.mod", want{Status: http.StatusNotFound, ContentType: "application/problem+json"}},
		"post":             {"POST", "/inbox", want{Status: http.StatusMethodNotAllowed, ContentType: "application/problem+json"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(tc.method, "http://herald.test/", nil)
			req.URL.Path = tc.path // unnormalised, as a raw request line may carry it
			h.ServeHTTP(rec, req)
			got := want{Status: rec.Code, ContentType: rec.Header().Get("Content-Type"),
				CSP: rec.Header().Get("Content-Security-Policy"), Location: rec.Header().Get("Location")}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s %s (-want +got):\n%s", tc.method, tc.path, diff)
			}
			if got.Status == http.StatusOK {
				if v := rec.Header().Get("X-Content-Type-Options"); v != "nosniff" {
					t.Errorf("X-Content-Type-Options = %q, want nosniff", v)
				}
				if (tc.method == "HEAD") != (rec.Body.Len() == 0) {
					t.Errorf("%s: body of %d bytes", tc.method, rec.Body.Len())
				}
			}
		})
	}
}

// TestRevalidation: a browser that has the file gets 304 for its ETag.
func TestRevalidation(t *testing.T) {
	t.Parallel()
	h := webinbox.Handler("herald")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/inbox/app.js", nil))
	etag := rec.Header().Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	req := httptest.NewRequest("GET", "/inbox/app.js", nil)
	req.Header.Set("If-None-Match", etag)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotModified {
		t.Fatalf("revalidation: %d, want 304", rec.Code)
	}
}

// TestPageNeedsNoInlineCode holds the page to what its CSP allows (no
// inline script, handler attribute or style attribute), checks that every
// file it links is served, and keeps markup-building calls out of the
// script: notification text is untrusted and goes in with textContent.
func TestPageNeedsNoInlineCode(t *testing.T) {
	t.Parallel()
	h := webinbox.Handler("herald")
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Code, rec.Body.String()
	}
	_, html := get("/inbox")
	for _, tag := range regexp.MustCompile(`(?is)<script\b[^>]*>`).FindAllString(html, -1) {
		if !strings.Contains(tag, " src=") {
			t.Errorf("inline script: %s", tag)
		}
	}
	if m := regexp.MustCompile(`(?i)<[^>]*\s(on[a-z]+|style)\s*=`).FindString(html); m != "" {
		t.Errorf("inline handler or style attribute: %s", m)
	}
	links := regexp.MustCompile(`(?:href|src)="(inbox/[^"]+)"`).FindAllStringSubmatch(html, -1)
	if len(links) < 2 {
		t.Fatalf("the page links %d files, want its script and styles", len(links))
	}
	for _, l := range links {
		if code, _ := get("/" + l[1]); code != http.StatusOK {
			t.Errorf("the page links %s, served with %d", l[1], code)
		}
	}
	for _, file := range []string{"app.js", "sw.js", strings.TrimPrefix(webinbox.ComponentPath(), "/inbox/")} {
		code, js := get("/inbox/" + file)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", file, code)
		}
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
			if strings.Contains(js, bad) {
				t.Errorf("%s uses %s", file, bad)
			}
		}
	}
}

// TestCSPNamesItsOwnHost: the page may open WebSockets to the host it was
// served from only, never to any ws: or wss: address, and a Host header
// that is not a plain host (it would add sources or directives) names no
// WebSocket host at all.
func TestCSPNamesItsOwnHost(t *testing.T) {
	t.Parallel()
	h := webinbox.Handler("herald")
	tests := map[string]struct {
		host    string
		tls     bool
		connect string
	}{
		"plain":            {"inbox.example.com", false, "connect-src 'self' wss://inbox.example.com ws://inbox.example.com;"},
		"port":             {"inbox.example.com:8443", false, "connect-src 'self' wss://inbox.example.com:8443 ws://inbox.example.com:8443;"},
		"tls":              {"Inbox.Example.com", true, "connect-src 'self' wss://inbox.example.com;"},
		"ipv6":             {"[::1]:8080", false, "connect-src 'self' wss://[::1]:8080 ws://[::1]:8080;"},
		"directive":        {"evil.example;script-src", false, "connect-src 'self';"},
		"another source":   {"a.example,wss://evil.example", false, "connect-src 'self';"},
		"wildcard":         {"*.example.com", false, "connect-src 'self';"},
		"scheme in host":   {"wss:", false, "connect-src 'self';"},
		"empty":            {"", false, "connect-src 'self';"},
		"leading hyphen":   {"-a.example", false, "connect-src 'self';"},
		"path in host":     {"a.example/x", false, "connect-src 'self';"},
		"user in host":     {"u@a.example", false, "connect-src 'self';"},
		"space in host":    {"a.example wss:", false, "connect-src 'self';"},
		"quote in host":    {"a.example'", false, "connect-src 'self';"},
		"port too long":    {"a.example:123456", false, "connect-src 'self';"},
		"bracketed junk":   {"[evil]", false, "connect-src 'self';"},
		"ipv6 unbracketed": {"::1", false, "connect-src 'self';"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest("GET", "/inbox", nil)
			req.Host = tc.host
			if tc.tls {
				req.TLS = &tls.ConnectionState{}
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			csp := rec.Header().Get("Content-Security-Policy")
			if !strings.Contains(csp, "; "+tc.connect+" ") {
				t.Errorf("Host %q: CSP %q, want %q", tc.host, csp, tc.connect)
			}
			if regexp.MustCompile(`(?:^|\s)wss?:(?:\s|;|$)`).MatchString(csp) {
				t.Errorf("Host %q: CSP allows any WebSocket: %q", tc.host, csp)
			}
			if strings.Count(csp, "connect-src") != 1 || strings.Contains(csp, "script-src") {
				t.Errorf("Host %q: CSP %q", tc.host, csp)
			}
		})
	}
}

// TestPageCarriesItsAudience: the page names the deployment's token
// audience (escaped), which its script holds every token to.
func TestPageCarriesItsAudience(t *testing.T) {
	t.Parallel()
	for aud, want := range map[string]string{
		"herald":                       `<meta name="herald-audience" content="herald">`,
		`https://x.example/"><b>x</b>`: `<meta name="herald-audience" content="https://x.example/&#34;&gt;&lt;b&gt;x&lt;/b&gt;">`,
	} {
		rec := httptest.NewRecorder()
		webinbox.Handler(aud).ServeHTTP(rec, httptest.NewRequest("GET", "/inbox", nil))
		if body := rec.Body.String(); !strings.Contains(body, want) || strings.Count(body, "herald-audience") != 1 {
			t.Errorf("audience %q: the page does not carry %s", aud, want)
		}
	}
	rec := httptest.NewRecorder()
	webinbox.Handler("herald").ServeHTTP(rec, httptest.NewRequest("GET", "/inbox/app.js", nil))
	if js := rec.Body.String(); !strings.Contains(js, "forThisDeployment(token)") {
		t.Error("app.js does not check a token's audience before using it")
	}
}

// TestFrameAncestorsNameOnlyOrigins: whatever the lookup returns, only
// origins in the browser's form reach frame-ancestors (a value that would
// add a source or a directive is dropped), and a failed lookup frames
// nothing.
func TestFrameAncestorsNameOnlyOrigins(t *testing.T) {
	frames := func(_ context.Context, tenant string) ([]string, error) {
		switch tenant {
		case "acme":
			return []string{"https://app.example.com", "https://a.example; script-src *", "*", "'self'", "HTTPS://UP.example", "http://localhost:3000"}, nil
		case "down":
			return nil, errors.New("database down")
		}
		return nil, nil
	}
	h := webinbox.HandlerFor("herald", frames)
	csp := func(target string) (string, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", target, nil))
		return rec.Header().Get("Content-Security-Policy"), rec.Header().Get("X-Frame-Options")
	}
	got, xfo := csp("/inbox?tenant=acme")
	if !strings.HasSuffix(got, "; frame-ancestors https://app.example.com http://localhost:3000") || xfo != "" {
		t.Fatalf("acme: %q, X-Frame-Options %q", got, xfo)
	}
	for _, target := range []string{"/inbox?tenant=down", "/inbox?tenant=none", "/inbox", "/inbox?tenant=ac%20me"} {
		if got, xfo := csp(target); !strings.HasSuffix(got, "; frame-ancestors 'none'") || xfo != "DENY" {
			t.Fatalf("%s: %q, X-Frame-Options %q", target, got, xfo)
		}
	}
}

// TestComponent: the inbox component is served at its versioned,
// content-hashed path, byte for byte the package's file, cached for good
// and loadable from any origin (a module script with its integrity
// checked); the unversioned name redirects to it uncached; another hash
// is 404. The hosted page loads it with its SRI hash.
func TestComponent(t *testing.T) {
	t.Parallel()
	h := webinbox.Handler("herald")
	path := webinbox.ComponentPath()
	if want := "/inbox/component/v1/" + heraldinbox.FileName(); path != want || !regexp.MustCompile(`^herald-inbox\.[0-9a-f]{16}\.js$`).MatchString(heraldinbox.FileName()) {
		t.Fatalf("component path %s", path)
	}
	for _, method := range []string{"GET", "HEAD"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		hd := rec.Header()
		got := map[string]string{
			"status": fmt.Sprint(rec.Code), "Content-Type": hd.Get("Content-Type"), "Cache-Control": hd.Get("Cache-Control"),
			"Access-Control-Allow-Origin": hd.Get("Access-Control-Allow-Origin"), "X-Content-Type-Options": hd.Get("X-Content-Type-Options"),
			"Cross-Origin-Resource-Policy": hd.Get("Cross-Origin-Resource-Policy"),
		}
		want := map[string]string{
			"status": "200", "Content-Type": "text/javascript; charset=utf-8", "Cache-Control": "public, max-age=31536000, immutable",
			"Access-Control-Allow-Origin": "*", "X-Content-Type-Options": "nosniff", "Cross-Origin-Resource-Policy": "cross-origin",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", method, path, diff)
		}
		if method == "GET" && !bytes.Equal(rec.Body.Bytes(), heraldinbox.Source) {
			t.Errorf("the served component is not the package's herald-inbox.js")
		}
	}
	sum := sha512.Sum384(heraldinbox.Source)
	if want := "sha384-" + base64.StdEncoding.EncodeToString(sum[:]); heraldinbox.Integrity() != want {
		t.Errorf("Integrity() = %s, want %s", heraldinbox.Integrity(), want)
	}

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/inbox/component/v1/herald-inbox.js", nil))
	if rec.Code != http.StatusFound || rec.Header().Get("Location") != heraldinbox.FileName() || rec.Header().Get("Cache-Control") != "no-cache" {
		t.Errorf("unversioned name: %d Location %q Cache-Control %q", rec.Code, rec.Header().Get("Location"), rec.Header().Get("Cache-Control"))
	}
	for _, p := range []string{"/inbox/component/v1/herald-inbox.0000000000000000.js", "/inbox/component/herald-inbox.js", "/inbox/component/v2/" + heraldinbox.FileName()} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		if rec.Code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, rec.Code)
		}
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/inbox", nil))
	tag := `<script type="module" src="inbox/component/v1/` + heraldinbox.FileName() + `" integrity="` + heraldinbox.Integrity() + `" crossorigin="anonymous"></script>`
	if !strings.Contains(rec.Body.String(), tag) {
		t.Errorf("the page does not load the component with its integrity: want %s", tag)
	}
}

// TestDocsPrintTheComponent: docs/inbox.md names the component's current
// path and SRI hash (update them with what this test prints).
func TestDocsPrintTheComponent(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "inbox.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{webinbox.ComponentPath(), `integrity="` + heraldinbox.Integrity() + `"`} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("docs/inbox.md does not print %s", want)
		}
	}
	stale := regexp.MustCompile(`herald-inbox\.[0-9a-f]{16}\.js|sha384-[A-Za-z0-9+/=]{64}`)
	for _, m := range stale.FindAllString(string(doc), -1) {
		if m != heraldinbox.FileName() && m != heraldinbox.Integrity() {
			t.Errorf("docs/inbox.md prints a stale %s (now %s, %s)", m, heraldinbox.FileName(), heraldinbox.Integrity())
		}
	}
}
