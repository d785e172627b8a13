package pluginhost

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sandbox modes (Config.Sandbox).
const (
	// SandboxOff runs plugins with the daemon's view of the filesystem.
	SandboxOff = "off"
	// SandboxAuto confines plugins with Landlock where the kernel has it,
	// and runs them unconfined (with one warning) where it does not.
	SandboxAuto = "auto"
	// SandboxLandlock confines plugins with Landlock and refuses to start
	// them where the kernel lacks it.
	SandboxLandlock = "landlock"
)

// sandboxArg is the first argument that makes the daemon's executable the
// sandbox helper (SandboxMain) instead of itself.
const sandboxArg = "__herald-plugin-sandbox"

// SandboxReadable is what a sandboxed plugin may read (and execute) besides
// its own binary, its private temporary directory and its own /proc entry:
// the system's libraries, certificates and name service files. Missing
// paths are skipped.
var SandboxReadable = []string{
	"/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin",
	"/etc/ssl", "/etc/ca-certificates", "/etc/pki", "/etc/ca-certificates.conf",
	"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf",
	"/etc/localtime", "/etc/services", "/etc/protocols", "/etc/mime.types",
	"/dev/urandom", "/dev/random",
	"/sys/fs/cgroup", "/sys/kernel/mm/transparent_hugepage",
}

// SandboxWritable is what a sandboxed plugin may write besides its private
// temporary directory.
var SandboxWritable = []string{"/dev/null", "/dev/zero", "/dev/full"}

// LandlockABI returns the Landlock ABI version of the running kernel, 0
// when it has none (not built in, not enabled, or the call is refused).
func LandlockABI() int {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0
	}
	return int(v)
}

var landlockWarn sync.Once

// helperReady is set by SandboxMain: this executable, started again, acts
// as the sandbox helper. A program that does not call it (a test binary)
// cannot confine its plugins.
var helperReady atomic.Bool

// SandboxAvailable reports whether plugins started by this process can be
// confined: the kernel has Landlock and the program called SandboxMain.
func SandboxAvailable() bool { return helperReady.Load() && LandlockABI() >= 1 }

// sandboxed wraps cmd (a plugin binary's command, not started) so that the
// daemon's executable starts first as the sandbox helper, confines itself
// with Landlock to what the plugin needs (the paths of SandboxReadable and
// SandboxWritable, readable and writable, the plugin binary, tmp and its
// own /proc entry) and then executes the plugin in its place: same pid,
// same file descriptors, same environment. sum, when set, is the binary's
// hex SHA-256, which the helper checks before it executes it. It reports
// whether cmd was wrapped; mode auto without Landlock leaves cmd alone.
func (h *Host) sandboxed(cmd *exec.Cmd, tmp, sum string) (bool, error) {
	switch h.cfg.Sandbox {
	case "", SandboxOff:
		return false, nil
	}
	if !helperReady.Load() {
		if h.cfg.Sandbox == SandboxLandlock {
			return false, refused("plugins.sandbox is %q but this program cannot start the sandbox helper (it does not call pluginhost.SandboxMain)", SandboxLandlock)
		}
		landlockWarn.Do(func() {
			h.log.Warn("plugins run without a filesystem sandbox: this program does not call pluginhost.SandboxMain")
		})
		return false, nil
	}
	if LandlockABI() < 1 {
		if h.cfg.Sandbox == SandboxLandlock {
			return false, refused("plugins.sandbox is %q but this kernel has no Landlock (or it is not enabled: lsm= boot option)", SandboxLandlock)
		}
		landlockWarn.Do(func() {
			h.log.Warn("plugins run without a filesystem sandbox: this kernel has no Landlock (plugins.sandbox = auto); they can read what the daemon's user can")
		})
		return false, nil
	}
	self, err := os.Executable()
	if err != nil {
		return false, fmt.Errorf("sandbox: the daemon's executable: %w", err)
	}
	args := []string{self, sandboxArg, "exec=" + cmd.Path}
	if sum != "" {
		args = append(args, "sha256="+sum)
	}
	if tmp != "" {
		args = append(args, "rw="+tmp)
	}
	for _, p := range SandboxReadable {
		args = append(args, "ro="+p)
	}
	for _, p := range h.cfg.SandboxRead {
		args = append(args, "ro="+p)
	}
	for _, p := range SandboxWritable {
		args = append(args, "rw="+p)
	}
	for _, p := range h.cfg.SandboxWrite {
		args = append(args, "rw="+p)
	}
	args = append(args, "--")
	// go-plugin names the plugin's log lines after the file it starts:
	// a link named as the plugin, beside its temporary directory's
	// contents, keeps them "herald-plugin-NAME".
	start := self
	if tmp != "" {
		link := filepath.Join(tmp, filepath.Base(cmd.Path))
		if err := os.Symlink(self, link); err == nil {
			start = link
		}
	}
	args[0] = start
	cmd.Args = append(args, cmd.Args[1:]...)
	cmd.Path = start
	cmd.Err = nil
	return true, nil
}

// SandboxMain makes the process the sandbox helper when it was started as
// one (see sandboxed): it confines itself and executes the plugin, never
// returning. Otherwise it returns at once. The daemon's main (and a test
// binary's TestMain that starts sandboxed plugins) calls it first.
func SandboxMain() {
	if len(os.Args) < 2 || os.Args[1] != sandboxArg {
		helperReady.Store(true)
		return
	}
	err := sandboxExec(os.Args[2:])
	fmt.Fprintf(os.Stderr, "herald plugin sandbox: %v\n", err)
	os.Exit(1)
}

