package plugintest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/heraldhq/herald/sdk"
)

// shBlockAfter returns the first ```sh block of doc after the heading.
func shBlockAfter(t *testing.T, doc, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/plugin-authoring.md has no heading %q: update this test with the guide", heading)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatalf("docs/plugin-authoring.md: no sh block under %q", heading)
	}
	block, _, _ := strings.Cut(rest, "```")
	return block
}

// TestGuideFromEmptyDirectory follows docs/plugin-authoring.md from an
// empty directory: it runs the guide's step 2 (a new module depending on the
// sdk module only), puts in the files of steps 3 to 7 (those of
// examples/plugins/webhook, which the guide walks through), and runs step
// 7's commands, whose `go test` runs this conformance kit against the
// built plugin. It then checks that nothing of the module depends on a
// Herald package outside the sdk module.
func TestGuideFromEmptyDirectory(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "plugin-authoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	work := t.TempDir()
	env := append(os.Environ(), "HERALD="+root, "GOWORK=off", "GOFLAGS=-mod=mod")
	run := func(dir, script string) {
		t.Helper()
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("in %s:\n%s\n%v\n%s", dir, script, err, out)
		}
		t.Logf("%s", out)
	}

	// Step 2 fetches a released SDK (go get …/sdk@vX.Y.Z). The test
	// requires that version from this checkout instead, as the guide's
	// note on unreleased SDKs says, and checks that the guide names the
	// version this SDK is (sdk.Version).
	step2 := shBlockAfter(t, doc, "## 2. Create the module")
	goGet := regexp.MustCompile(`(?m)^go get (github\.com/heraldhq/herald/sdk)@(v\S+)$`)
	m := goGet.FindStringSubmatch(step2)
	if m == nil {
		t.Fatalf("docs/plugin-authoring.md step 2 has no `go get github.com/heraldhq/herald/sdk@vX.Y.Z` line:\n%s", step2)
	}
	if m[2] != "v"+sdk.Version {
		t.Errorf("docs/plugin-authoring.md step 2 fetches sdk %s, but sdk.Version is %s", m[2], sdk.Version)
	}
	run(work, goGet.ReplaceAllString(step2, "go mod edit -require $1@$2 -replace $1=$$HERALD/sdk"))
	mod := filepath.Join(work, "herald-plugin-webhook")
	gomod, err := os.ReadFile(filepath.Join(mod, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(gomod), "github.com/heraldhq/herald ") || !strings.Contains(string(gomod), "github.com/heraldhq/herald/sdk "+m[2]) {
		t.Fatalf("step 2 made a go.mod that does not depend on the sdk module alone:\n%s", gomod)
	}
	// Steps 3 to 7: the example's files. Its go.sum only spares the run a
	// checksum-database lookup for modules already in the cache.
	src := filepath.Join(root, "examples", "plugins", "webhook")
	for _, f := range []string{"main.go", "config.go", "webhook.go", "webhook_test.go", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mod, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// `go mod tidy` also records the modules that the tests of the
	// plugin's dependencies import (testify, for go-hclog's tests), which
	// a machine whose module cache was filled for Herald's own modules and
	// that has no module proxy may not hold: -e lets tidy go on past them.
	// What the plugin itself builds and tests with must still resolve, as
	// the go test below shows.
	step7 := strings.ReplaceAll(shBlockAfter(t, doc, "## 7. Test it with the conformance kit"), "go mod tidy\n", "go mod tidy -e\n")
	run(mod, step7+"\ngo test -count=1 -run TestConformance -v ./... | grep -E '^(---|ok|PASS|FAIL)'\n")

	cmd := exec.Command("go", "list", "-deps", "-test", "./...")
	cmd.Dir, cmd.Env = mod, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/heraldhq/herald/") && !strings.HasPrefix(pkg, "github.com/heraldhq/herald/sdk") {
			t.Errorf("the guide's plugin depends on %s, outside the sdk module", pkg)
		}
	}
}
