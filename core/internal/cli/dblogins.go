package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/heraldhq/herald/core/internal/secret"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
)

// poolLogin is one pool's login role that `herald db roles` sets up: the
// role api_url (or admin_url) logs in as, a member of group only.
type poolLogin struct {
	key, url, group string
}

// ensurePoolLogin creates or checks the login role l.url names (its user)
// and sets its password: the one l.url gives; else the one the passfile
// holds (the URL's passfile parameter, PGPASSFILE or ~/.pgpass), unless
// rotate; else, when l.url names a passfile, a new random one, written
// there first (mode 0600, atomically, the file's owner kept). The password
// reaches the server only as a SCRAM verifier and is never printed. It
// reports what it did on out.
func ensurePoolLogin(ctx context.Context, conn *pgx.Conn, l poolLogin, owner string, rotate bool, out io.Writer) error {
	if l.url == "" {
		fmt.Fprintf(out, "%s is empty: that pool would log in as database.url's role, which herald serve refuses unless database.allow_owner_login = true\n", l.key)
		return nil
	}
	cfg, err := pgx.ParseConfig(l.url)
	if err != nil {
		return &ExitError{Code: 2, Err: fmt.Errorf("%s: %w", l.key, err)}
	}
	user := cfg.User
	if user == owner {
		return &ExitError{Code: 2, Err: fmt.Errorf("%s logs in as %q, the tables' owner: give it a user of its own, such as %s_login", l.key, user, l.group)}
	}
	passfile := urlPassfile(l.url)
	password, how := secret.URLPassword(l.url), "the password "+l.key+" gives"
	switch {
	case password != "":
	case cfg.Password != "" && !rotate:
		password, how = cfg.Password, "the password the passfile holds"
	case passfile != "":
		if password, err = store.NewLoginPassword(); err != nil {
			return err
		}
		if err := writePassfileEntry(passfile, user, password); err != nil {
			return fmt.Errorf("%s: %w", l.key, err)
		}
		how = "a new password, written to " + passfile
	default:
		how = "no password set (" + l.key + " gives none and names no passfile: authenticate it by certificate or peer, or add ?passfile=PATH to the URL)"
	}
	var verifier string
	if password != "" {
		if verifier, err = store.LoginVerifier(password); err != nil {
			return &ExitError{Code: 2, Err: fmt.Errorf("%s: %w", l.key, err)}
		}
	}
	if err := store.EnsureLoginRole(ctx, conn, user, l.group, verifier); err != nil {
		return fmt.Errorf("%s: %w", l.key, err)
	}
	fmt.Fprintf(out, "login %s (%s): a member of %s only; %s\n", user, l.key, l.group, how)
	return nil
}

// kvPassfile finds passfile=... in a libpq key/value string.
var kvPassfile = regexp.MustCompile(`(?:^|\s)passfile\s*=\s*(?:'((?:[^'\\]|\\.)*)'|(\S+))`)

// urlPassfile returns the passfile parameter of a connection URL or
// key/value string, "" when it names none.
func urlPassfile(raw string) string {
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil {
			return ""
		}
		return u.Query().Get("passfile")
	}
	if m := kvPassfile.FindStringSubmatch(raw); m != nil {
		if m[1] != "" {
			return strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(m[1])
		}
		return m[2]
	}
	return ""
}

// writePassfileEntry makes path's first line "*:*:*:user:password" and
// drops its earlier "*:*:*:user:" lines, keeping every other line. The new
// file replaces the old atomically, with mode 0600 and the old file's owner
// and group (so that root may update a file herald owns).
func writePassfileEntry(path, user, password string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("passfile: %w", err)
	}
	esc := strings.NewReplacer(`\`, `\\`, `:`, `\:`)
	prefix := "*:*:*:" + esc.Replace(user) + ":"
	var b strings.Builder
	b.WriteString(prefix + esc.Replace(password) + "\n")
	for line := range strings.Lines(string(old)) {
		if strings.HasPrefix(line, prefix) {
			continue
		}
		b.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			b.WriteString("\n")
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("passfile: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("passfile: %w", err)
	}
	if fi, err := os.Stat(path); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && (int(st.Uid) != os.Getuid() || int(st.Gid) != os.Getgid()) {
			if err := tmp.Chown(int(st.Uid), int(st.Gid)); err != nil {
				tmp.Close()
				return fmt.Errorf("passfile: keep the owner of %s: %w", path, err)
			}
		}
	}
	if _, err := tmp.WriteString(b.String()); err != nil {
		tmp.Close()
		return fmt.Errorf("passfile: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("passfile: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("passfile: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("passfile: %w", err)
	}
	return nil
}
