package plugintest

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestExampleWebhookModule runs the tests of examples/plugins/webhook, a
// separate Go module (so `go test ./...` at the repository root does not
// reach it): its conformance run through this package and its tests
// against a local HTTP receiver.
func TestExampleWebhookModule(t *testing.T) {
	t.Parallel()
	dir, err := filepath.Abs("../../examples/plugins/webhook")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "test", "-count=1", "./...")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test in %s: %v\n%s", dir, err, out)
	}
	t.Logf("%s", out)
}
