// Command herald is the Herald notification gateway daemon and CLI.
package main

import (
	"os"

	"github.com/heraldhq/herald/core/internal/cli"
)

// Version is herald's version; make stamps it from git with
// -ldflags "-X main.Version=$(git describe --tags --always --dirty)".
var Version = "dev"

func main() {
	cli.Version = Version
	os.Exit(cli.Main(os.Args[1:]))
}
