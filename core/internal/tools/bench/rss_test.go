package bench

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// startSleep starts `sleep 30` as a child of the test process and kills it
// when the test ends.
func startSleep(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

func TestChildrenAndPeakRSS(t *testing.T) {
	t.Parallel()
	cmd := startSleep(t)
	pid := cmd.Process.Pid

	kids, err := Children(os.Getpid())
	if err != nil {
		t.Fatalf("Children: %v", err)
	}
	if !slices.Contains(kids, pid) {
		t.Errorf("Children(self) = %v, want it to hold sleep's pid %d", kids, pid)
	}
	if !slices.IsSorted(kids) {
		t.Errorf("Children(self) = %v, not sorted", kids)
	}
	if kids, err := Children(pid); err != nil || len(kids) != 0 {
		t.Errorf("Children(sleep) = %v, %v; want none", kids, err)
	}

	for _, p := range []int{os.Getpid(), pid} {
		hwm, err := PeakRSS(p)
		if err != nil {
			t.Fatalf("PeakRSS(%d): %v", p, err)
		}
		if hwm <= 0 || hwm%1024 != 0 {
			t.Errorf("PeakRSS(%d) = %d, want a positive number of KiB", p, hwm)
		}
	}
}

// deadPID returns a pid that no process has: a child that has been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatalf("run true: %v", err)
	}
	return cmd.Process.Pid
}

func TestRSSMissingProcess(t *testing.T) {
	t.Parallel()
	pid := deadPID(t)
	if _, err := PeakRSS(pid); err == nil {
		t.Errorf("PeakRSS(%d) of a reaped child: no error", pid)
	}
	if _, err := Children(pid); err == nil {
		t.Errorf("Children(%d) of a reaped child: no error", pid)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := WatchRSS(ctx, time.Millisecond, pid)
	cancel()
	<-w.Done()
	if p := w.Peaks(); len(p) != 0 {
		t.Errorf("Peaks() = %+v, want none", p)
	}
}

func TestParseStatPPID(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		in   string
		want int
		bad  bool
	}{
		"plain":        {in: "42 (sleep) S 7 42 7 0 -1", want: 7},
		"spaces":       {in: "42 (my prog) R 9 42 7 0 -1", want: 9},
		"parentheses":  {in: "42 (a) b (c)) S 11 42 7 0 -1", want: 11},
		"no paren":     {in: "42 sleep S 7", bad: true},
		"truncated":    {in: "42 (sleep) S", bad: true},
		"non-numeric":  {in: "42 (sleep) S x 1", bad: true},
		"empty":        {in: "", bad: true},
		"only a paren": {in: ")", bad: true},
	} {
		got, err := parseStatPPID([]byte(tc.in))
		if tc.bad {
			if err == nil {
				t.Errorf("%s: parseStatPPID(%q) = %d, want an error", name, tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: parseStatPPID(%q) = %d, %v; want %d", name, tc.in, got, err, tc.want)
		}
	}
}

// samplesAfter waits until w has completed more than n samples.
func samplesAfter(t *testing.T, w *RSSWatch, n int) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.samples > n
	}, "more than %d samples", n)
}

func sampleCount(w *RSSWatch) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.samples
}

func findPeak(peaks []ProcPeak, pid int) (ProcPeak, bool) {
	for _, p := range peaks {
		if p.PID == pid {
			return p, true
		}
	}
	return ProcPeak{}, false
}

