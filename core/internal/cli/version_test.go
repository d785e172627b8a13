package cli

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/sdk"
	sdkhost "github.com/heraldhq/herald/sdk/host"
)

// stamp sets Version, Commit and BuildDate as make's -ldflags -X would, for
// the test's duration.
func stamp(t *testing.T, version, commit, date string) {
	t.Helper()
	oldV, oldC, oldD := Version, Commit, BuildDate
	Version, Commit, BuildDate = version, commit, date
	t.Cleanup(func() { Version, Commit, BuildDate = oldV, oldC, oldD })
}

func runRoot(t *testing.T, args ...string) string {
	t.Helper()
	root := NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		t.Fatalf("herald %v: %v", args, err)
	}
	return out.String()
}

// TestVersion checks that `herald --version` prints the version alone and
// `herald version` the whole build: the stamped version, commit and date,
// the toolchain, the SDK and the protocol versions of sdk/host.
func TestVersion(t *testing.T) {
	stamp(t, "9.9.9-test", "0123456789abcdef0123456789abcdef01234567", "2026-01-02T03:04:05Z")
	if got, want := runRoot(t, "--version"), "herald 9.9.9-test\n"; got != want {
		t.Errorf("herald --version printed %q, want %q", got, want)
	}
	got := runRoot(t, "version")
	for _, want := range []string{
		"herald 9.9.9-test\n",
		"commit:     0123456789abcdef0123456789abcdef01234567\n",
		"built:      2026-01-02T03:04:05Z\n",
		"go:         " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n",
		"sdk:        " + sdk.Version + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("herald version printed\n%s\nwithout %q", got, want)
		}
	}
	if !strings.HasPrefix(got, "herald 9.9.9-test\n") {
		t.Errorf("herald version's first line is not the version:\n%s", got)
	}
	var protos []string
	for _, v := range sdkhost.ProtocolVersions {
		protos = append(protos, strconv.Itoa(v))
	}
	if want := "protocols:  " + strings.Join(protos, ", ") + "\n"; !strings.Contains(got, want) {
		t.Errorf("herald version printed\n%s\nwithout %q", got, want)
	}
	if last := sdkhost.ProtocolVersions[len(sdkhost.ProtocolVersions)-1]; last != sdk.ProtocolVersion {
		t.Errorf("the host's newest protocol is %d, the SDK's %d", last, sdk.ProtocolVersion)
	}
}

// TestVersionJSON checks `herald version --json` field by field.
func TestVersionJSON(t *testing.T) {
	stamp(t, "1.2.3", "abc", "2026-01-02T03:04:05Z")
	var got map[string]any
	if err := json.Unmarshal([]byte(runRoot(t, "version", "--json")), &got); err != nil {
		t.Fatalf("herald version --json: %v", err)
	}
	protos := []any{}
	for _, v := range sdkhost.ProtocolVersions {
		protos = append(protos, float64(v))
	}
	want := map[string]any{
		"version":           "1.2.3",
		"commit":            "abc",
		"build_date":        "2026-01-02T03:04:05Z",
		"go_version":        runtime.Version(),
		"platform":          runtime.GOOS + "/" + runtime.GOARCH,
		"sdk_version":       sdk.Version,
		"protocol_versions": protos,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("herald version --json (-want +got):\n%s", d)
	}
}

// TestVersionUnstamped checks what a plain go build prints: no build date,
// and the commit go build recorded or "unknown", never an empty field.
func TestVersionUnstamped(t *testing.T) {
	stamp(t, "dev", "", "")
	b := CurrentBuild()
	if b.BuildDate != "unknown" {
		t.Errorf("BuildDate = %q, want unknown", b.BuildDate)
	}
	if b.Commit == "" {
		t.Error("Commit is empty, want the vcs revision or unknown")
	}
}

// TestVersionArgs checks that `herald version` refuses arguments.
func TestVersionArgs(t *testing.T) {
	root := NewRoot()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"version", "extra"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "extra") {
		t.Errorf("herald version extra: err = %v, want one naming the argument", err)
	}
}