// Landlock rights (golang.org/x/sys/unix names them LANDLOCK_ACCESS_FS_*).
const (
	llFileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE
	llReadRights = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
)

// handledRights is every filesystem right the kernel's ABI knows: what the
// ruleset denies unless a rule allows it.
func handledRights(abi int) uint64 {
	r := uint64(unix.LANDLOCK_ACCESS_FS_MAKE_SYM<<1) - 1 // ABI 1: EXECUTE..MAKE_SYM
	if abi >= 2 {
		r |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		r |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		r |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	return r
}

func sandboxExec(args []string) error {
	var bin, sum string
	var ro, rw []string
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "exec":
			bin = v
		case "sha256":
			sum = v
		case "ro":
			ro = append(ro, v)
		case "rw":
			rw = append(rw, v)
		default:
			return fmt.Errorf("unknown argument %q", a)
		}
	}
	if bin == "" {
		return errors.New("no exec= argument")
	}
	// Landlock confines the calling thread and what it executes: every
	// step below runs on this one.
	runtime.LockOSThread()
	abi := LandlockABI()
	if abi < 1 {
		return errors.New("this kernel has no Landlock")
	}
	handled := handledRights(abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled}
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if e != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", e)
	}
	ruleset := int(fd)
	add := func(path string, dirRights uint64) error {
		pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		defer unix.Close(pfd)
		var st unix.Stat_t
		if err := unix.Fstat(pfd, &st); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		rights := dirRights & handled
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			rights &= llFileRights | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
		}
		rule := unix.LandlockPathBeneathAttr{Allowed_access: rights, Parent_fd: int32(pfd)}
		_, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH,
			uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
		if e != 0 {
			return fmt.Errorf("landlock_add_rule %s: %w", path, e)
		}
		return nil
	}
	for _, p := range ro {
		if err := add(p, llReadRights); err != nil {
			return err
		}
	}
	for _, p := range rw {
		if err := add(p, handled); err != nil {
			return err
		}
	}
	// Its own /proc entry (the plugin keeps this pid), not the daemon's.
	if err := add("/proc/"+strconv.Itoa(os.Getpid()), llReadRights); err != nil {
		return err
	}
	if err := add(bin, unix.LANDLOCK_ACCESS_FS_EXECUTE|unix.LANDLOCK_ACCESS_FS_READ_FILE); err != nil {
		return err
	}
	if sum != "" {
		got, err := fileSHA256(bin)
		if err != nil {
			return err
		}
		if got != sum {
			return fmt.Errorf("checksum mismatch: %s has sha256 %s, want %s", bin, got, sum)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0); e != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", e)
	}
	_ = unix.Close(ruleset)
	return unix.Exec(bin, append([]string{bin}, args...), os.Environ())
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lookupCredential returns the credential of the system user name: its
// uid, its primary group and no supplementary groups.
func lookupCredential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q: gid %q: %w", name, u.Gid, err)
	}
	if uid == 0 {
		return nil, fmt.Errorf("user %q is root: plugins would keep every privilege", name)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// confine prepares cmd, the command of the plugin binary bin (the kept
// copy, whose SHA-256 is sum): a private temporary directory (its TMPDIR,
// which cleanup removes) when plugins run sandboxed or as another user,
// the other user's credential (Config.User), and the Landlock helper
// (sandboxed). It reports whether the helper checks the binary's sum (so
// go-plugin, which would hash the helper, must not).
func (h *Host) confine(cmd *exec.Cmd, bin, sum string) (checksSum bool, cleanup func(), err error) {
	cleanup = func() {}
	var cred *syscall.Credential
	if h.cfg.User != "" {
		if os.Geteuid() != 0 {
			return false, cleanup, refused("plugins.user %q needs the daemon to run as root", h.cfg.User)
		}
		if cred, err = lookupCredential(h.cfg.User); err != nil {
			return false, cleanup, refused("plugins.user: %v", err)
		}
		// The other user executes the kept copy through the keeper's
		// directories, which stay writable by the daemon's user only.
		for _, p := range []string{filepath.Dir(filepath.Dir(bin)), filepath.Dir(bin)} {
			if err := os.Chmod(p, 0o711); err != nil {
				return false, cleanup, err
			}
		}
		if err := os.Chmod(bin, 0o555); err != nil {
			return false, cleanup, err
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if cred == nil && (h.cfg.Sandbox == "" || h.cfg.Sandbox == SandboxOff) {
		return false, cleanup, nil
	}
	tmp, err := os.MkdirTemp("", "herald-plugin-tmp-")
	if err != nil {
		return false, cleanup, err
	}
	cleanup = func() { _ = os.RemoveAll(tmp) }
	if cred != nil {
		if err := os.Chown(tmp, int(cred.Uid), int(cred.Gid)); err != nil {
			cleanup()
			return false, func() {}, err
		}
	}
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
	wrapped, err := h.sandboxed(cmd, tmp, sum)
	if err != nil {
		cleanup()
		return false, func() {}, err
	}
	return wrapped, cleanup, nil
}
