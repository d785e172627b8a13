package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/sdk"
	sdkhost "github.com/heraldhq/herald/sdk/host"
)

// Version, Commit and BuildDate describe this build of herald; `herald
// version` prints them. The herald command sets them from its own
// main.Version, main.Commit and main.BuildDate, which make (and make dist)
// stamp from git with -ldflags -X.
var (
	// Version is herald's version: git describe --tags --always --dirty.
	Version = "dev"
	// Commit is the full git commit herald was built from. Empty: the
	// vcs.revision go build recorded, if any.
	Commit = ""
	// BuildDate is the time of the commit herald was built from, RFC 3339
	// in UTC: make and make dist stamp the commit's time, not the clock's,
	// so that two builds of one commit are the same bytes. Empty:
	// unknown.
	BuildDate = ""
)

// BuildInfo is what `herald version --json` prints.
type BuildInfo struct {
	// Version is herald's version (Version).
	Version string `json:"version"`
	// Commit is the git commit herald was built from, "unknown" when
	// neither make nor go build recorded it; "-dirty" follows it when the
	// tree had changes go build saw.
	Commit string `json:"commit"`
	// BuildDate is the time of the commit herald was built from (RFC
	// 3339), or "unknown".
	BuildDate string `json:"build_date"`
	// GoVersion is the Go toolchain herald was built with.
	GoVersion string `json:"go_version"`
	// Platform is the operating system and architecture (linux/amd64).
	Platform string `json:"platform"`
	// SDKVersion is the version of the plugin SDK herald's host is built
	// on (sdk.Version).
	SDKVersion string `json:"sdk_version"`
	// ProtocolVersions lists the plugin protocol versions the host speaks,
	// oldest first (sdk/host.ProtocolVersions): a plugin negotiates the
	// highest one both sides know.
	ProtocolVersions []int `json:"protocol_versions"`
}

// CurrentBuild returns the BuildInfo of the running herald.
func CurrentBuild() BuildInfo {
	b := BuildInfo{
		Version:          Version,
		Commit:           Commit,
		BuildDate:        BuildDate,
		GoVersion:        runtime.Version(),
		Platform:         runtime.GOOS + "/" + runtime.GOARCH,
		SDKVersion:       sdk.Version,
		ProtocolVersions: append([]int(nil), sdkhost.ProtocolVersions...),
	}
	if b.Commit == "" {
		b.Commit = vcsRevision()
	}
	if b.BuildDate == "" {
		b.BuildDate = "unknown"
	}
	return b
}

// vcsRevision is the commit go build recorded (-buildvcs), with "-dirty"
// when the tree was modified, or "unknown".
func vcsRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// writeText prints b as `herald version` does: "herald VERSION" first (the
// line `herald --version` prints alone), then one field a line.
func (b BuildInfo) writeText(w io.Writer) error {
	protos := make([]string, len(b.ProtocolVersions))
	for i, v := range b.ProtocolVersions {
		protos[i] = strconv.Itoa(v)
	}
	_, err := fmt.Fprintf(w, "herald %s\n  commit:     %s\n  built:      %s\n  go:         %s %s\n  sdk:        %s\n  protocols:  %s\n",
		b.Version, b.Commit, b.BuildDate, b.GoVersion, b.Platform, b.SDKVersion, strings.Join(protos, ", "))
	return err
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print herald's version, commit, build date, Go version and the plugin protocol versions it speaks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := CurrentBuild()
			if !asJSON {
				return b.writeText(cmd.OutOrStdout())
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(b)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the build as a JSON object")
	return cmd
}
