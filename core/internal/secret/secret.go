// Package secret resolves the secret references config values may hold and
// keeps secret values out of what Herald prints and logs.
//
// A config value (of the daemon config, or of a provider's config in a
// rules file) is read as:
//
//	env:NAME    the value of the environment variable NAME of the herald
//	            process; unset is an error (set but empty is the empty string)
//	file:PATH   the contents of the file PATH (relative paths are relative to
//	            the directory of the config or rules file that names it),
//	            without one trailing newline; unreadable is an error
//	raw:TEXT    TEXT itself: the escape for a literal that starts with
//	            "env:", "file:" or "raw:" ("raw:env:x" is the text "env:x")
//	anything    itself
//
// The prefixes are lower case and exact. References are resolved by the
// daemon when it loads its config and on every rules load and reload, so a
// plugin only ever sees the resolved value, and a rotated secret file takes
// effect at the next rules reload.
package secret

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Reference prefixes.
const (
	// PrefixEnv names an environment variable.
	PrefixEnv = "env:"
	// PrefixFile names a file.
	PrefixFile = "file:"
	// PrefixRaw escapes a literal.
	PrefixRaw = "raw:"
)

// MaxFileSize bounds a secret file: a bigger one is refused.
const MaxFileSize = 1 << 20

// Redacted replaces a secret wherever Herald would print it.
const Redacted = "[redacted]"

// MinRedactLen is the shortest secret value a Redactor replaces inside
// other text: shorter values would turn ordinary words into "[redacted]".
// Herald prints no secret field's value of any length; this bound only
// matters for text Herald does not compose itself, such as a plugin's own
// log lines.
const MinRedactLen = 8

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// sealed is the private copy of the environment SealEnvironment took; nil:
// env: references read the process environment.
var sealed struct {
	sync.Mutex
	env map[string]string
}

// SealEnvironment keeps a private copy of the process environment, which
// env: references read from then on, and removes from the process
// environment every variable whose name has one of prefixes (e.g.
// "HERALD_": the daemon's settings, database and broker URLs among them)
// and, from then on, every variable an env: reference reads. The daemon
// calls it once its config is loaded: a rules reload still resolves env:
// references, and what the process starts later (plugins, whose
// environment is allow-listed anyway) or a library that reads the
// environment does not find the secrets there. /proc/PID/environ shows
// the environment the process started with whatever it does; the daemon
// makes that unreadable to other processes of its user by being
// non-dumpable (see cli serve).
func SealEnvironment(prefixes ...string) {
	sealed.Lock()
	defer sealed.Unlock()
	if sealed.env == nil {
		sealed.env = map[string]string{}
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok {
				sealed.env[k] = v
			}
		}
	}
	for k := range sealed.env {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				_ = os.Unsetenv(k)
			}
		}
	}
}

// lookupEnv reads name from the sealed copy (removing it from the process
// environment) or, before SealEnvironment, from the process environment.
func lookupEnv(name string) (string, bool) {
	sealed.Lock()
	defer sealed.Unlock()
	if sealed.env == nil {
		return os.LookupEnv(name)
	}
	v, ok := sealed.env[name]
	if ok {
		_ = os.Unsetenv(name)
	}
	return v, ok
}

// IsReference reports whether v is an env: or file: reference.
func IsReference(v string) bool {
	return strings.HasPrefix(v, PrefixEnv) || strings.HasPrefix(v, PrefixFile)
}

// Resolve returns the value v stands for (see the package doc): the
// environment variable of an env: reference, the contents of a file:
// reference (relative to baseDir), the text after raw:, or v itself. ref
// reports whether v was an env: or file: reference. The error never holds
// the secret; it names the reference.
func Resolve(v, baseDir string) (value string, ref bool, err error) {
	switch {
	case strings.HasPrefix(v, PrefixRaw):
		return v[len(PrefixRaw):], false, nil
	case strings.HasPrefix(v, PrefixEnv):
		name := v[len(PrefixEnv):]
		if err := checkEnvName(name); err != nil {
			return "", true, err
		}
		val, ok := lookupEnv(name)
		if !ok {
			return "", true, fmt.Errorf("%s: environment variable %s is not set", v, name)
		}
		return val, true, nil
	case strings.HasPrefix(v, PrefixFile):
		p, err := filePath(v, baseDir)
		if err != nil {
			return "", true, err
		}
		b, err := readLimited(p)
		if err != nil {
			return "", true, fmt.Errorf("%s: cannot read %s: %s", v, p, pathErr(err))
		}
		s := string(b)
		s = strings.TrimSuffix(s, "\n")
		s = strings.TrimSuffix(s, "\r")
		return s, true, nil
	}
	return v, false, nil
}

// Check checks the syntax of a reference without reading the environment
// or the file, for tools that check config on a machine that does not hold
// the secrets.
func Check(v string) error {
	switch {
	case strings.HasPrefix(v, PrefixEnv):
		return checkEnvName(v[len(PrefixEnv):])
	case strings.HasPrefix(v, PrefixFile):
		_, err := filePath(v, "")
		return err
	}
	return nil
}

