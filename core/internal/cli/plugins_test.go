package cli

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/testenv"
)

func TestPluginsLsAndReload(t *testing.T) {
	t.Parallel()
	dir := testenv.PluginBinaries(t, "sink")
	h, err := pluginhost.New(pluginhost.Config{Dir: dir, Logger: hclog.NewNullLogger(), WatchInterval: -1,
		Channels: []rules.ChannelConfig{
			{Name: "TEST", Providers: []rules.Provider{{Plugin: "sink", Name: "primary"}}},
			{Name: "PINNED", Providers: []rules.Provider{{Plugin: "sink", Checksum: strings.Repeat("0", 64)}}},
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
	if f := strings.Fields(lines[0]); strings.Join(f, " ") != "NAME VERSION CHANNEL PROVIDER STATE PID UPTIME RESTARTS LAST ERROR" {
		t.Errorf("header = %q", lines[0])
	}
	// Channels are sorted: PINNED, then TEST.
	if !regexp.MustCompile(`^sink\s+-\s+PINNED\s+sink\s+refused\s+-\s+-\s+0\s+checksum mismatch`).MatchString(lines[1]) {
		t.Errorf("refused row = %q", lines[1])
	}
	pid := h.Status()[1].PID
	if !regexp.MustCompile(`^sink\s+1\.0\.0\s+TEST\s+primary\s+serving\s+` + strconv.Itoa(pid) + `\s+\d+s\s+0\s+-$`).MatchString(lines[2]) {
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
