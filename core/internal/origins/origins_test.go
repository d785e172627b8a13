package origins

import (
	"regexp"
	"strings"
	"testing"
)

// stored is the CHECK of tenant_origins.origin (migration 0055).
var stored = regexp.MustCompile(`^(https://([a-z0-9]([a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:.]+\])|http://(localhost|127\.[0-9.]+|\[::1\]))(:[1-9][0-9]{0,4})?$`)

func TestNormalize(t *testing.T) {
	good := map[string]string{
		"https://app.example.com":        "https://app.example.com",
		"HTTPS://App.Example.COM":        "https://app.example.com",
		"https://app.example.com:443":    "https://app.example.com",
		"https://app.example.com:8443":   "https://app.example.com:8443",
		"https://app.example.com.":       "https://app.example.com",
		"https://bücher.example":         "https://xn--bcher-kva.example",
		"https://BÜCHER.example":         "https://xn--bcher-kva.example",
		"https://xn--bcher-kva.example":  "https://xn--bcher-kva.example",
		"http://localhost:3000":          "http://localhost:3000",
		"http://localhost:80":            "http://localhost",
		"http://127.0.0.1:5173":          "http://127.0.0.1:5173",
		"http://[::1]:8080":              "http://[::1]:8080",
		"https://[2001:DB8:0:0::1]:8443": "https://[2001:db8::1]:8443",
		"https://192.0.2.10":             "https://192.0.2.10",
	}
	for in, want := range good {
		got, err := Normalize(in)
		if err != nil || got != want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", in, got, err, want)
		}
		if !Canonical(want) {
			t.Errorf("Canonical(%q) = false", want)
		}
	}
	bad := map[string]string{
		"":                                "empty",
		"null":                            "null",
		"NULL":                            "null",
		"app.example.com":                 "no scheme",
		"ftp://app.example.com":           "scheme",
		"https://app.example.com/":        "path",
		"https://app.example.com/inbox":   "path",
		"https://app.example.com?x":       "path",
		"https://app.example.com#x":       "path",
		"https://user:pw@app.example.com": "user info",
		"https://*.example.com":           "wildcard",
		"*":                               "no scheme",
		"https://app.example.com:0":       "port",
		"https://app.example.com:65536":   "port",
		"https://app.example.com:080":     "port",
		"https://app.example.com:x":       "port",
		"https://app.example.com:":        "port",
		"http://app.example.com":          "http is allowed for localhost only",
		"http://10.0.0.1:8080":            "http is allowed for localhost only",
		"https://":                        "no host",
		"https://app\x00.example.com":     "U+0000",
		"https://app.example.com\n":       "U+000A",
		"https://a b.example.com":         "U+0020",
		"https://\xff.example.com":        "UTF-8",
		"https://exa_mple.com":            "not a domain name",
		"https://intranet":                "not a domain name",
		"https://1.2.3":                   "neither a name",
		"https://0x7f.1":                  "neither a name",
		"https://[fe80::1%25eth0]":        "IPv6",
		"https://::1":                     "not a domain name",
		"https://" + strings.Repeat("a", 300) + ".com": "bytes",
	}
	for in, want := range bad {
		got, err := Normalize(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Normalize(%q) = %q, %v; want an error saying %q", in, got, err, want)
		}
		if Canonical(in) {
			t.Errorf("Canonical(%q) = true", in)
		}
	}
	for _, h := range []string{"HTTPS://app.example.com", "https://app.example.com/", "https://app.example.com:443", "https://bücher.example"} {
		if Canonical(h) {
			t.Errorf("Canonical(%q) = true; a browser never sends it", h)
		}
	}
}

// FuzzNormalize checks that whatever Normalize accepts is canonical (a
// second pass changes nothing), short enough for the database, and free of
// what a header or a CSP source must not hold.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"https://app.example.com", "http://[::1]:80", "https://bücher.example:443", "null", "https://a.b/c", "https://a@b.c", "https://[::ffff:1.2.3.4]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Normalize(s)
		if err != nil {
			return
		}
		if again, err := Normalize(n); err != nil || again != n {
			t.Fatalf("Normalize(%q) = %q, but Normalize(%q) = %q, %v", s, n, n, again, err)
		}
		if len(n) > MaxLen || !stored.MatchString(n) {
			t.Fatalf("Normalize(%q) = %q, which the database's check (tenant_origins_origin) refuses", s, n)
		}
		if strings.ContainsAny(n[strings.Index(n, "://")+3:], " ;,'\"\x00/?#@*\\") {
			t.Fatalf("Normalize(%q) = %q holds a character a CSP source or header must not", s, n)
		}
	})
}
