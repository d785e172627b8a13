package heraldinbox

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestDeclarationsMatchTheModule: every value herald-inbox.js exports is
// declared in herald-inbox.d.ts and every declared value is exported, so
// the types scripts/component-types.sh checks are the module's.
func TestDeclarationsMatchTheModule(t *testing.T) {
	names := func(re *regexp.Regexp, text string) []string {
		var out []string
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			for _, g := range m[1:] {
				out = append(out, regexp.MustCompile(`[A-Za-z_$][\w$]*`).FindAllString(g, -1)...)
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	dts, err := os.ReadFile("herald-inbox.d.ts")
	if err != nil {
		t.Fatal(err)
	}
	exported := names(regexp.MustCompile(`(?m)^export (?:(?:async )?function|class|const|let) ([\w$]+)|^export \{([^}]*)\}`), string(Source))
	declared := names(regexp.MustCompile(`(?m)^export declare (?:function|class|const|let) ([\w$]+)`), string(dts))
	if len(exported) < 5 || !slices.Equal(exported, declared) {
		t.Fatalf("herald-inbox.js exports %v; herald-inbox.d.ts declares %v", exported, declared)
	}
}
