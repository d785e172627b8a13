package rulesfile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/rules"
)

// DefaultDebounce is how long Watcher.Run waits after the last
// change to a rules file before reloading: editors write a file in several
// steps (truncate, write, rename).
const DefaultDebounce = 200 * time.Millisecond

// Watcher serves the current rule set and replaces it when the rules
// files change. A new version that does not load is rejected with its
// errors logged, and the last good rule set keeps serving.
//
// Lifecycle: NewWatcher loads the files once (and fails if they are
// broken); Current is then always non-nil. Run watches the files until its
// context ends; Reload (what SIGHUP calls) reloads on demand.
type Watcher struct {
	paths  []string
	logger hclog.Logger

	// Debounce overrides DefaultDebounce; set it before Run.
	Debounce time.Duration

	current  atomic.Pointer[rules.RuleSet]
	mu       sync.Mutex // serialises reloads
	files    []string   // files of the last load attempt, guarded by mu
	onChange []func(*rules.RuleSet)
	status   atomic.Pointer[Status]
}

// MaxStatusProblems is how many problems Status lists.
const MaxStatusProblems = 20

// Status says whether the rules in force are what the files say. It
// is what the admin listener's readiness shows under "rules".
type Status struct {
	// State is "current" when the last load succeeded, "stale" when the
	// last reload was rejected and the last good rules still serve.
	State string `json:"state"`
	// LoadedAt is when the rules in force were loaded.
	LoadedAt time.Time `json:"loaded_at"`
	// RejectedAt is when the last reload was rejected (stale only).
	RejectedAt *time.Time `json:"rejected_at,omitempty"`
	// Problems are the rejected reload's errors (file:line: rule: field:
	// message), at most MaxStatusProblems; ProblemCount counts all.
	Problems     []string `json:"problems,omitempty"`
	ProblemCount int      `json:"problem_count,omitempty"`
}

// Status returns the state of the rules in force. It is safe for
// concurrent use.
func (w *Watcher) Status() Status {
	if st := w.status.Load(); st != nil {
		out := *st
		out.Problems = append([]string(nil), st.Problems...)
		return out
	}
	return Status{State: "current"}
}

// OnChange registers fn to be called with every newly installed rule set,
// after Current returns it. Callbacks run in the goroutine that reloads
// (Run's or Reload's caller), one reload at a time.
func (w *Watcher) OnChange(fn func(*rules.RuleSet)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onChange = append(w.onChange, fn)
}

// NewWatcher loads the rules files (paths may be globs) and returns a
// watcher serving them. It logs through logger as given (name it, e.g.
// logger.Named("rules")); nil discards the logs.
func NewWatcher(paths []string, logger hclog.Logger) (*Watcher, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	w := &Watcher{paths: append([]string(nil), paths...), logger: logger}
	rs, files, err := loadRulesFiles(w.paths)
	w.files = files
	if err != nil {
		return nil, err
	}
	w.current.Store(rs)
	w.status.Store(&Status{State: "current", LoadedAt: time.Now().UTC()})
	w.logger.Info("rules loaded", "files", len(files), "event_types", len(rs.EventTypes()), "channels", len(rs.Channels()))
	return w, nil
}

// Current returns the rule set in force. It is safe for concurrent use.
func (w *Watcher) Current() *rules.RuleSet { return w.current.Load() }

// Reload loads the rules files again. On success the new rule set replaces
// the current one; on failure every problem is logged, the current rule set
// stays, and the error (a Errors) is returned.
func (w *Watcher) Reload() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	rs, files, err := loadRulesFiles(w.paths)
	if len(files) > 0 {
		w.files = files
	}
	if err != nil {
		var errs Errors
		if errors.As(err, &errs) {
			for _, e := range errs {
				w.logger.Error("invalid rules", "file", e.File, "line", e.Line, "column", e.Column, "rule", e.Rule, "field", e.Field, "error", e.Msg)
			}
		} else {
			w.logger.Error("cannot load rules", "error", err)
		}
		w.logger.Warn("rules reload rejected; keeping the last good rules", "problems", max(len(errs), 1))
		now := time.Now().UTC()
		st := &Status{State: "stale", RejectedAt: &now, ProblemCount: max(len(errs), 1)}
		if prev := w.status.Load(); prev != nil {
			st.LoadedAt = prev.LoadedAt
		}
		if len(errs) == 0 {
			st.Problems = []string{err.Error()}
		}
		for _, e := range errs[:min(len(errs), MaxStatusProblems)] {
			st.Problems = append(st.Problems, e.Error())
		}
		w.status.Store(st)
		return err
	}
	w.current.Store(rs)
	w.status.Store(&Status{State: "current", LoadedAt: time.Now().UTC()})
	w.logger.Info("rules reloaded", "files", len(files), "event_types", len(rs.EventTypes()), "channels", len(rs.Channels()))
	for _, fn := range w.onChange {
		fn(rs)
	}
	return nil
}

// Run watches the directories holding the rules files (editors replace
// files, so watching the files themselves would lose them) and reloads,
// debounced, when a rules file is written, created, renamed or removed. It
// returns when ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("rules: watch: %w", err)
	}
	defer fw.Close()
	for _, dir := range w.watchDirs() {
		if err := fw.Add(dir); err != nil {
			return fmt.Errorf("rules: watch %s: %w", dir, err)
		}
		w.logger.Debug("watching rules directory", "dir", dir)
	}
	debounce := w.Debounce
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	timer := time.NewTimer(debounce)
	if !timer.Stop() {
		<-timer.C
	}
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("rules: watcher closed")
			}
			if ev.Op == fsnotify.Chmod || !w.relevant(ev.Name) {
				continue
			}
			w.logger.Debug("rules file changed", "file", ev.Name, "op", ev.Op.String())
			timer.Reset(debounce)
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("rules: watcher closed")
			}
			w.logger.Warn("watch error", "error", err)
		case <-timer.C:
			_ = w.Reload() // Reload logs its errors.
		}
	}
}

// watchDirs returns the directories of the patterns and of the files they
// matched, without duplicates.
func (w *Watcher) watchDirs() []string {
	w.mu.Lock()
	files := append([]string(nil), w.files...)
	w.mu.Unlock()
	seen := map[string]bool{}
	var dirs []string
	add := func(d string) {
		d = filepath.Clean(d)
		if seen[d] {
			return
		}
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			return
		}
		seen[d] = true
		dirs = append(dirs, d)
	}
	for _, p := range w.paths {
		dir := filepath.Dir(p)
		if strings.ContainsAny(dir, "*?[") {
			matches, _ := filepath.Glob(dir)
			for _, m := range matches {
				add(m)
			}
			continue
		}
		add(dir)
	}
	for _, f := range files {
		add(filepath.Dir(f))
	}
	sort.Strings(dirs)
	return dirs
}

// relevant reports whether a changed path is, or could become, a rules
// file: it matches a pattern or was loaded last time.
func (w *Watcher) relevant(name string) bool {
	name = filepath.Clean(name)
	for _, p := range w.paths {
		p = filepath.Clean(p)
		if p == name {
			return true
		}
		if ok, _ := filepath.Match(p, name); ok {
			return true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.files {
		if filepath.Clean(f) == name {
			return true
		}
	}
	return false
}
