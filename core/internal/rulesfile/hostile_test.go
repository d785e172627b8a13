package rulesfile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// Hostile input runs in a child process (this test binary re-executed) so
// that a crash, a stack overflow or runaway memory fails one case with a
// clear message instead of killing the test run. The child caps its own
// stack and heap and reports its peak heap and total allocation.
const (
	hostileEnvFile = "HERALD_RULES_HOSTILE_FILE"
	// hostileHeapCap is the most heap the child may hold at once; above it
	// the watchdog kills the child. The loader needs a few MiB for these
	// inputs; the cap only has to catch ballooning.
	hostileHeapCap = 256 << 20
	// hostileAllocCap bounds everything the child allocates over its life.
	hostileAllocCap = 1 << 30
	// hostileDeadline is when a case counts as hung. It is a hang
	// detector, far above the milliseconds a case takes, not a speed test.
	hostileDeadline = 2 * time.Minute
)

type hostileReport struct {
	Err        string `json:"err"`
	PeakHeap   uint64 `json:"peak_heap"`
	TotalAlloc uint64 `json:"total_alloc"`
}

// TestRulesHostileHelper is the child: it loads the file named by
// HERALD_RULES_HOSTILE_FILE and prints a hostileReport. It does nothing in
// a normal run.
func TestRulesHostileHelper(t *testing.T) {
	path := os.Getenv(hostileEnvFile)
	if path == "" {
		t.Skip("child process of TestRulesHostileInput only")
	}
	debug.SetMaxStack(64 << 20)
	debug.SetMemoryLimit(hostileHeapCap)
	var peak uint64
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			if ms.HeapInuse > hostileHeapCap || ms.TotalAlloc > hostileAllocCap {
				fmt.Printf("\nMEMORY CAP: heap in use %d, total allocated %d\n", ms.HeapInuse, ms.TotalAlloc)
				os.Exit(3)
			}
		}
	}()
	_, err := Load(path)
	close(done)
	<-stopped
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rep := hostileReport{PeakHeap: max(peak, ms.HeapInuse), TotalAlloc: ms.TotalAlloc}
	if err != nil {
		rep.Err = err.Error()
	}
	b, _ := json.Marshal(rep)
	fmt.Printf("\nREPORT %s\n", b)
}

