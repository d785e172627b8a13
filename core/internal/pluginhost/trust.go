package pluginhost

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/sdk"
)

// permissionError says why the host does not trust a plugin binary or
// directory: someone other than the host's user (or root) could have
// written it. Retrying cannot fix it; the provider is refused.
type permissionError struct {
	path string
	msg  string
}

func (e *permissionError) Error() string { return e.path + ": " + e.msg }

// fileOwner returns the uid that owns the file info describes.
func fileOwner(info os.FileInfo) (int, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// checkTrusted refuses the file or directory path (info) when a user other
// than the host's could replace it: it must be owned by the host's user or
// root, and writable by neither its group nor others. what names it in the
// error ("plugin binary", "plugin directory").
func checkTrusted(what, path string, info os.FileInfo) error {
	mode := info.Mode()
	if uid, ok := fileOwner(info); ok && uid != os.Geteuid() && uid != 0 {
		return &permissionError{path: path, msg: fmt.Sprintf("%s is owned by uid %d, not by herald's user (uid %d) or root", what, uid, os.Geteuid())}
	}
	var who []string
	if mode.Perm()&0o020 != 0 {
		who = append(who, "its group")
	}
	if mode.Perm()&0o002 != 0 {
		who = append(who, "others")
	}
	if len(who) > 0 {
		return &permissionError{path: path, msg: fmt.Sprintf("%s is writable by %s (mode %s, %#o)", what, strings.Join(who, " and "), mode, mode.Perm())}
	}
	return nil
}

// checkDir refuses the plugin directory dir when it is not trusted.
func checkDir(dir string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	return checkTrusted("plugin directory", dir, info)
}

// checkBinary vets the plugin binary at path, opened as info: the file and,
// when path is a symbolic link, the directory holding the file it points
// to (the plugin directory itself is checked before).
func checkBinary(path string, info os.FileInfo) error {
	if err := checkTrusted("plugin binary", path, info); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	dir := filepath.Dir(real)
	if dir == filepath.Dir(path) {
		return nil
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if err := checkTrusted("directory of the file it links to", dir, st); err != nil {
		return fmt.Errorf("plugin binary %s links to %s: %w", path, real, err)
	}
	return nil
}

// DefaultEnv lists the variables of the host's environment that every
// plugin gets, when set: what programs need to find files, tell time,
// speak the locale, trust certificate authorities and size the Go
// runtime. The rest of the host's environment, which may hold the
// daemon's secrets (HERALD_DATABASE_URL and its password), is not passed;
// Config.Env names more. "LC_*" stands for every LC_ variable.
var DefaultEnv = []string{
	"PATH", "HOME", "TMPDIR", "TZ", "LANG", "LANGUAGE", "LC_*",
	"SSL_CERT_FILE", "SSL_CERT_DIR",
	"GOMAXPROCS", "GOMEMLIMIT", "GOGC",
}

// validEnvName checks a name of Config.Env: a plain variable name that is
// not one of the variables the host and go-plugin set for the plugin
// protocol, nor one of the daemon's own HERALD_ settings.
func validEnvName(name string) error {
	if name == "" {
		return fmt.Errorf("an empty variable name")
	}
	for i, r := range name {
		if r != '_' && (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (i == 0 || r < '0' || r > '9') {
			return fmt.Errorf("%q is not a variable name (letters, digits and _, not starting with a digit)", name)
		}
	}
	if strings.HasPrefix(name, "HERALD_") {
		return fmt.Errorf("%s: HERALD_* variables are the daemon's own settings and secrets (HERALD_DATABASE_URL holds a password) "+
			"and the plugin protocol's, and are never passed to plugins", name)
	}
	if strings.HasPrefix(name, "PLUGIN_") {
		return fmt.Errorf("%s: PLUGIN_* variables belong to the plugin protocol (go-plugin's) and are set by the host", name)
	}
	return nil
}

// pluginEnv is the whole environment of a plugin process, but for what
// go-plugin adds itself (the magic cookie, PLUGIN_PROTOCOL_VERSIONS, the
// port range and PLUGIN_CLIENT_CERT for AutoMTLS): the allowed variables
// of the host's environment (DefaultEnv and extra), then the ones the
// host sets for the sdk.
func pluginEnv(extra []string, level hclog.Level) []string {
	allowed := map[string]bool{}
	for _, n := range DefaultEnv {
		allowed[n] = true
	}
	for _, n := range extra {
		allowed[n] = true
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if allowed[name] || strings.HasPrefix(name, "LC_") {
			env = append(env, kv)
		}
	}
	return append(env,
		sdk.EnvHostPID+"="+strconv.Itoa(os.Getpid()),
		// launch passes the host pipe as the child's first extra file.
		sdk.EnvHostFD+"=3",
		sdk.EnvLogLevel+"="+level.String(),
	)
}
