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

// keeper holds verified copies of plugin binaries, named by content hash,
// in a directory private to the host: <dir>/<sha256>/herald-plugin-<name>.
// A hot swap that rejects a new binary leaves that file at the plugin's
// path; a restart after a crash then runs the kept copy of the last good
// version instead of the rejected file. Copies are reference counted by
// the providers whose last good binary they are, and removed when none
// is left.
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

// keep copies src, which must have SHA-256 sum, into the keeper and returns
// the copy's path; the caller releases it when it stops being the last good
// binary. A src that no longer has sum (replaced since it was launched) is
// not kept.
func (k *keeper) keep(src, plugin, sum string) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return "", errors.New("keep binary: plugin host closed")
	}
	if k.dir == "" {
		if k.cfgDir != "" {
			if err := os.MkdirAll(k.cfgDir, 0o700); err != nil {
				return "", fmt.Errorf("keep binary: %w", err)
			}
			k.dir = k.cfgDir
		} else {
			sweepStaleKeepDirs(os.TempDir())
			d, err := os.MkdirTemp("", keepDirPrefix)
			if err != nil {
				return "", fmt.Errorf("keep binary: %w", err)
			}
			if err := os.WriteFile(filepath.Join(d, keepOwnerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
				_ = os.RemoveAll(d)
				return "", fmt.Errorf("keep binary: %w", err)
			}
			k.dir, k.temp = d, true
		}
	}
	dst := filepath.Join(k.dir, sum, BinaryPrefix+plugin)
	if k.refs[dst] > 0 {
		k.refs[dst]++
		return dst, nil
	}
	if err := copyVerified(src, dst, sum); err != nil {
		return "", fmt.Errorf("keep binary %s: %w", src, err)
	}
	k.refs[dst] = 1
	return dst, nil
}

// copyVerified copies src to dst (through a temporary file and a rename)
// and checks that the bytes copied have SHA-256 sum.
func copyVerified(src, dst, sum string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".keep-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(tmp, h), in)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return fmt.Errorf("it changed since it was launched (sha256 %s, launched %s)", got, sum)
	}
	if err := os.Chmod(tmp.Name(), 0o700); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// release drops one reference to a kept copy and removes it when none is
// left.
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
	_ = os.RemoveAll(filepath.Dir(path))
}

// close removes every kept copy, and the directory when the keeper made it.
func (k *keeper) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for path := range k.refs {
		_ = os.RemoveAll(filepath.Dir(path))
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