func TestRulesHostileInput(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary per case")
	}
	example := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("../../../examples/rules", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	hclEx, yamlEx := example("herald.hcl"), example("herald.yaml")
	bomb := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	for i, prev := 'b', 'a'; i <= 'j'; i, prev = i+1, i {
		bomb += fmt.Sprintf("%c: &%c [*%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c]\n", i, i, prev, prev, prev, prev, prev, prev, prev, prev, prev, prev)
	}
	wide := "a: &a [" + strings.Repeat("x, ", 999) + "x]\nb: [" + strings.Repeat("*a, ", 999) + "*a]\n"
	var deepYAML strings.Builder
	deepYAML.WriteString("defaults:\n")
	for i := 1; i < 500; i++ {
		fmt.Fprintf(&deepYAML, "%s- \n", strings.Repeat("  ", i))
	}
	tests := map[string]struct {
		name    string // file name (the extension picks the syntax)
		src     []byte
		wantErr string
	}{
		"HCL: a megabyte of [":             {"r.hcl", []byte("x = " + strings.Repeat("[", 1<<20)), "nesting deeper than 64 levels (limit)"},
		"HCL: balanced deep brackets":      {"r.hcl", []byte("x = " + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)), "nesting deeper than 64 levels (limit)"},
		"HCL: deep nested blocks":          {"r.hcl", []byte(strings.Repeat("a {\n", 100_000)), "nesting deeper than 64 levels (limit)"},
		"HCL: deep parentheses":            {"r.hcl", []byte("x = " + strings.Repeat("(", 1<<20) + "1"), "nesting deeper than 64 levels (limit)"},
		"HCL: deep template interpolation": {"r.hcl", []byte("x = " + strings.Repeat(`"${`, 100_000)), "nesting deeper than 64 levels (limit)"},
		"HCL: a run of unary operators":    {"r.hcl", []byte("x = " + strings.Repeat("!", 1<<20) + "true"), "operators in a row (limit)"},
		"HCL: chained conditionals":        {"r.hcl", []byte("x = " + strings.Repeat("true ? 1 : ", 100_000) + "1"), "conditional expressions (limit)"},
		"YAML: a megabyte of [":            {"r.yaml", []byte("x: " + strings.Repeat("[", 1<<20)), "syntax error"},
		"YAML: deep flow nesting":          {"r.yaml", []byte("x: " + strings.Repeat("[", 5000) + strings.Repeat("]", 5000)), "nesting deeper than 64 levels (limit)"},
		"YAML: deep block nesting":         {"r.yaml", []byte(deepYAML.String()), "nesting deeper than 64 levels (limit)"},
		"YAML: alias bomb":                 {"r.yaml", []byte(bomb), "YAML values once aliases are expanded (limit)"},
		"YAML: wide aliases":               {"r.yaml", []byte(wide), "YAML values once aliases are expanded (limit)"},
		"HCL: huge file":                   {"r.hcl", bytes.Repeat([]byte("# padding\n"), 8<<20/10), "file larger than 4194304 bytes (limit)"},
		"YAML: huge file":                  {"r.yaml", bytes.Repeat([]byte("# padding\n"), 8<<20/10), "file larger than 4194304 bytes (limit)"},
		"HCL: truncated to nothing":        {"r.hcl", nil, "empty rules file"},
		"HCL: truncated in a block":        {"r.hcl", hclEx[:len(hclEx)/2], "syntax error"},
		"HCL: truncated in a string":       {"r.hcl", hclEx[:bytes.Index(hclEx, []byte(`"Europe/`))+4], "syntax error"},
		"YAML: truncated to nothing":       {"r.yaml", nil, "empty rules file"},
		"YAML: truncated in a string":      {"r.yaml", yamlEx[:bytes.Index(yamlEx, []byte(`"Herald <`))+4], "syntax error"},
		"HCL: invalid UTF-8":               {"r.hcl", append(append([]byte(nil), hclEx[:200]...), 0xff, 0xfe), "not valid UTF-8 text"},
		"YAML: invalid UTF-8":              {"r.yaml", append([]byte("defaults:\n  locale: \""), 0xc3, 0x28, '"', '\n'), "not valid UTF-8 text"},
		"HCL: comment only":                {"r.hcl", []byte("# nothing here\n/* nor here */\n"), "empty rules file"},
		"YAML: comment only":               {"r.yaml", []byte("# nothing here\n---\n"), "empty rules file"},
		"YAML: several documents":          {"r.yaml", append(append([]byte(nil), yamlEx...), "\n---\nevent: {}\n"...), "one YAML document"},
		"YAML: merge key":                  {"r.yaml", []byte("x: &x {a: 1}\ndefaults:\n  <<: *x\n"), "merge keys (<<) are not supported"},
	}
	dir := t.TempDir()
	i := 0
	for name, tc := range tests {
		i++
		path := filepath.Join(dir, fmt.Sprintf("%d-%s", i, tc.name))
		if err := os.WriteFile(path, tc.src, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			rep := runHostileChild(t, path)
			if !strings.Contains(rep.Err, tc.wantErr) {
				t.Errorf("error %q does not contain %q", rulesTruncate(rep.Err, 500), tc.wantErr)
			}
			t.Logf("peak heap %d KiB, total allocated %d KiB", rep.PeakHeap>>10, rep.TotalAlloc>>10)
		})
	}
}

func runHostileChild(t *testing.T, path string) hostileReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hostileDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRulesHostileHelper$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), hostileEnvFile+"="+path, "GOMAXPROCS=1")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the loader did not finish within %s (hang)", hostileDeadline)
	}
	if err != nil {
		t.Fatalf("child failed (%v):\n%s", err, rulesTruncate(string(out), 4000))
	}
	_, js, ok := strings.Cut(string(out), "\nREPORT ")
	if !ok {
		t.Fatalf("child printed no report:\n%s", rulesTruncate(string(out), 4000))
	}
	js, _, _ = strings.Cut(js, "\n")
	var rep hostileReport
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatalf("bad report %q: %v", js, err)
	}
	if rep.PeakHeap > hostileHeapCap || rep.TotalAlloc > hostileAllocCap {
		t.Errorf("memory: peak heap %d, total allocated %d; caps %d and %d", rep.PeakHeap, rep.TotalAlloc, hostileHeapCap, hostileAllocCap)
	}
	return rep
}
