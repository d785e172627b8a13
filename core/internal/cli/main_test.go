package cli

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/heraldhq/herald/core/internal/pluginhost"
)

// TestMain lets the test binary act as the plugins' sandbox helper, as
// herald's main does, so that the commands under test (doctor) confine
// their plugins as they would in production; and as the helper of
// TestServeHidesEnvironFromSameUser.
func TestMain(m *testing.M) {
	pluginhost.SandboxMain()
	if mode := os.Getenv("HERALD_TEST_PROTECT_HELPER"); mode != "" {
		protectHelper(mode == "on")
		return
	}
	os.Exit(m.Run())
}

// protectHelper protects the process as herald serve does (when on), then
// has a child of the same user try to read this process's environ and
// prints READ or REFUSED.
func protectHelper(on bool) {
	if on {
		if err := protectProcess(); err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
	}
	out, _ := exec.Command("cat", "/proc/"+strconv.Itoa(os.Getpid())+"/environ").Output()
	if strings.Contains(string(out), "HERALD_TEST_SECRET=s3cret") {
		fmt.Println("READ")
	} else {
		fmt.Println("REFUSED")
	}
	os.Exit(0)
}

// TestServeHidesEnvironFromSameUser runs a process as a non-root user
// (nobody, when the test runs as root) that protects itself as herald
// serve does, and a child of the same user (a plugin's position) that
// reads its /proc/PID/environ, where the database URL's password is: the
// read is refused; without the protection (herald before it) it succeeds.
func TestServeHidesEnvironFromSameUser(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := self
	asNobody := os.Geteuid() == 0
	if asNobody {
		// nobody must be able to execute a copy of this binary.
		dir, err := os.MkdirTemp("", "herald-protect-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(self)
		if err != nil {
			t.Fatal(err)
		}
		bin = dir + "/cli.test"
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := func(mode string) string {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "HERALD_TEST_PROTECT_HELPER="+mode, "HERALD_TEST_SECRET=s3cret")
		if asNobody {
			cmd.SysProcAttr = nobody(t)
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("helper (%s): %v: %s", mode, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run("off"); got != "READ" {
		t.Errorf("unprotected: %q, want READ (a same-user child reads the environ)", got)
	}
	if got := run("on"); got != "REFUSED" {
		t.Errorf("protected: %q, want REFUSED", got)
	}
}
