// Command herald is the Herald notification gateway daemon and CLI.
package main

import (
	"os"

	"github.com/heraldhq/herald/core/internal/cli"
	"github.com/heraldhq/herald/core/internal/pluginhost"
)

// Version, Commit and BuildDate describe the build; make stamps them from
// git with -ldflags "-X main.Version=$(git describe --tags --always
// --dirty) -X main.Commit=... -X main.BuildDate=..." (BuildDate is the
// commit's time, so that a rebuild of one commit gives the same bytes).
var (
	Version   = "dev"
	Commit    = ""
	BuildDate = ""
)

func main() {
	// Started as a plugin's sandbox helper: confine and execute the
	// plugin; never returns then.
	pluginhost.SandboxMain()
	cli.Version, cli.Commit, cli.BuildDate = Version, Commit, BuildDate
	os.Exit(cli.Main(os.Args[1:]))
}
