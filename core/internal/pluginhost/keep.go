package pluginhost

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// keepDirPrefix starts the name of every temporary keep directory, and
// keepOwnerFile in it holds the owning process's pid, so that a later host
// can remove the directories of hosts that died without Close.
const (
	keepDirPrefix = "herald-plugins-verified-"
	keepOwnerFile = "owner.pid"
)

// errKeptCopyBad means a kept copy is gone or no longer has the checksum it
// was kept under; the provider forgets it.
var errKeptCopyBad = errors.New("kept copy of the last good binary is missing or changed")

// keptBinary is the kept copy of the last binary that passed a provider's
// launch (handshake, Describe, Configure, Health).
type keptBinary struct {
	// path is the copy's path in the keeper's directory.
	path string
	// sum is its SHA-256, hex.
	sum string
	// version is the PluginVersion it described.
	version string
}

// copyError is a failure of the keeper's own directory (missing, full,
// not private): the launch is retried with backoff.
type copyError struct {
	src string
	err error
}

func (e *copyError) Error() string { return "private copy of " + e.src + ": " + e.err.Error() }
func (e *copyError) Unwrap() error { return e.err }

// binCopy is one reference to a private copy of a plugin binary, made by
// keeper.copy: path is the copy (the file a plugin process executes) and
// stamp describes the source as read (its size and mtime when opened, the
// SHA-256 of the bytes copied).
type binCopy struct {
	path  string
	stamp fileStamp
}

// keeper holds the private copies of plugin binaries that plugin processes
// run, by content hash, in a directory only the host's user may write:
// <dir>/<sha256>/herald-plugin-<name>. A launch copies the binary there,
// hashing the bytes as it copies them, checks the pin against that hash
// and executes the copy, so what runs is exactly what was verified,
// whatever happens to the plugin directory meanwhile. The copy a provider
// last launched successfully is also its kept copy of the last good
// version: a hot swap that rejects a new binary leaves that file at the
// plugin's path, and a restart after a crash then runs the kept copy
// rather than the rejected file. Copies are reference counted (by the
// processes that run them and the providers whose last good binary they
// are) and removed when none is left.
type keeper struct {
	// cfgDir is Config.KeepDir ("" for a temporary directory).
	cfgDir string

	mu sync.Mutex
	// dir is the directory in use, once one exists.
	dir string
	// temp is set when dir was created by the keeper (Close removes it).
	temp   bool
	refs   map[string]int
	closed bool
}

func newKeeper(dir string) *keeper { return &keeper{cfgDir: dir, refs: map[string]int{}} }

// directory returns the keeper's directory, creating it on first use.
func (k *keeper) directory() (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return "", ErrClosed
	}
	if k.dir != "" {
		return k.dir, nil
	}
	if k.cfgDir != "" {
		if err := os.MkdirAll(k.cfgDir, 0o700); err != nil {
			return "", err
		}
		// The copies are what plugins run: nobody but the host's user
		// may be able to replace them.
		info, err := os.Stat(k.cfgDir)
		if err != nil {
			return "", err
		}
		if err := privateDir(k.cfgDir, info); err != nil {
			return "", err
		}
		k.dir = k.cfgDir
		return k.dir, nil
	}
	sweepStaleKeepDirs(os.TempDir())
	d, err := os.MkdirTemp("", keepDirPrefix)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(d, keepOwnerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		_ = os.RemoveAll(d)
		return "", err
	}
	k.dir, k.temp = d, true
	return d, nil
}

// privateDir checks that the directory dir (info) is owned by the host's
// user and writable by nobody else.
func privateDir(dir string, info os.FileInfo) error {
	if !info.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	uid, ok := fileOwner(info)
	if ok && uid != os.Geteuid() {
		return fmt.Errorf("directory %s for the plugins' private copies is owned by uid %d, not by the host's user (uid %d)", dir, uid, os.Geteuid())
	}
	if info.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("directory %s for the plugins' private copies is writable by group or others (mode %s)", dir, info.Mode())
	}
	return nil
}

