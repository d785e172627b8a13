package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// procRoot is where process information is read from.
const procRoot = "/proc"

// DaemonRSSTarget is the daemon's peak resident memory target (issue 30):
// the largest peak of one herald serve process over every run of a
// report, as PeakRSS and RSSWatch read it (VmHWM: the binary's code
// resident in memory counts too).
const DaemonRSSTarget int64 = 128 << 20

// defaultRSSInterval is the sampling interval when WatchRSS gets none.
const defaultRSSInterval = 100 * time.Millisecond

// ProcPeak is the peak resident memory seen for one process.
type ProcPeak struct {
	// PID is the process id.
	PID int `json:"pid"`
	// Name is the process name from /proc/<pid>/comm.
	Name string `json:"name"`
	// Cmdline is the command line, arguments separated by spaces.
	Cmdline string `json:"cmdline,omitempty"`
	// Parent is the parent's pid.
	Parent int `json:"parent"`
	// PeakBytes is the largest resident set size seen, in bytes.
	PeakBytes int64 `json:"peak_bytes"`
}

// memStatus holds the memory lines of /proc/<pid>/status, in bytes; zero
// when a line is missing (kernel threads and zombies have none).
type memStatus struct {
	rss, hwm int64
}

func readMemStatus(pid int) (memStatus, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "status"))
	if err != nil {
		return memStatus{}, err
	}
	var m memStatus
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			m.rss, err = parseKB(line[len("VmRSS:"):])
		case strings.HasPrefix(line, "VmHWM:"):
			m.hwm, err = parseKB(line[len("VmHWM:"):])
		default:
			continue
		}
		if err != nil {
			return memStatus{}, fmt.Errorf("pid %d status: %w", pid, err)
		}
	}
	return m, nil
}

// parseKB parses "   1234 kB" into bytes.
func parseKB(s string) (int64, error) {
	f := strings.Fields(s)
	if len(f) != 2 || f[1] != "kB" {
		return 0, fmt.Errorf("unexpected memory value %q", strings.TrimSpace(s))
	}
	kb, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("unexpected memory value %q: %w", strings.TrimSpace(s), err)
	}
	return kb * 1024, nil
}

// PeakRSS returns the peak resident set size (VmHWM in /proc/<pid>/status)
// of pid in bytes. It fails when the process does not exist or has no
// memory of its own (a zombie or a kernel thread).
func PeakRSS(pid int) (int64, error) {
	m, err := readMemStatus(pid)
	if err != nil {
		return 0, fmt.Errorf("peak rss: %w", err)
	}
	if m.hwm == 0 {
		return 0, fmt.Errorf("peak rss: pid %d has no VmHWM (exited or kernel thread)", pid)
	}
	return m.hwm, nil
}

// readPPID returns the parent pid from /proc/<pid>/stat.
func readPPID(pid int) (int, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	return parseStatPPID(b)
}

// parseStatPPID parses "pid (comm) state ppid ...". The command name may
// hold spaces and parentheses, so the fields start after the last ')'.
func parseStatPPID(b []byte) (int, error) {
	f, err := statFields(b, 2)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f[1])
}

// statFields returns the fields of a stat line after the command name
// (field 3, the state, first), at least n of them.
func statFields(b []byte, n int) ([]string, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, errors.New("malformed stat line")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < n {
		return nil, errors.New("malformed stat line")
	}
	return f, nil
}

// parentMap reads the parent of every process in /proc. Processes that exit
// during the scan are left out.
func parentMap() (map[int]int, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	ppids := make(map[int]int, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		ppid, err := readPPID(pid)
		if err != nil {
			continue
		}
		ppids[pid] = ppid
	}
	return ppids, nil
}

// Children returns the pids of pid's direct child processes, sorted. It
// fails when pid does not exist.
func Children(pid int) ([]int, error) {
	if _, err := os.Stat(filepath.Join(procRoot, strconv.Itoa(pid))); err != nil {
		return nil, fmt.Errorf("children of %d: %w", pid, err)
	}
	ppids, err := parentMap()
	if err != nil {
		return nil, fmt.Errorf("children of %d: %w", pid, err)
	}
	var kids []int
	for c, p := range ppids {
		if p == pid && c != pid {
			kids = append(kids, c)
		}
	}
	slices.Sort(kids)
	return kids, nil
}

// RSSWatch samples the current resident set size (VmRSS) of root processes
// and all their descendants every interval until its context is done, and
// keeps the maximum per process, keyed by pid, with the process's name from
// /proc/<pid>/comm and its command line. It also reads VmHWM when available
// and takes the larger value. Processes that exit keep their last maximum.
// A pid reused by a new process after the old one exited is counted as the
// same process. Start it with WatchRSS; it is safe for concurrent use.
type RSSWatch struct {
	roots []int
	done  chan struct{}

	mu      sync.Mutex
	procs   map[int]*ProcPeak
	samples int // completed samples, for tests
	lastErr error
}

