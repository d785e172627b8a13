// Command gendocs writes the configuration reference, docs/configuration.md,
// from the doc comments of the daemon's Config types (config.Reference).
// Run it from the module's root: `make docs`, or
//
//	go run ./core/internal/config/cmd/gendocs -o docs/configuration.md
//
// Without -o it writes to standard output (`make check` diffs that with
// the committed file).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/heraldhq/herald/core/internal/config"
)

func main() {
	out := flag.String("o", "", "write the reference to this file (default: standard output)")
	root := flag.String("root", ".", "the module's root directory, where the sources are read")
	flag.Parse()
	b, err := config.Reference(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
	if *out == "" {
		_, err = os.Stdout.Write(b)
	} else {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}
