package cli

import (
	"bytes"
	"testing"
)

// TestVersion checks that `herald version` and `herald --version` print
// Version, which the herald command sets from main.Version (stamped by make).
func TestVersion(t *testing.T) {
	old := Version
	Version = "9.9.9-test"
	t.Cleanup(func() { Version = old })
	for _, args := range [][]string{{"version"}, {"--version"}} {
		root := NewRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("herald %v: %v", args, err)
		}
		if got, want := out.String(), "herald 9.9.9-test\n"; got != want {
			t.Errorf("herald %v printed %q, want %q", args, got, want)
		}
	}
}
