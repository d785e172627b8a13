// Package pluginbin builds a plugin binary for a conformance test.
//
// core/internal/testenv.PluginBinaries does the same for the core's tests,
// but Go's internal-package rule keeps packages under plugins/ from
// importing it, so the plugins' own tests use this.
package pluginbin

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// Build compiles the main package in the test's working directory (a
// plugin's package directory) into t.TempDir()/herald-plugin-<name> and
// returns the binary's path. A build failure fails the test.
func Build(t testing.TB, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "herald-plugin-"+name)
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build herald-plugin-%s: %v\n%s", name, err, out)
	}
	return bin
}
