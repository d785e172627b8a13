// Command herald is the Herald notification gateway daemon and CLI.
package main

import (
	"os"

	"github.com/heraldhq/herald/core/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
