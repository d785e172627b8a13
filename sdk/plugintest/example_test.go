package plugintest_test

import (
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/heraldhq/herald/sdk/plugintest"
)

// This is the conformance test a plugin author writes next to the plugin's
// main package: build the binary, start a local peer that speaks the
// provider's protocol, and let Run drive the binary the way the host does.
func ExampleRun() {
	// In a _test.go file of the plugin's module:
	_ = func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "herald-plugin-example")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			t.Fatalf("build: %v: %s", err, out)
		}
		peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusAccepted)
		}))
		defer peer.Close()
		plugintest.Run(t, bin, plugintest.Features{
			ChannelType: "EXAMPLE",
			Config:      map[string]any{"url": peer.URL},
			BadConfigs: []plugintest.BadConfig{
				{Name: "not http", Config: map[string]any{"url": "ftp://x"}, Field: "url"},
			},
		})
	}
}
