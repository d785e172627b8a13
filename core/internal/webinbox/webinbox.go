// Package webinbox serves the web inbox: one page (plain HTML, vanilla
// JavaScript and CSS, embedded in the binary, no build step) at /inbox on
// the public listener, where an end user signs in with their token and
// reads and manages their notifications through the inbox API, with live
// updates over the live gateway, and sets their preferences and turns on
// Web Push for the browser through the end-user API (/v1/me).
//
// The page's files are served with fixed content types, an ETag of their
// content and a strict Content-Security-Policy: scripts, styles and
// images from the page's own origin only (no inline script or style), the
// service worker (sw.js, which shows Web Push messages) from it too, and
// connections to the same origin and WebSockets to the host the page was
// served from only (CSPFor). The page renders every notification field as
// text, never as markup. The page carries the deployment's token audience
// (auth.audience, in a meta element) and refuses, before storing or
// sending it anywhere, a token whose aud does not hold it: a token meant
// for another deployment never leaves the browser.
package webinbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/origins"
	"github.com/heraldhq/herald/core/internal/store"
	heraldinbox "github.com/heraldhq/herald/web/herald-inbox"
)

//go:embed static
var static embed.FS

// Path is where the page is served; its files are under Path + "/".
const Path = "/inbox"

// cspTail is the Content-Security-Policy of every file of the page after
// its connect-src, up to its frame-ancestors.
const cspTail = "; img-src 'self' data:; worker-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors "

// TenantParam is the query parameter naming the tenant whose frame
// origins may embed the page: /inbox?tenant=T.
const TenantParam = "tenant"

// FrameOrigins returns the origins a tenant lets embed the page, each in
// the form origins.Normalize gives (none for an unknown tenant).
type FrameOrigins func(ctx context.Context, tenant string) ([]string, error)

// hostPattern is a Host header CSPFor names: a DNS name or IPv4 address,
// or a bracketed IPv6 address, with an optional port. Anything else (a
// Host holding ';' or ',' would add directives or sources) names none.
var hostPattern = regexp.MustCompile(`^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?$`)

// CSPFor is the Content-Security-Policy of the page's files answered to r:
// scripts, styles and images from the page's own origin, and connections
// to the same origin and to WebSockets on the host r was sent to only
// (wss://host; ws://host too when r came without TLS, which a page served
// over https through a TLS-terminating proxy cannot use anyway) — never to
// any ws: or wss: address.
func CSPFor(r *http.Request) string { return cspFor(r, nil) }

// cspFor is CSPFor with frame-ancestors naming ancestors (origins as
// origins.Normalize gives them), or 'none' when there are none.
func cspFor(r *http.Request, ancestors []string) string {
	connect := "default-src 'self'; connect-src 'self'"
	if host := strings.ToLower(r.Host); hostPattern.MatchString(host) {
		connect += " wss://" + host
		if r.TLS == nil {
			connect += " ws://" + host
		}
	}
	frame := "'none'"
	if len(ancestors) > 0 {
		frame = strings.Join(ancestors, " ")
	}
	return connect + cspTail + frame
}

// ComponentDir is the folder the inbox component's module is served
// from: Path + ComponentDir + heraldinbox.FileName(), the versioned,
// content-hashed name, cached for a year (immutable).
const ComponentDir = "/component/v1/"

// ComponentPath is the path the inbox component is served at.
func ComponentPath() string { return Path + ComponentDir + heraldinbox.FileName() }

// componentScript is the placeholder of index.html that Handler replaces
// with the component's versioned path and integrity hash.
const componentScript = `<script type="module" src="inbox/component/herald-inbox.js"></script>`

// audienceMeta is the placeholder of index.html that Handler replaces
// with the deployment's token audience.
const audienceMeta = `<meta name="herald-audience" content="">`

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
	// immutable is the component: cached for good, loadable from any
	// origin.
	immutable bool
}