func checkEnvName(name string) error {
	if !envName.MatchString(name) {
		return fmt.Errorf("env:%s: want env:NAME with NAME an environment variable name (letters, digits, _), or raw:env:... for a literal", name)
	}
	return nil
}

func filePath(v, baseDir string) (string, error) {
	p := v[len(PrefixFile):]
	if p == "" {
		return "", errors.New("file: names no file (want file:/path/to/secret, or raw:file: for a literal)")
	}
	if !filepath.IsAbs(p) && baseDir != "" {
		p = filepath.Join(baseDir, p)
	}
	return p, nil
}

func readLimited(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("larger than %d bytes", MaxFileSize)
	}
	return b, nil
}

func pathErr(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// URLPassword returns the password of a URL ("scheme://user:pass@host/...")
// or of a libpq key/value string ("host=... password=..."), "" when it has
// none.
func URLPassword(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" {
		if p, ok := u.User.Password(); ok {
			return p
		}
		return ""
	}
	if m := kvPassword.FindStringSubmatch(raw); m != nil {
		if m[1] != "" {
			return strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(m[1])
		}
		return m[2]
	}
	return ""
}

var kvPassword = regexp.MustCompile(`(?:^|\s)password\s*=\s*(?:'((?:[^'\\]|\\.)*)'|(\S+))`)

// RedactURL returns a connection URL or libpq key/value string with its
// password replaced, for messages. An unparsable URL gives only its
// scheme, never the text.
func RedactURL(raw string) string {
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil {
			scheme, _, _ := strings.Cut(raw, "://")
			return scheme + "://" + Redacted
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		return u.String()
	}
	return kvPassword.ReplaceAllStringFunc(raw, func(m string) string {
		lead := m[:len(m)-len(strings.TrimLeft(m, " \t\n"))]
		return lead + "password=xxxxx"
	})
}

// Redactor replaces known secret values in text. The daemon keeps one:
// its log output goes through Writer, and the plugin host adds the values
// of every provider's secret fields before the plugin is configured, so
// neither Herald's own lines nor a plugin's re-emitted log lines carry them.
// A Redactor is safe for concurrent use; the zero value is not usable, call
// NewRedactor.
type Redactor struct {
	mu     sync.RWMutex
	values map[string]bool
	repl   *strings.Replacer
}

// NewRedactor returns an empty Redactor.
func NewRedactor() *Redactor {
	return &Redactor{values: map[string]bool{}}
}

// Add registers secret values. Values shorter than MinRedactLen are
// ignored (see MinRedactLen). The value is also registered as it appears
// quoted in text and JSON log lines.
func (r *Redactor) Add(values ...string) {
	if r == nil {
		return
	}
	var fresh []string
	for _, v := range values {
		if len(v) < MinRedactLen {
			continue
		}
		for _, f := range forms(v) {
			if len(f) >= MinRedactLen {
				fresh = append(fresh, f)
			}
		}
	}
	if len(fresh) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	for _, f := range fresh {
		if !r.values[f] {
			r.values[f] = true
			changed = true
		}
	}
	if !changed {
		return
	}
	all := make([]string, 0, len(r.values))
	for v := range r.values {
		all = append(all, v)
	}
	// Longest first, so that a secret containing another is replaced
	// whole.
	sort.Slice(all, func(i, j int) bool {
		if len(all[i]) != len(all[j]) {
			return len(all[i]) > len(all[j])
		}
		return all[i] < all[j]
	})
	pairs := make([]string, 0, 2*len(all))
	for _, v := range all {
		pairs = append(pairs, v, Redacted)
	}
	r.repl = strings.NewReplacer(pairs...)
}

// forms returns v as written raw, Go-quoted and JSON-encoded (with and
// without HTML escaping), each without the surrounding quotes.
func forms(v string) []string {
	out := []string{v}
	add := func(s string) {
		for _, o := range out {
			if o == s {
				return
			}
		}
		out = append(out, s)
	}
	q := strconv.Quote(v)
	add(q[1 : len(q)-1])
	if b, err := json.Marshal(v); err == nil {
		add(string(b[1 : len(b)-1]))
	}
	var sb strings.Builder
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) == nil {
		s := strings.TrimSuffix(sb.String(), "\n")
		add(s[1 : len(s)-1])
	}
	return out
}

// String returns s with every registered secret replaced by Redacted.
func (r *Redactor) String(s string) string {
	if r == nil {
		return s
	}
	r.mu.RLock()
	repl := r.repl
	r.mu.RUnlock()
	if repl == nil {
		return s
	}
	return repl.Replace(s)
}

// Writer returns a writer that redacts each Write before passing it to w.
// A secret split across two writes is not found: give it a writer whose
// callers write whole lines (hclog writes one entry per Write).
func (r *Redactor) Writer(w io.Writer) io.Writer {
	return &redactingWriter{r: r, w: w}
}

type redactingWriter struct {
	r *Redactor
	w io.Writer
}

func (rw *redactingWriter) Write(p []byte) (int, error) {
	rw.r.mu.RLock()
	repl := rw.r.repl
	rw.r.mu.RUnlock()
	if repl == nil {
		return rw.w.Write(p)
	}
	s := repl.Replace(string(p))
	if _, err := io.WriteString(rw.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}
