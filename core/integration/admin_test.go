package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/pluginhost"
)

// TestAdminAPIToken runs a real `herald serve` whose admin API has a
// token file: requests without the token or with a wrong one are 401, from
// a browser page 403, for another Host 421; `herald plugins ls` finds the
// token through the daemon config; every answer of either listener
// carries nosniff and no-store.
func TestAdminAPIToken(t *testing.T) {
	e := newEnv(t, "sent")
	e.start()
	get := func(base, path string, header map[string]string, host string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("GET %s%s: security headers missing: %v", base, path, resp.Header)
		}
		return resp
	}
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	tests := []struct {
		name   string
		header map[string]string
		host   string
		want   int
	}{
		{"no token", nil, "", http.StatusUnauthorized},
		{"wrong token", bearer(e.adminToken + "0"), "", http.StatusUnauthorized},
		{"token", bearer(e.adminToken), "", http.StatusOK},
		{"browser page", map[string]string{"Authorization": "Bearer " + e.adminToken, "Origin": "https://evil.example"}, "", http.StatusForbidden},
		{"rebound name", bearer(e.adminToken), "evil.example:" + e.admin[strings.LastIndex(e.admin, ":")+1:], http.StatusMisdirectedRequest},
	}
	for _, tc := range tests {
		if resp := get(e.admin, pluginhost.AdminPluginsPath, tc.header, tc.host); resp.StatusCode != tc.want {
			t.Errorf("admin API, %s: %s, want %d", tc.name, resp.Status, tc.want)
		}
	}
	if resp := get(e.apiURL, "/healthz", nil, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("public /healthz: %s", resp.Status)
	}
	if resp := get(e.apiURL, "/v1/events/nope", nil, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("public API without a key: %s", resp.Status)
	}

	out, err := e.cli("plugins", "ls")
	if err != nil || !strings.Contains(out, "sink") {
		t.Fatalf("herald plugins ls (token from the daemon config): %v\n%s", err, out)
	}
	wrong := filepath.Join(e.dir, "wrong.token")
	if err := os.WriteFile(wrong, []byte("wrong-token-0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = e.cli("plugins", "ls", "--admin-token-file", wrong)
	if err == nil || !strings.Contains(out, "admin token") {
		t.Fatalf("herald plugins ls with a wrong token: %v\n%s", err, out)
	}
}

// TestServeRefusesUnsafeAdminAPI starts `herald serve` with an admin
// listener on every interface and no token file, then with a token file
// others can read: the daemon exits at once, naming the keys to fix.
func TestServeRefusesUnsafeAdminAPI(t *testing.T) {
	t.Parallel()
	bin := heraldBinary(t)
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose.token")
	if err := os.WriteFile(loose, []byte("loose-token-0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(dir, "rules.hcl")
	if err := os.WriteFile(rules, []byte(fmt.Sprintf(sinkRules, filepath.Join(dir, "sink.jsonl"), "sent")), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		http string
		want []string
	}{
		"every interface, no token": {
			fmt.Sprintf("listen = %q\n  admin_listen = %q", freePort(t), "0.0.0.0:"+strings.Split(freePort(t), ":")[1]),
			[]string{"http.admin_listen", "http.admin_token_file", "not a loopback address"},
		},
		"token file readable by others": {
			fmt.Sprintf("listen = %q\n  admin_listen = %q\n  admin_token_file = %q", freePort(t), freePort(t), loose),
			[]string{"http.admin_token_file", "chmod 600"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := filepath.Join(t.TempDir(), "herald.hcl")
			body := fmt.Sprintf("database { url = \"postgres://nobody@127.0.0.1:1/none\" }\nhttp {\n  %s\n}\nrules = [%q]\n", tc.http, rules)
			if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, "serve", "--config", cfg).CombinedOutput()
			if err == nil || ctx.Err() != nil {
				t.Fatalf("herald serve did not refuse to start (err %v):\n%s", err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output does not name %q:\n%s", w, out)
				}
			}
		})
	}
}