// WatchRSS takes a first sample of roots (and their descendants) before it
// returns, then one every interval (100 ms when interval ≤ 0) until ctx is
// done, and a last one then.
func WatchRSS(ctx context.Context, interval time.Duration, roots ...int) *RSSWatch {
	if interval <= 0 {
		interval = defaultRSSInterval
	}
	w := &RSSWatch{roots: slices.Clone(roots), done: make(chan struct{}), procs: map[int]*ProcPeak{}}
	w.sample()
	go w.run(ctx, interval)
	return w
}

func (w *RSSWatch) run(ctx context.Context, interval time.Duration) {
	defer close(w.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			w.sample()
			return
		case <-t.C:
			w.sample()
		}
	}
}

// Done is closed once sampling has stopped (after ctx is done and the last
// sample is taken); Peaks is final from then on.
func (w *RSSWatch) Done() <-chan struct{} { return w.done }

// Err returns the error of the last sample that could not scan /proc, or nil.
func (w *RSSWatch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// sample takes one sample of the roots and their descendants.
func (w *RSSWatch) sample() {
	ppids, err := parentMap()
	if err != nil {
		w.mu.Lock()
		w.lastErr = fmt.Errorf("rss watch: %w", err)
		w.samples++
		w.mu.Unlock()
		return
	}
	kids := map[int][]int{}
	for c, p := range ppids {
		if c != p {
			kids[p] = append(kids[p], c)
		}
	}
	// Breadth-first from the roots; seen guards against a root that is
	// also a descendant of another root.
	seen := map[int]bool{}
	queue := make([]int, 0, len(w.roots))
	for _, r := range w.roots {
		if _, alive := ppids[r]; alive && !seen[r] {
			seen[r] = true
			queue = append(queue, r)
		}
	}
	type reading struct {
		pid, parent   int
		name, cmdline string
		bytes         int64
	}
	var readings []reading
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range kids[pid] {
			if !seen[c] {
				seen[c] = true
				queue = append(queue, c)
			}
		}
		m, err := readMemStatus(pid)
		if err != nil || (m.rss == 0 && m.hwm == 0) {
			continue // exited meanwhile, a zombie or a kernel thread
		}
		readings = append(readings, reading{
			pid: pid, parent: ppids[pid], name: readComm(pid), cmdline: readCmdline(pid),
			bytes: max(m.rss, m.hwm),
		})
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples++
	w.lastErr = nil
	for _, r := range readings {
		p := w.procs[r.pid]
		if p == nil {
			p = &ProcPeak{PID: r.pid}
			w.procs[r.pid] = p
		}
		// A child between fork and exec still carries its parent's name:
		// keep the latest name and command line seen.
		if r.name != "" {
			p.Name = r.name
		}
		if r.cmdline != "" {
			p.Cmdline = r.cmdline
		}
		p.Parent = r.parent
		p.PeakBytes = max(p.PeakBytes, r.bytes)
	}
}

func readComm(pid int) string {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readCmdline(pid int) string {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return ""
	}
	b = bytes.TrimRight(b, "\x00")
	return string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
}

// Peaks returns the peaks seen so far: the roots first, in the order given
// to WatchRSS, then the other processes by name and pid.
func (w *RSSWatch) Peaks() []ProcPeak {
	w.mu.Lock()
	defer w.mu.Unlock()
	rootIndex := make(map[int]int, len(w.roots))
	for i, r := range w.roots {
		if _, dup := rootIndex[r]; !dup {
			rootIndex[r] = i
		}
	}
	out := make([]ProcPeak, 0, len(w.procs))
	for _, p := range w.procs {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b ProcPeak) int {
		ia, aRoot := rootIndex[a.PID]
		ib, bRoot := rootIndex[b.PID]
		switch {
		case aRoot && bRoot:
			return ia - ib
		case aRoot:
			return -1
		case bRoot:
			return 1
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return a.PID - b.PID
	})
	return out
}

// clockTicks is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// every Linux architecture Go supports).
const clockTicks = 100

// backendCPU returns the CPU time (user and system) the PostgreSQL
// backends pids have used so far, read from /proc, and false when any of
// them cannot be read there or is not a postgres process (the server runs
// on another host or in another pid namespace).
func backendCPU(pids []int) (time.Duration, bool) {
	var ticks int64
	for _, pid := range pids {
		dir := filepath.Join(procRoot, strconv.Itoa(pid))
		if cmd, err := os.ReadFile(filepath.Join(dir, "cmdline")); err != nil || !bytes.HasPrefix(cmd, []byte("postgres")) {
			return 0, false
		}
		b, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			return 0, false
		}
		t, err := parseStatCPU(b)
		if err != nil {
			return 0, false
		}
		ticks += t
	}
	return time.Duration(ticks) * time.Second / clockTicks, true
}

// parseStatCPU parses utime + stime (fields 14 and 15) of a stat line.
func parseStatCPU(b []byte) (int64, error) {
	f, err := statFields(b, 13)
	if err != nil {
		return 0, err
	}
	u, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, err
	}
	s, err := strconv.ParseInt(f[12], 10, 64)
	return u + s, err
}
