package httpguard

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/heraldhq/herald/sdk/producer"
)

// MinTokenLen is the shortest admin token ReadTokenFile accepts.
const MinTokenLen = 16

// ReadTokenFile reads the admin token at path: the file's content without
// surrounding whitespace, at least MinTokenLen printable ASCII characters.
// It refuses a file that its group or others may read or write (mode 0600
// or stricter is required), as ssh does with a private key, with one
// exception (tokenFileAccess): a root-owned file only herald's own group
// may read, the shape Kubernetes gives a Secret's file under fsGroup.
func ReadTokenFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("admin token: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("admin token: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("admin token: %s is not a regular file", path)
	}
	uid, gid := -1, -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid, gid = int(st.Uid), int(st.Gid)
	}
	if err := tokenFileAccess(fi.Mode().Perm(), uid, gid, os.Geteuid(), os.Getegid()); err != nil {
		return nil, fmt.Errorf("admin token: %s %v; run chmod 600 %s", path, err, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4097))
	if err != nil {
		return nil, fmt.Errorf("admin token: %w", err)
	}
	if len(b) > 4096 {
		return nil, fmt.Errorf("admin token: %s is larger than 4 KiB", path)
	}
	tok := bytes.TrimSpace(b)
	if len(tok) < MinTokenLen {
		return nil, fmt.Errorf("admin token: %s holds %d characters, want at least %d (openssl rand -hex 32 > %s)", path, len(tok), MinTokenLen, path)
	}
	for _, c := range tok {
		if c < 0x21 || c > 0x7e {
			return nil, fmt.Errorf("admin token: %s holds a character other than printable ASCII without spaces", path)
		}
	}
	return tok, nil
}

// AdminGuard admits a request to the admin listener only when it is not
// from a browser page, names the listener in its Host header, and carries
// the admin token (when one is configured).
type AdminGuard struct {
	// hosts are the Host header values that name the listener.
	hosts map[string]bool
	// port is the listener's port; anyIP admits any IP literal on it (the
	// listener is bound to every interface).
	port  string
	anyIP bool
	// sum is the token's SHA-256; hasToken is false when there is none.
	sum      [sha256.Size]byte
	hasToken bool
}

// NewAdminGuard guards a listener bound at bound, configured as
// configured ("host:port" as in http.admin_listen), with token (nil: no
// token; only sane on loopback). The Host header must be the bound
// address, the configured host with the bound port, or, on loopback,
// localhost, 127.0.0.1 or [::1] with that port; on a listener bound to
// every interface, any IP address with that port. A DNS name an attacker
// controls never matches, which defeats DNS rebinding.
func NewAdminGuard(bound net.Addr, configured string, token []byte) (*AdminGuard, error) {
	tcp, ok := bound.(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("admin guard: %s is not a TCP address", bound)
	}
	g := &AdminGuard{hosts: map[string]bool{}, port: strconv.Itoa(tcp.Port), anyIP: tcp.IP.IsUnspecified()}
	add := func(host string) { g.hosts[net.JoinHostPort(strings.ToLower(host), g.port)] = true }
	add(tcp.IP.String())
	if host, _, err := net.SplitHostPort(configured); err == nil && host != "" {
		add(host)
	}
	if tcp.IP.IsLoopback() || tcp.IP.IsUnspecified() {
		add("localhost")
		add("127.0.0.1")
		add("::1")
	}
	if token != nil {
		g.sum, g.hasToken = sha256.Sum256(token), true
	}
	return g, nil
}

// Wrap returns h behind the guard. In order: a request from a browser page
// (an Origin header, or Sec-Fetch-Site other than "none") is 403; a Host
// header that does not name the listener is 421; a missing or wrong
// "Authorization: Bearer <token>" is 401. Errors are RFC 9457 problem
// documents, like the admin API's own.
func (g *AdminGuard) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Origin") != "" || !slices.Contains([]string{"", "none"}, r.Header.Get("Sec-Fetch-Site")) {
			adminError(w, http.StatusForbidden, "admin API: requests from browser pages are refused (Origin or Sec-Fetch-Site header present)")
			return
		}
		if !g.hostOK(r.Host) {
			adminError(w, http.StatusMisdirectedRequest, fmt.Sprintf("admin API: Host %q does not name this listener; use its address", r.Host))
			return
		}
		if g.hasToken {
			tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
			if !ok || subtle.ConstantTimeCompare(sum[:], g.sum[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="herald-admin"`)
				adminError(w, http.StatusUnauthorized, "admin API: a valid admin token is required (Authorization: Bearer <token from http.admin_token_file>)")
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// hostOK reports whether the Host header hostport names the listener.
func (g *AdminGuard) hostOK(hostport string) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, "80"
	}
	host = strings.ToLower(host)
	if g.hosts[net.JoinHostPort(host, port)] {
		return true
	}
	return g.anyIP && port == g.port && net.ParseIP(host) != nil
}

// adminError answers an RFC 9457 problem document (application/problem+json),
// like every error of the API.
func adminError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(producer.Problem{Type: "about:blank", Title: strings.ToLower(http.StatusText(status)), Status: status, Detail: msg})
}

// tokenFileAccess says why a token file of mode perm, owned by uid:gid,
// is too open for a process running as euid:egid (nil: it is not). Its
// group and others may not have any access, except that a file owned by
// root may be readable (not writable) by its group when that group is the
// process's own and the process is not root: a Kubernetes Secret mounted
// with fsGroup (root:herald 0440), which only herald's group can read.
func tokenFileAccess(perm os.FileMode, uid, gid, euid, egid int) error {
	if perm&0o077 == 0 {
		return nil
	}
	if perm&0o037 == 0 && uid == 0 && euid != 0 && gid == egid {
		return nil
	}
	return fmt.Errorf("is accessible to its group or others (mode %04o)", perm)
}
