package cli

import (
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newServeCmd) }

func newServeCmd() *cobra.Command {
	var cfgPath string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway: relay, publisher, listeners, retry poller, plugins and HTTP API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := loadDaemon(cfgPath)
			if err != nil {
				return err
			}
			return server.Run(cmd.Context(), d, newLogger(d))
		},
	}
	addConfigFlag(cmd, &cfgPath)
	return cmd
}
