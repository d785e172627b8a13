package config

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzDaemonHCL feeds arbitrary bytes to the HCL2 daemon-file parser and
// the key check behind it (secret references are not resolved: they
// would read files). Whatever the input, it returns settings or errors:
// no panic, no hang, no runaway memory. `go test -fuzz '^FuzzDaemonHCL$'
// ./core/internal/config` runs it for longer.
func FuzzDaemonHCL(f *testing.F) {
	for _, p := range []string{"../../../examples/herald.hcl", "../../../packaging/herald.hcl"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
			f.Add(b[:len(b)/2])
		}
	}
	for _, s := range []string{
		"database {\n  max_conns = 8 * 2\n}\n",
		"http {\n}\nhttp {\n}\n",
		"amqp {\n  queue \"a.b\" {\n    bindings = [\"*.X\"]\n  }\n}\n",
		"x = [for a in [1, 2] : a]\n",
		"a = \"${1 + 2}s\"\n",
		"a = <<EOT\nhello\nEOT\n",
		"a = 1e400\n",
		"a = 99999999999999999999\n",
		"a = {b = {c = [1, \"x\", true]}}\n",
		"",
		"\xff\xfe{",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		if len(src) > 1<<16 {
			return // the size limit has its own test; keep each run quick
		}
		stop := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("daemon parser stuck on %q", src)) })
		defer stop.Stop()
		p := newHCLParser("fuzz.hcl")
		raw, err := p.Unmarshal(src)
		if err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatal("an error with no text")
			}
			return
		}
		if raw == nil {
			t.Fatal("no settings and no error")
		}
		var errs, warnings []string
		checkKeys(raw, reflect.TypeOf(Daemon{}), "", daemonFile{name: "fuzz.hcl", pos: p.positions()}, &errs, &warnings)
	})
}

// TestDaemonFileLimits: hostile daemon files are refused with an error
// naming the limit, quickly.
func TestDaemonFileLimits(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		src  string
		want string
	}{
		"deep nesting":     {"a = " + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + "\n", "nesting deeper than"},
		"deep parentheses": {"a = " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000) + "\n", "nesting deeper than"},
		"deep blocks":      {strings.Repeat("a {\n", 100) + strings.Repeat("}\n", 100), "nesting deeper than"},
		"deep templates":   {"a = " + strings.Repeat(`"${`, 1000) + "1" + strings.Repeat(`}"`, 1000) + "\n", "nesting deeper than"},
		"unary run":        {"a = " + strings.Repeat("!", 10000) + "true\n", "operators in a row"},
		"conditionals":     {"a = " + strings.Repeat("true ? 1 : ", 1000) + "2\n", "conditional expressions"},
		"too large":        {"# " + strings.Repeat("x", MaxDaemonFileSize) + "\n", "larger than"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := newHCLParser("hostile.hcl").Unmarshal([]byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
	deep := strings.Repeat("a:\n", 1)
	for i := range 100 {
		deep += strings.Repeat("  ", i+1) + "a:\n"
	}
	if _, err := newYAMLParser("hostile.yaml").Unmarshal([]byte(deep)); err == nil || !strings.Contains(err.Error(), "nesting deeper than") {
		t.Fatalf("deep YAML: %v", err)
	}
}
