package cli

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/testenv"
)

func TestPluginsLsAndReload(t *testing.T) {
	t.Parallel()
	dir := testenv.PluginBinaries(t, "sink")
	h, err := pluginhost.New(pluginhost.Config{Dir: dir, Logger: hclog.NewNullLogger(), WatchInterval: -1,
		Channels: []channel.Config{
			{Name: "TEST", Providers: []channel.Provider{{Plugin: "sink", Name: "primary"}}},
			{Name: "PINNED", Providers: []channel.Provider{{Plugin: "sink", Checksum: strings.Repeat("0", 64)}}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(pluginhost.AdminHandler(h))
	defer srv.Close()

	out, stderr, code := runHerald(t, "plugins", "ls", "--admin-url", srv.URL)
	if code != 0 {
		t.Fatalf("plugins ls: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("plugins ls printed %d lines, want header + 2:\n%s", len(lines), out)
	}
	if f := strings.Fields(lines[0]); strings.Join(f, " ") != "NAME VERSION CHANNEL PROVIDER STATE PID UPTIME RESTARTS CAPABILITIES LAST ERROR" {
		t.Errorf("header = %q", lines[0])
	}
	// Channels are sorted: PINNED, then TEST.
	if !regexp.MustCompile(`^sink\s+-\s+PINNED\s+sink\s+refused\s+-\s+-\s+0\s+-\s+checksum mismatch`).MatchString(lines[1]) {
		t.Errorf("refused row = %q", lines[1])
	}
	pid := h.Status()[1].PID
	if !regexp.MustCompile(`^sink\s+1\.0\.0\s+TEST\s+primary\s+serving\s+` + strconv.Itoa(pid) + `\s+\d+s\s+0\s+idempotency_key\s+-$`).MatchString(lines[2]) {
		t.Errorf("serving row = %q", lines[2])
	}

	out, stderr, code = runHerald(t, "plugins", "reload", "TEST/primary", "--admin-url", srv.URL)
	if code != 0 {
		t.Fatalf("plugins reload: exit %d: %s", code, stderr)
	}
	newPID := h.Status()[1].PID
	if newPID == pid || out != "reloaded TEST/primary: serving version 1.0.0 pid "+strconv.Itoa(newPID)+"\n" {
		t.Errorf("reload printed %q (old pid %d, new %d)", out, pid, newPID)
	}

	if _, stderr, code := runHerald(t, "plugins", "reload", "nope", "--admin-url", srv.URL); code == 0 || !strings.Contains(stderr, "unknown plugin") {
		t.Errorf("reload of unknown plugin: exit %d: %s", code, stderr)
	}
	if _, stderr, code := runHerald(t, "plugins", "ls", "--admin-url", "http://127.0.0.1:1"); code == 0 || !strings.Contains(stderr, "is herald serve running") {
		t.Errorf("unreachable admin API: exit %d: %s", code, stderr)
	}
}

// TestPluginsAdminToken runs `herald plugins ls` against the daemon's
// admin server with a token: refused without it or with a wrong one, and
// served when the token file comes from --admin-token-file,
// HERALD_ADMIN_TOKEN_FILE or the daemon config (which also gives the
// address).
func TestPluginsAdminToken(t *testing.T) {
	t.Setenv("HERALD_ADMIN_URL", "")
	t.Setenv("HERALD_ADMIN_TOKEN_FILE", "")
	t.Setenv("HERALD_CONFIG", "")
	h, err := pluginhost.New(pluginhost.Config{Dir: t.TempDir(), WatchInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin.token")
	const token = "cli-test-token-0123456789abcdef"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrongFile := filepath.Join(dir, "wrong.token")
	if err := os.WriteFile(wrongFile, []byte("not-the-token-0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := config.DefaultDaemon().HTTP
	c.AdminListen = "127.0.0.1:0"
	srv, ln, err := server.NewAdminServer(server.AdminHandler(h, func() error { return nil }, false), c, []byte(token), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String()
	cfgPath := filepath.Join(dir, "herald.hcl")
	cfg := fmt.Sprintf("http {\n  admin_listen     = %q\n  admin_token_file = \"admin.token\"\n}\n", ln.Addr().String())
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	const header = "NAME  VERSION  CHANNEL  PROVIDER  STATE  PID  UPTIME  RESTARTS  CAPABILITIES  LAST ERROR\n"

	if _, stderr, code := runHerald(t, "plugins", "ls", "--admin-url", url); code == 0 || !strings.Contains(stderr, "admin token") ||
		!strings.Contains(stderr, "--admin-token-file") {
		t.Errorf("no token: exit %d: %s", code, stderr)
	}
	if _, stderr, code := runHerald(t, "plugins", "ls", "--admin-url", url, "--admin-token-file", wrongFile); code == 0 || !strings.Contains(stderr, "admin token") {
		t.Errorf("wrong token: exit %d: %s", code, stderr)
	}
	if out, stderr, code := runHerald(t, "plugins", "ls", "--admin-url", url, "--admin-token-file", tokenFile); code != 0 || out != header {
		t.Errorf("--admin-token-file: exit %d: %q %s", code, out, stderr)
	}
	if out, stderr, code := runHerald(t, "plugins", "ls", "--config", cfgPath); code != 0 || out != header {
		t.Errorf("--config: exit %d: %q %s", code, out, stderr)
	}
	t.Setenv("HERALD_ADMIN_TOKEN_FILE", tokenFile)
	if out, stderr, code := runHerald(t, "plugins", "ls", "--admin-url", url); code != 0 || out != header {
		t.Errorf("HERALD_ADMIN_TOKEN_FILE: exit %d: %q %s", code, out, stderr)
	}
	if err := os.Chmod(tokenFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runHerald(t, "plugins", "ls", "--admin-url", url); code != 2 || !strings.Contains(stderr, "chmod 600") {
		t.Errorf("token file readable by others: exit %d: %s", code, stderr)
	}
}
