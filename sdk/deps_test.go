package sdk

import (
	"os/exec"
	"strings"
	"testing"
)

// goList returns the packages `go list` prints for args.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

// TestImportsNothingOfCore checks that the sdk module stands alone: no
// package it builds or tests with imports the Herald core or any other
// package of the root module, nor the producer module's pgx (a plugin
// author's build does not pull a database driver).
func TestImportsNothingOfCore(t *testing.T) {
	t.Parallel()
	for _, pkg := range goList(t, "-deps", "-test", "./...") {
		switch {
		case strings.HasPrefix(pkg, "github.com/heraldhq/herald/sdk/producer"):
			t.Errorf("the sdk module depends on %s, a module of its own", pkg)
		case strings.HasPrefix(pkg, "github.com/heraldhq/herald/") && !strings.HasPrefix(pkg, "github.com/heraldhq/herald/sdk"):
			t.Errorf("the sdk module depends on %s", pkg)
		case strings.HasPrefix(pkg, "github.com/jackc/"):
			t.Errorf("the sdk module depends on %s", pkg)
		}
	}
}

// TestPackageSDKHasNoHostSide checks that package sdk, the one plugin
// authors import, builds without the host's side of the protocol: the
// client in sdk/host, its converters in internal/wire and protocol 1,
// which only the host speaks.
func TestPackageSDKHasNoHostSide(t *testing.T) {
	t.Parallel()
	hostSide := map[string]bool{
		"github.com/heraldhq/herald/sdk/host":                             true,
		"github.com/heraldhq/herald/sdk/internal/wire":                    true,
		"github.com/heraldhq/herald/sdk/internal/proto/herald/channel/v1": true,
	}
	for _, pkg := range goList(t, "-deps", ".") {
		if hostSide[pkg] {
			t.Errorf("package sdk depends on %s, the host's side", pkg)
		}
	}
}
