// Package webinbox serves the web inbox: one page (plain HTML, vanilla
// JavaScript and CSS, embedded in the binary, no build step) at /inbox on
// the public listener, where an end user signs in with their token and
// reads and manages their notifications through the inbox API, with live
// updates over the live gateway.
//
// The page's files are served with fixed content types, an ETag of their
// content and a strict Content-Security-Policy: scripts, styles and
// images from the page's own origin only (no inline script or style), and
// connections to the same origin and WebSockets only. The page renders
// every notification field as text, never as markup.
package webinbox

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/heraldhq/herald/core/internal/api"
)

//go:embed static
var static embed.FS

// Path is where the page is served; its files are under Path + "/".
const Path = "/inbox"

// CSP is the Content-Security-Policy of every file of the page.
const CSP = "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; object-src 'none'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// contentTypes are the types of the files the page is made of; a file of
// another type is not served.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// file is one embedded file, ready to serve.
type file struct {
	body        []byte
	contentType string
	etag        string
}

// Handler serves GET and HEAD of Path (the page) and of Path + "/<file>"
// (its scripts and styles); Path + "/" redirects to Path.
func Handler() http.Handler {
	files := map[string]file{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			return nil
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		files[strings.TrimPrefix(p, "static/")] = file{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic(fmt.Sprintf("webinbox: read embedded files: %v", err)) // the embed is fixed at build time
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			api.Problem(w, http.StatusMethodNotAllowed, "method not allowed", "the web inbox is read with GET or HEAD", "")
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, Path+"/")
		switch {
		case r.URL.Path == Path:
			name = "index.html"
		case ok && name == "":
			// Relative links on the page resolve against Path itself. The
			// Location stays relative (http.Redirect would make it
			// absolute), so that it also holds behind a path prefix.
			w.Header().Set("Location", "../inbox")
			w.WriteHeader(http.StatusMovedPermanently)
			return
		case !ok || name == "index.html":
			api.Problem(w, http.StatusNotFound, "not found", "no file "+r.URL.Path+" in the web inbox", "")
			return
		}
		f, found := files[name]
		if !found {
			api.Problem(w, http.StatusNotFound, "not found", "no file "+r.URL.Path+" in the web inbox", "")
			return
		}
		h := w.Header()
		h.Set("Content-Type", f.contentType)
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", f.etag)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
	})
}
