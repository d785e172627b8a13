// Package cli builds herald's command tree.
package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// ExitError carries a process exit code out of a command.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// NewRoot returns the herald command tree.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "herald",
		Short:         "Herald is a self-hosted notification gateway",
		Version:       Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("herald {{.Version}}\n")
	root.AddCommand(newVersionCmd())
	for _, add := range commands {
		root.AddCommand(add())
	}
	return root
}

// commands lists the constructors of the top-level subcommands; each
// subcommand's file appends to it from an init function.
var commands []func() *cobra.Command

// Main runs herald with args and returns the process exit code.
func Main(args []string) int {
	root := NewRoot()
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	code := 1
	var ee *ExitError
	if errors.As(err, &ee) {
		code, err = ee.Code, ee.Err
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "herald:", withSchemaHint(err))
	}
	return code
}
