package sdk

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNothingOfCore checks that the sdk module stands alone: no
// package it builds or tests with imports the Herald core or any other
// package of the root module.
func TestImportsNothingOfCore(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-test", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/heraldhq/herald/") && !strings.HasPrefix(pkg, "github.com/heraldhq/herald/sdk") {
			t.Errorf("the sdk module depends on %s", pkg)
		}
	}
}
