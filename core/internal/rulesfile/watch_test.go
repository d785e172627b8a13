package rulesfile

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/testenv"
)

func rulesWithEvents(types ...string) string {
	var b strings.Builder
	b.WriteString("channel \"WEBSOCKET\" {\n  providers = [{ plugin = \"websocket\" }]\n}\n")
	for _, t := range types {
		b.WriteString("event \"" + t + "\" {\n  audience {\n    user_type = \"ADMIN\"\n  }\n  mandatory = [\"WEBSOCKET\"]\n}\n")
	}
	return b.String()
}

// replaceFile writes a file the way editors do: a temporary file renamed
// over the old one.
func replaceFile(t *testing.T, path, body string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newTestWatcher(t *testing.T, paths []string) (*Watcher, *testenv.LogBuffer) {
	t.Helper()
	logs := &testenv.LogBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
	w, err := NewWatcher(paths, logger)
	if err != nil {
		t.Fatal(err)
	}
	w.Debounce = 50 * time.Millisecond
	return w, logs
}

func TestRulesWatcherFollowsEdits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "herald.hcl")
	replaceFile(t, path, rulesWithEvents("A"))
	w, logs := newTestWatcher(t, []string{filepath.Join(dir, "*.hcl")})

	var mu sync.Mutex
	var changes []*rules.RuleSet
	w.OnChange(func(rs *rules.RuleSet) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, rs)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	// The watch is in place once Run has logged the directory.
	testenv.Eventually(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), "watching rules directory") }, "watcher did not start")

	// An edit takes effect.
	replaceFile(t, path, rulesWithEvents("A", "B"))
	testenv.Eventually(t, 5*time.Second, func() bool {
		return slices.Equal(w.Current().EventTypes(), []string{"A", "B"})
	}, "edit not picked up; logs:\n%s", logs.String())
	mu.Lock()
	if len(changes) == 0 || changes[len(changes)-1] != w.Current() {
		t.Error("OnChange not called with the new rule set")
	}
	mu.Unlock()

	// A broken edit is rejected: the error is logged, the old rules stay.
	good := w.Current()
	replaceFile(t, path, rulesWithEvents("A", "B")+"event \"C\" {\n  mandatory = [\"SMOKE_SIGNAL\"]\n}\n")
	testenv.Eventually(t, 5*time.Second, func() bool {
		return strings.Contains(logs.String(), "rules reload rejected")
	}, "broken edit not reported; logs:\n%s", logs.String())
	if w.Current() != good {
		t.Fatal("a broken edit replaced the rules")
	}
	for _, want := range []string{`rule="event \"C\""`, "field=mandatory", `channel \"SMOKE_SIGNAL\" has no channel block`, "line=17"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}

	// A new file matching the glob is picked up too.
	replaceFile(t, filepath.Join(dir, "more.hcl"), "event \"D\" {\n  audience {\n    user_type = \"ADMIN\"\n  }\n  mandatory = [\"WEBSOCKET\"]\n}\n")
	replaceFile(t, path, rulesWithEvents("A", "B"))
	testenv.Eventually(t, 5*time.Second, func() bool {
		return slices.Equal(w.Current().EventTypes(), []string{"A", "B", "D"})
	}, "new file not picked up; logs:\n%s", logs.String())
}

func TestRulesWatcherReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "herald.yaml")
	write := func(body string) {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("channel:\n  WEBSOCKET: {providers: [{plugin: websocket}]}\nevent:\n  A: {audience: [{user_type: ADMIN}], mandatory: [WEBSOCKET]}\n")
	w, logs := newTestWatcher(t, []string{path})

	// SIGHUP-style reload without Run.
	write("channel:\n  WEBSOCKET: {providers: [{plugin: websocket}]}\nevent:\n  B: {audience: [{user_type: ADMIN}], mandatory: [WEBSOCKET]}\n")
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := w.Current().EventTypes(); !slices.Equal(got, []string{"B"}) {
		t.Fatalf("after Reload: %v, want [B]", got)
	}

	good := w.Current()
	write("event:\n  B: {audience: [{user_type: ADMIN}], mandatory: [WEBSOCKET], colour: red}\n")
	err := w.Reload()
	if err == nil {
		t.Fatal("Reload of a broken file: no error")
	}
	if w.Current() != good {
		t.Fatal("a broken reload replaced the rules")
	}
	if !strings.Contains(logs.String(), `field=colour error="unknown field \"colour\""`) {
		t.Errorf("log lacks the unknown field:\n%s", logs.String())
	}
	st := w.Status()
	if st.State != "stale" || st.RejectedAt == nil || st.ProblemCount != 2 || len(st.Problems) != 2 ||
		!strings.Contains(st.Problems[0], `unknown field "colour"`) {
		t.Errorf("status after a rejected reload: %+v", st)
	}

	// A file truncated to nothing, or to comments, is rejected too.
	for _, body := range []string{"", "# emptied by a bad deploy\n"} {
		write(body)
		if err := w.Reload(); err == nil || !strings.Contains(err.Error(), "empty rules file") {
			t.Errorf("Reload of %q: %v, want an empty rules file error", body, err)
		}
		if w.Current() != good || w.Status().State != "stale" {
			t.Errorf("Reload of %q replaced the rules or cleared the stale state", body)
		}
	}

	// A good reload makes the rules current again.
	write("channel:\n  WEBSOCKET: {providers: [{plugin: websocket}]}\nevent:\n  C: {audience: [{user_type: ADMIN}], mandatory: [WEBSOCKET]}\n")
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if st := w.Status(); st.State != "current" || st.RejectedAt != nil || len(st.Problems) != 0 || st.LoadedAt.IsZero() {
		t.Errorf("status after a good reload: %+v", st)
	}
}

func TestNewRulesWatcherRefusesBrokenRules(t *testing.T) {
	t.Parallel()
	dir := writeRulesFiles(t, map[string]string{"a.hcl": "event \"X\" {\n  mandatory = [\"NOPE\"]\n}\n"})
	if _, err := NewWatcher([]string{filepath.Join(dir, "a.hcl")}, nil); err == nil {
		t.Fatal("got no error")
	}
}

func TestRulesWatcherConcurrentReads(t *testing.T) {
	t.Parallel()
	dir := writeRulesFiles(t, map[string]string{"a.hcl": rulesWithEvents("A")})
	w, _ := newTestWatcher(t, []string{filepath.Join(dir, "a.hcl")})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if rs := w.Current(); rs == nil || len(rs.EventTypes()) == 0 {
					t.Error("Current returned no rules")
					return
				}
				if i == 0 {
					_ = w.Reload()
				}
			}
		}()
	}
	wg.Wait()
}