// copy copies the binary src into the keeper as a copy of plugin's binary
// and returns a reference to it; the caller releases it when no process
// runs it any more. The bytes are hashed as they are copied, in one read of
// src, so binCopy.stamp.sum is the SHA-256 of exactly the copy. check, when
// not nil, vets src's file (opened, not looked up again) before anything is
// read; its error is returned as it is.
func (k *keeper) copy(src, plugin string, check func(path string, info os.FileInfo) error) (binCopy, error) {
	dir, err := k.directory()
	if err != nil {
		return binCopy{}, &copyError{src: src, err: err}
	}
	in, err := os.Open(src)
	if err != nil {
		return binCopy{}, err
	}
	defer in.Close()
	// The stat of the open file, taken before reading: a later change of
	// the file in place shows as a new mtime, never as this stamp.
	info, err := in.Stat()
	if err != nil {
		return binCopy{}, err
	}
	if !info.Mode().IsRegular() {
		return binCopy{}, fmt.Errorf("%s is not a regular file (mode %s)", src, info.Mode())
	}
	if check != nil {
		if err := check(src, info); err != nil {
			return binCopy{}, err
		}
	}
	tmp, sum, err := writeCopy(dir, in)
	if err != nil {
		return binCopy{}, &copyError{src: src, err: err}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		_ = os.Remove(tmp)
		return binCopy{}, ErrClosed
	}
	sub := filepath.Join(dir, sum)
	dst := filepath.Join(sub, BinaryPrefix+plugin)
	if err := os.MkdirAll(sub, 0o700); err != nil {
		_ = os.Remove(tmp)
		return binCopy{}, &copyError{src: src, err: err}
	}
	// A copy in use has the same bytes (it is named by their hash, and
	// nobody else can write the directory): the new one is not needed.
	// One removed behind the keeper's back is replaced.
	if info, err := os.Lstat(dst); k.refs[dst] > 0 && err == nil && info.Mode().IsRegular() {
		_ = os.Remove(tmp)
	} else if err := os.Rename(tmp, dst); err != nil {
		_ = os.Remove(tmp)
		return binCopy{}, &copyError{src: src, err: err}
	}
	k.refs[dst]++
	return binCopy{path: dst, stamp: fileStamp{size: info.Size(), modTime: info.ModTime(), sum: sum}}, nil
}

// writeCopy copies in to a new file in dir, mode 0500, and returns its
// path and the SHA-256 of the bytes written.
//
// No process may be forked while the copy is open for writing: a child
// inherits the descriptor until it calls exec, and executing a file that
// some process holds open for writing fails with ETXTBSY. Holding
// syscall.ForkLock for reading keeps os/exec (go-plugin launching other
// plugins) from forking meanwhile.
func writeCopy(dir string, in io.Reader) (path, sum string, err error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	out, err := os.CreateTemp(dir, ".copy-*")
	if err != nil {
		return "", "", err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(out.Name())
		}
	}()
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), in)
	if err == nil {
		err = out.Chmod(0o500)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", "", err
	}
	return out.Name(), hex.EncodeToString(h.Sum(nil)), nil
}

// ref takes one more reference to the copy at path, which the caller holds
// a reference to.
func (k *keeper) ref(path string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return ErrClosed
	}
	if k.refs[path] <= 0 {
		return fmt.Errorf("%s is not a copy in use", path)
	}
	k.refs[path]++
	return nil
}

// release drops one reference to a copy and removes it when none is left.
func (k *keeper) release(path string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.refs[path] <= 0 {
		return
	}
	k.refs[path]--
	if k.refs[path] > 0 {
		return
	}
	delete(k.refs, path)
	_ = os.Remove(path)
	// The directory goes with its last copy (another plugin's copy of the
	// same bytes keeps it).
	_ = os.Remove(filepath.Dir(path))
}

// close removes every copy, and the directory when the keeper made it.
func (k *keeper) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for path := range k.refs {
		_ = os.Remove(path)
		_ = os.Remove(filepath.Dir(path))
	}
	k.refs = map[string]int{}
	k.closed = true
	if k.temp {
		_ = os.RemoveAll(k.dir)
		k.dir, k.temp = "", false
	}
}

// sweepStaleKeepDirs removes the temporary keep directories in parent whose
// owning process is gone: a host killed with SIGKILL, or one that crashed,
// never ran Close, and a daemon restarted in a loop would otherwise leave a
// copy of every plugin binary behind at each start. A directory without an
// owner file (being created), or whose owner runs or cannot be checked, is
// left alone.
func sweepStaleKeepDirs(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), keepDirPrefix) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, keepOwnerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || pid == os.Getpid() || !processGone(pid) {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

// processGone reports whether no process pid exists (false when unsure,
// e.g. another user's process or a platform without signal 0).
func processGone(pid int) bool {
	proc, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return errors.Is(proc.Signal(syscall.Signal(0)), os.ErrProcessDone)
}
