package httpguard_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/core/internal/httpguard"
)

const goodToken = "0123456789abcdef0123456789abcdef"

func TestReadTokenFile(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		body    string
		mode    os.FileMode
		want    string // the token, when readable
		wantErr string
	}{
		"0600":                {body: goodToken + "\n", mode: 0o600, want: goodToken},
		"0400":                {body: "  " + goodToken + "\r\n", mode: 0o400, want: goodToken},
		"group readable":      {body: goodToken, mode: 0o640, wantErr: "chmod 600"},
		"world readable":      {body: goodToken, mode: 0o644, wantErr: "mode 0644"},
		"group writable":      {body: goodToken, mode: 0o620, wantErr: "group or others"},
		"too short":           {body: "short\n", mode: 0o600, wantErr: "at least 16"},
		"empty":               {body: "", mode: 0o600, wantErr: "at least 16"},
		"space inside":        {body: "0123456789 abcdef0123", mode: 0o600, wantErr: "printable ASCII"},
		"non-ASCII":           {body: "0123456789abcdefé", mode: 0o600, wantErr: "printable ASCII"},
		"larger than 4 KiB":   {body: strings.Repeat("a", 5000), mode: 0o600, wantErr: "larger than 4 KiB"},
		"two lines of tokens": {body: goodToken + "\n" + goodToken, mode: 0o600, wantErr: "printable ASCII"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(t.TempDir(), "admin.token")
			if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tc.mode); err != nil {
				t.Fatal(err)
			}
			got, err := httpguard.ReadTokenFile(p)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		t.Parallel()
		if _, err := httpguard.ReadTokenFile(filepath.Join(t.TempDir(), "nope")); err == nil || !strings.Contains(err.Error(), "no such file") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		t.Parallel()
		d := t.TempDir()
		if err := os.Chmod(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := httpguard.ReadTokenFile(d); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestAdminGuardHostHeader(t *testing.T) {
	t.Parallel()
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8081}
	any4 := &net.TCPAddr{IP: net.IPv4zero, Port: 8081}
	lan := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 8081}
	tests := map[string]struct {
		bound      net.Addr
		configured string
		host       string
		want       int
	}{
		"loopback as bound":             {loop, "127.0.0.1:8081", "127.0.0.1:8081", http.StatusOK},
		"loopback as localhost":         {loop, "127.0.0.1:8081", "localhost:8081", http.StatusOK},
		"loopback, case ignored":        {loop, "127.0.0.1:8081", "LocalHost:8081", http.StatusOK},
		"loopback as ::1":               {loop, "127.0.0.1:8081", "[::1]:8081", http.StatusOK},
		"loopback, port 0 configured":   {loop, "127.0.0.1:0", "127.0.0.1:8081", http.StatusOK},
		"loopback, other port":          {loop, "127.0.0.1:8081", "127.0.0.1:9999", http.StatusMisdirectedRequest},
		"loopback, rebinding name":      {loop, "127.0.0.1:8081", "attacker.example:8081", http.StatusMisdirectedRequest},
		"loopback, no port":             {loop, "127.0.0.1:8081", "localhost", http.StatusMisdirectedRequest},
		"loopback, empty host":          {loop, "127.0.0.1:8081", "", http.StatusMisdirectedRequest},
		"every interface, an IP":        {any4, ":8081", "192.0.2.7:8081", http.StatusOK},
		"every interface, localhost":    {any4, ":8081", "localhost:8081", http.StatusOK},
		"every interface, a name":       {any4, ":8081", "attacker.example:8081", http.StatusMisdirectedRequest},
		"every interface, other port":   {any4, ":8081", "192.0.2.7:80", http.StatusMisdirectedRequest},
		"LAN, configured name":          {lan, "admin.internal:8081", "admin.internal:8081", http.StatusOK},
		"LAN, bound IP":                 {lan, "admin.internal:8081", "10.0.0.5:8081", http.StatusOK},
		"LAN, localhost is not the LAN": {lan, "admin.internal:8081", "localhost:8081", http.StatusMisdirectedRequest},
		"LAN, another IP":               {lan, "admin.internal:8081", "10.0.0.6:8081", http.StatusMisdirectedRequest},
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g, err := httpguard.NewAdminGuard(tc.bound, tc.configured, []byte(goodToken))
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodGet, "/admin/v1/plugins", nil)
			r.Host = tc.host
			r.Header.Set("Authorization", "Bearer "+goodToken)
			w := httptest.NewRecorder()
			g.Wrap(ok).ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("Host %q: %d %s, want %d", tc.host, w.Code, w.Body, tc.want)
			}
		})
	}
}

// FuzzAdminGuard feeds hostile Host, Origin and Authorization values to
// the guard: it never panics, and lets a request through only with the
// token, no Origin, and a Host naming the loopback listener.
func FuzzAdminGuard(f *testing.F) {
	f.Add("127.0.0.1:8081", "", "Bearer "+goodToken)
	f.Add("localhost:8081", "", "Bearer "+goodToken+"\x00")
	f.Add("[::1]:8081", "null", "Bearer "+goodToken)
	f.Add("127.0.0.1:8081\xff", "", "Bearer \xff\xfe")
	f.Add("[:::8081", "", "Basic x")
	f.Add(":8081", "", "Bearer ")
	f.Add(strings.Repeat("a", 10000)+":8081", "", "Bearer "+strings.Repeat(goodToken, 100))
	g, err := httpguard.NewAdminGuard(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8081}, "127.0.0.1:8081", []byte(goodToken))
	if err != nil {
		f.Fatal(err)
	}
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	allowed := map[string]bool{"127.0.0.1:8081": true, "localhost:8081": true, "[::1]:8081": true}
	f.Fuzz(func(t *testing.T, host, origin, auth string) {
		r := httptest.NewRequest(http.MethodGet, "/admin/v1/plugins", nil)
		r.Host = host
		if origin != "" {
			r.Header["Origin"] = []string{origin}
		}
		r.Header["Authorization"] = []string{auth}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			return
		}
		tok, _ := strings.CutPrefix(auth, "Bearer ")
		if origin != "" || !allowed[strings.ToLower(host)] || strings.TrimSpace(tok) != goodToken || !strings.HasPrefix(auth, "Bearer ") {
			t.Fatalf("let through: Host %q Origin %q Authorization %q", host, origin, auth)
		}
	})
}
