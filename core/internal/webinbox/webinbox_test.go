package webinbox_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldhq/herald/core/internal/webinbox"
)

func TestHandler(t *testing.T) {
	t.Parallel()
	h := webinbox.Handler()
	type want struct {
		Status      int
		ContentType string
		CSP         string
		Location    string
	}
	page := func(ct string) want {
		return want{Status: http.StatusOK, ContentType: ct, CSP: webinbox.CSP}
	}
	tests := map[string]struct {
		method, path string
		want         want
	}{
		"page":             {"GET", "/inbox", page("text/html; charset=utf-8")},
		"page head":        {"HEAD", "/inbox", page("text/html; charset=utf-8")},
		"script":           {"GET", "/inbox/app.js", page("text/javascript; charset=utf-8")},
		"styles":           {"GET", "/inbox/style.css", page("text/css; charset=utf-8")},
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
	h := webinbox.Handler()
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
	h := webinbox.Handler()
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
	_, js := get("/inbox/app.js")
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
		if strings.Contains(js, bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
}
