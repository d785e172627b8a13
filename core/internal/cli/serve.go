package cli

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/core/internal/secret"
	"github.com/heraldhq/herald/core/internal/server"
)

func init() { commands = append(commands, newServeCmd) }

func newServeCmd() *cobra.Command {
	var cfgPath string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway: relay, publisher, listeners, maintenance, plugins and HTTP API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := loadDaemon(cfgPath)
			if err != nil {
				return err
			}
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
