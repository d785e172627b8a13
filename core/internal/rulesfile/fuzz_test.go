package rulesfile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The fuzz targets feed arbitrary bytes to the whole loader (parse,
// decode, merge, validate; secret references are only checked, never
// resolved). Whatever the input, the loader returns a rule set or errors:
// no panic, no hang, no runaway memory. CI runs each briefly
// (scripts/test.sh); `go test -fuzz '^FuzzLoadRulesHCL$' ./core/internal/config`
// runs one for longer.

func fuzzSeeds(f *testing.F, ext string) {
	f.Helper()
	paths, _ := filepath.Glob("../../../examples/rules/*" + ext)
	paths = append(paths, "../../../examples/quickstart/rules"+ext)
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
			f.Add(b[:len(b)/2])
			f.Add(b[:len(b)/3])
		}
	}
	// An escalation (docs/rules.md, "Escalation when unread"), good and bad.
	if ext == ".hcl" {
		f.Add([]byte("channel \"EMAIL\" {\n  providers = [{ plugin = \"email\" }]\n}\nevent \"R\" {\n  shared = true\n  audience {\n    user_type = \"STAFF\"\n  }\n  optional = [\"EMAIL\"]\n  escalate \"EMAIL\" {\n    after  = \"10m\"\n    unless = [\"read\", \"acted\"]\n  }\n}\n"))
		f.Add([]byte("event \"R\" {\n  escalate \"inbox\" {\n    after  = \"-1h\"\n    unless = []\n  }\n}\n"))
	} else {
		f.Add([]byte("channel:\n  EMAIL: {providers: [{plugin: email}]}\nevent:\n  R:\n    shared: true\n    audience: [{user_type: STAFF}]\n    optional: [EMAIL]\n    escalate:\n      EMAIL: {after: 10m, unless: [read, acted]}\n"))
		f.Add([]byte("event:\n  R:\n    escalate:\n      EMAIL: {after: [1], unless: {a: b}}\n"))
	}
	f.Add([]byte(nil))
	f.Add([]byte("# only a comment\n"))
	f.Add([]byte{0xff, 0xfe, '{'})
}

func fuzzLoad(t *testing.T, name string, src []byte) {
	if len(src) > 1<<16 {
		return // the size limit has its own test; keep each run quick
	}
	stop := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("loader stuck on %q", src)) })
	defer stop.Stop()
	c := &rulesCollector{}
	f := parseRulesSource(c, name, src)
	f.path = filepath.Join(os.TempDir(), "herald-fuzz-nonexistent", name)
	rs, _, err := loadParsedRules(c, []*rulesFile{f}, Options{KeepReferences: true})
	if err == nil && rs == nil {
		t.Fatal("no rule set and no error")
	}
	if err != nil && strings.TrimSpace(err.Error()) == "" {
		t.Fatal("an error with no text")
	}
}

func FuzzLoadRulesHCL(f *testing.F) {
	fuzzSeeds(f, ".hcl")
	f.Add([]byte("x = " + strings.Repeat("[", 200)))
	f.Add([]byte(strings.Repeat("a {\n", 100)))
	f.Add([]byte(`event "X" { description = "${"${"${x}"}"}" }`))
	f.Add([]byte("event \"X\" {\n  description = <<EOT\n${x}\nEOT\n}\n"))
	f.Add([]byte("x = " + strings.Repeat("!", 40) + "true"))
	f.Add([]byte("x = " + strings.Repeat("true ? 1 : ", 80) + "1"))
	f.Fuzz(func(t *testing.T, src []byte) { fuzzLoad(t, "rules.hcl", src) })
}

func FuzzLoadRulesYAML(f *testing.F) {
	fuzzSeeds(f, ".yaml")
	f.Add([]byte("a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n"))
	f.Add([]byte("x: " + strings.Repeat("[", 200)))
	f.Add([]byte("defaults:\n  <<: *x\n"))
	f.Add([]byte("---\nevent: {}\n---\nevent: {}\n"))
	f.Add(bytes.Repeat([]byte("- "), 100))
	f.Fuzz(func(t *testing.T, src []byte) { fuzzLoad(t, "rules.yaml", src) })
}