// Handler serves GET and HEAD of Path (the page) and of Path + "/<file>"
// (its scripts and styles); Path + "/" redirects to Path. audience is the
// aud claim the deployment's tokens carry (auth.audience): the page
// refuses any other token. No page may frame it (frame-ancestors 'none').
func Handler(audience string) http.Handler { return HandlerFor(audience, nil) }

// HandlerFor is Handler whose page, asked for as Path?tenant=T, may be
// framed by the origins frames returns for T (frame-ancestors; the rest of
// the policy is the same). Without a tenant, for a malformed or unknown
// one, or when frames fails, the page's frame-ancestors is 'none' and it
// answers X-Frame-Options: DENY too.
func HandlerFor(audience string, frames FrameOrigins) http.Handler {
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
		if p == "static/index.html" {
			if !bytes.Contains(b, []byte(audienceMeta)) {
				return fmt.Errorf("%s has no %s", p, audienceMeta)
			}
			b = bytes.Replace(b, []byte(audienceMeta),
				[]byte(`<meta name="herald-audience" content="`+html.EscapeString(audience)+`">`), 1)
			if !bytes.Contains(b, []byte(componentScript)) {
				return fmt.Errorf("%s has no %s", p, componentScript)
			}
			b = bytes.Replace(b, []byte(componentScript), []byte(`<script type="module" src="inbox`+ComponentDir+heraldinbox.FileName()+
				`" integrity="`+heraldinbox.Integrity()+`" crossorigin="anonymous"></script>`), 1)
		}
		sum := sha256.Sum256(b)
		files[strings.TrimPrefix(p, "static/")] = file{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic(fmt.Sprintf("webinbox: read embedded files: %v", err)) // the embed is fixed at build time
	}
	component := heraldinbox.FileName()
	sum := sha256.Sum256(heraldinbox.Source)
	files[strings.TrimPrefix(ComponentDir, "/")+component] = file{body: heraldinbox.Source, contentType: contentTypes[".js"],
		etag: `"` + hex.EncodeToString(sum[:8]) + `"`, immutable: true}
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
		case ok && name == strings.TrimPrefix(ComponentDir, "/")+"herald-inbox.js":
			// The unversioned name: the current version, never cached.
			w.Header().Set("Location", component)
			w.Header().Set("Cache-Control", "no-cache")
			w.Header().Set("Access-Control-Allow-Origin", "*")
			w.WriteHeader(http.StatusFound)
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
		var ancestors []string
		if name == "index.html" && frames != nil {
			ancestors = frameAncestors(r, frames)
		}
		h := w.Header()
		h.Set("Content-Type", f.contentType)
		h.Set("Content-Security-Policy", cspFor(r, ancestors))
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if len(ancestors) == 0 {
			h.Set("X-Frame-Options", "DENY")
		}
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cache-Control", "no-cache")
		if f.immutable {
			// The component is a public file with a content-hashed name:
			// cached for good, and loadable (as a module script, with its
			// integrity checked) by a page on any origin. It carries no
			// credentials and grants no API access: the API's own CORS
			// answers are separate.
			h.Set("Cache-Control", "public, max-age=31536000, immutable")
			h.Set("Access-Control-Allow-Origin", "*")
			h.Set("Cross-Origin-Resource-Policy", "cross-origin")
			h.Del("X-Frame-Options")
		}
		h.Set("ETag", f.etag)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
	})
}

// frameAncestors is the origins the tenant of r's tenant parameter lets
// frame the page: none unless the parameter is given once, is a valid
// tenant id and frames answers. Each is checked again to be an origin in
// normal form (origins.Canonical), so nothing else reaches the policy.
func frameAncestors(r *http.Request, frames FrameOrigins) []string {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil || len(q[TenantParam]) != 1 || store.ValidID("tenant", q.Get(TenantParam)) != nil {
		return nil
	}
	list, err := frames(r.Context(), q.Get(TenantParam))
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(list))
	for _, o := range list {
		if origins.Canonical(o) {
			out = append(out, o)
		}
	}
	return out
}
