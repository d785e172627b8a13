package secret

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSealEnvironment runs in a child process (sealing is for the whole
// process): after SealEnvironment("HERALD_") the HERALD_* variables are
// gone from the environment, env: references still resolve (a rules
// reload), and a variable an env: reference read leaves the environment.
func TestSealEnvironment(t *testing.T) {
	if os.Getenv("HERALD_TEST_SEAL_CHILD") == "1" {
		SealEnvironment("HERALD_")
		var bad []string
		for _, kv := range os.Environ() {
			if strings.HasPrefix(kv, "HERALD_") {
				bad = append(bad, kv)
			}
		}
		if len(bad) > 0 {
			t.Fatalf("still in the environment after sealing: %q", bad)
		}
		for i := 0; i < 2; i++ { // a load and a reload
			if v, _, err := Resolve("env:HERALD_TEST_SEAL_URL", ""); err != nil || v != "postgres://u:pw@h/db" {
				t.Fatalf("env:HERALD_TEST_SEAL_URL after sealing = %q, %v", v, err)
			}
			if v, _, err := Resolve("env:SMTP_PASSWORD_FOR_TEST", ""); err != nil || v != "hunter2" {
				t.Fatalf("env:SMTP_PASSWORD_FOR_TEST after sealing = %q, %v", v, err)
			}
		}
		if _, ok := os.LookupEnv("SMTP_PASSWORD_FOR_TEST"); ok {
			t.Fatal("a variable an env: reference read is still in the environment")
		}
		if _, _, err := Resolve("env:NOT_SET_FOR_TEST", ""); err == nil {
			t.Fatal("an unset variable resolved")
		}
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSealEnvironment$", "-test.count=1")
	cmd.Env = append(os.Environ(), "HERALD_TEST_SEAL_CHILD=1", "HERALD_TEST_SEAL_URL=postgres://u:pw@h/db", "SMTP_PASSWORD_FOR_TEST=hunter2")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
