package cli

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/core/internal/secret"
	"github.com/heraldhq/herald/core/internal/server"
)

func init() { commands = append(commands, newServeCmd) }

// protectProcess makes the daemon non-dumpable: its memory and its
// /proc/PID files (environ, mem, maps, fd, ...) are then owned by root and
// closed to the other processes of its user, plugins among them (they
// start dumpable again: exec resets it). It also means no core dump.
func protectProcess() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}

func newServeCmd() *cobra.Command {
	var cfgPath string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway: relay, publisher, listeners, maintenance, plugins and HTTP API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := protectProcess(); err != nil {
				return err
			}
			d, err := loadDaemon(cfgPath)
			if err != nil {
				return err
			}
			// The config is loaded: its HERALD_* variables (the database
			// and broker URLs with their passwords) leave the process
			// environment, and env: references of rules reloads read a
			// private copy.
			secret.SealEnvironment("HERALD_")
			// Every log line goes through the redactor: the database and
			// broker passwords, and the plugin host adds each provider's
			// secret fields before configuring it.
			redact := secret.NewRedactor()
			redact.Add(d.SecretValues()...)
			server.Version = Version
			err = server.Run(cmd.Context(), d, newLoggerTo(d, redact.Writer(os.Stderr)), redact)
			if err != nil && redact.String(err.Error()) != err.Error() {
				return errors.New(redact.String(err.Error()))
			}
			return err
		},
	}
	addConfigFlag(cmd, &cfgPath)
	return cmd
}