func TestWatchRSS(t *testing.T) {
	t.Parallel()
	self := os.Getpid()
	// sh runs sleep in the background and waits, so sleep is a grandchild.
	sh := exec.Command("sh", "-c", "sleep 30 & wait")
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sh.Start(); err != nil {
		t.Fatalf("start sh: %v", err)
	}
	shPID := sh.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-shPID, syscall.SIGKILL) // the whole process group
		_ = sh.Wait()
	})
	var sleepPID int
	testenv.Eventually(t, 30*time.Second, func() bool {
		kids, _ := Children(shPID)
		for _, k := range kids {
			if readComm(k) == "sleep" {
				sleepPID = k
				return true
			}
		}
		return false
	}, "sh started sleep")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := WatchRSS(ctx, 5*time.Millisecond, self)

	// The first sample is taken before WatchRSS returns.
	peaks := w.Peaks()
	if len(peaks) == 0 || peaks[0].PID != self {
		t.Fatalf("Peaks()[0] = %+v, want the root %d first", peaks, self)
	}
	root := peaks[0]
	if root.PeakBytes <= 0 || root.Name == "" || root.Parent != os.Getppid() {
		t.Errorf("root = %+v, want a name, a peak and parent %d", root, os.Getppid())
	}
	shPeak, ok := findPeak(peaks, shPID)
	if !ok {
		t.Fatalf("Peaks() = %+v, want the child sh %d", peaks, shPID)
	}
	if shPeak.Name != "sh" || shPeak.Parent != self || shPeak.PeakBytes <= 0 || shPeak.Cmdline != "sh -c sleep 30 & wait" {
		t.Errorf("sh = %+v", shPeak)
	}
	sleepPeak, ok := findPeak(peaks, sleepPID)
	if !ok {
		t.Fatalf("Peaks() = %+v, want the grandchild sleep %d", peaks, sleepPID)
	}
	if sleepPeak.Name != "sleep" || sleepPeak.Parent != shPID || sleepPeak.PeakBytes <= 0 || sleepPeak.Cmdline != "sleep 30" {
		t.Errorf("sleep = %+v", sleepPeak)
	}
	// Children come after the root, sorted by name then pid.
	rest := peaks[1:]
	if !slices.IsSortedFunc(rest, func(a, b ProcPeak) int {
		if a.Name != b.Name {
			if a.Name < b.Name {
				return -1
			}
			return 1
		}
		return a.PID - b.PID
	}) {
		t.Errorf("Peaks()[1:] not sorted by name: %+v", rest)
	}

	// Processes that exit keep their last maximum.
	if err := syscall.Kill(-shPID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill sh: %v", err)
	}
	_ = sh.Wait()
	testenv.Eventually(t, 30*time.Second, func() bool {
		_, err := os.Stat("/proc/" + strconv.Itoa(sleepPID) + "/status")
		if err != nil {
			return true
		}
		m, _ := readMemStatus(sleepPID)
		return m.rss == 0 && m.hwm == 0 // a zombie waiting for init
	}, "sleep %d gone", sleepPID)
	samplesAfter(t, w, sampleCount(w))

	cancel()
	<-w.Done()
	final := w.Peaks()
	for _, want := range []ProcPeak{shPeak, sleepPeak} {
		got, ok := findPeak(final, want.PID)
		if !ok {
			t.Errorf("exited %s %d dropped from Peaks()", want.Name, want.PID)
			continue
		}
		if got.PeakBytes < want.PeakBytes || got.Name != want.Name {
			t.Errorf("exited %s: %+v, was %+v", want.Name, got, want)
		}
	}
	if err := w.Err(); err != nil {
		t.Errorf("Err() = %v", err)
	}
}

// TestWatchRSSConcurrent reads Peaks while the watcher samples, for the race
// detector.
func TestWatchRSSConcurrent(t *testing.T) {
	t.Parallel()
	startSleep(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := WatchRSS(ctx, time.Millisecond, os.Getpid(), os.Getpid())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sampleCount(w) < 20 {
			if p := w.Peaks(); len(p) == 0 || p[0].PID != os.Getpid() {
				t.Errorf("Peaks() = %+v, want the root first", p)
				return
			}
		}
	}()
	<-done
	cancel()
	<-w.Done()
	// A root given twice is listed once.
	n := 0
	for _, p := range w.Peaks() {
		if p.PID == os.Getpid() {
			n++
		}
	}
	if n != 1 {
		t.Errorf("root listed %d times, want once", n)
	}
}

// TestBackendCPU reads utime + stime after the command name (which may
// hold spaces and parentheses), and refuses a process that is not a
// PostgreSQL backend (this test's own).
func TestBackendCPU(t *testing.T) {
	t.Parallel()
	got, err := parseStatCPU([]byte("4242 (postgres: a (b) c) S 1 4242 4242 0 -1 4194560 300 0 0 0 125 31 0 0 20 0 1 0 100 0 0"))
	if err != nil || got != 156 {
		t.Errorf("parseStatCPU = %d, %v; want 156", got, err)
	}
	if _, err := parseStatCPU([]byte("4242 (x) S 1")); err == nil {
		t.Error("a short stat line: want an error")
	}
	if _, ok := backendCPU([]int{os.Getpid()}); ok {
		t.Error("backendCPU of the test process: want false, it is not postgres")
	}
}
