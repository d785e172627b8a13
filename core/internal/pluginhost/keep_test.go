package pluginhost

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSweepStaleKeepDirs: the keep directory of a host that died without
// Close goes; those of running hosts, ones being created and anything else
// stay.
func TestSweepStaleKeepDirs(t *testing.T) {
	t.Parallel()
	// A pid that no process has any more: a real process that exited.
	done := exec.Command(sinkVariant(t))
	_ = done.Run() // a plugin binary run by hand prints a notice and exits
	dead := done.Process.Pid

	parent := t.TempDir()
	mk := func(name, owner string) {
		t.Helper()
		dir := filepath.Join(parent, name)
		if err := os.MkdirAll(filepath.Join(dir, "abc"), 0o700); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(dir, keepOwnerFile), []byte(owner+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk(keepDirPrefix+"dead", strconv.Itoa(dead))
	mk(keepDirPrefix+"parent", strconv.Itoa(os.Getppid()))
	mk(keepDirPrefix+"self", strconv.Itoa(os.Getpid()))
	mk(keepDirPrefix+"creating", "")
	mk(keepDirPrefix+"garbage", "not a pid")
	mk("something-else", strconv.Itoa(dead))

	sweepStaleKeepDirs(parent)
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := []string{keepDirPrefix + "creating", keepDirPrefix + "garbage", keepDirPrefix + "parent", keepDirPrefix + "self", "something-else"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("entries after the sweep (-want +got):\n%s", diff)
	}
}
