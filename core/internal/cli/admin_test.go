package cli

import (
	"strings"
	"testing"
)

// TestAPICommandsWithoutAKeyNameTheFlagAndTheEnv checks that the commands
// talking to the HTTP API say how to give them a key instead of sending a
// request the API refuses.
func TestAPICommandsWithoutAKeyNameTheFlagAndTheEnv(t *testing.T) {
	t.Setenv("HERALD_API_KEY", "")
	tests := map[string][]string{
		"events show": {"events", "show", "quickstart-reservation-1001", "--url", "http://127.0.0.1:1"},
		"emit":        {"emit", "--type", "T", "--id", "x", "--url", "http://127.0.0.1:1"},
	}
	for name, args := range tests {
		t.Run(name, func(t *testing.T) {
			_, stderr, code := runHerald(t, args...)
			if code != 2 {
				t.Errorf("exit %d, want 2 (stderr %q)", code, stderr)
			}
			for _, want := range []string{"--api-key", "HERALD_API_KEY"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr %q does not name %s", stderr, want)
				}
			}
		})
	}
}
