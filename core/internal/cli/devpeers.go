package cli

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/heraldhq/herald/core/internal/devpeer"
	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newDevpeersCmd) }

func newDevpeersCmd() *cobra.Command {
	var smtpAddr, httpAddr string
	cmd := &cobra.Command{
		Use:   "devpeers [--smtp 127.0.0.1:2525] [--http 127.0.0.1:4010]",
		Short: "Run local stand-ins for the email, push, SMS and Slack providers (demos and development only, not for production)",
		Long: `devpeers runs local stand-ins for the providers Herald's channel plugins talk
to, so the quick start works on a machine with no provider accounts:

  SMTP  --smtp  a real SMTP server that accepts every message (email plugin,
                host 127.0.0.1, port 2525, tls "none")
  HTTP  --http  one HTTP server speaking, at the plugins' paths:
                  POST /v1/projects/{project}/messages:send   FCM HTTP v1 (push plugin, endpoint)
                  POST /2010-04-01/Accounts/{sid}/Messages.json  Twilio (sms plugin, base url)
                  POST /api/chat.postMessage, /api/auth.test  Slack Web API (slack plugin, api url .../api/)
                  POST /services/T…/B…/<secret>              Slack incoming webhooks (slack plugin,
                                                              mode "webhook"; the secrets "revoked",
                                                              "archived" and "ratelimited" answer
                                                              Slack's 404 no_service, 410 and 429)

Requests are checked the way the real services check them (credentials present,
required fields present) and answered with the services' success and error
shapes; every message or request is printed as one line on standard output.
Nothing is delivered to anyone.

THIS IS NOT FOR PRODUCTION. The peers accept any credentials, deliver nothing,
and listen on loopback addresses only. Point examples/quickstart/rules.hcl at
them; point real configs at real providers.

An empty address (--smtp "" or --http "") leaves that peer out. The command
runs until interrupted (SIGINT or SIGTERM).`,
		Example: `  herald devpeers
  herald devpeers --smtp 127.0.0.1:2525 --http 127.0.0.1:4010`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if smtpAddr == "" && httpAddr == "" {
				return &ExitError{Code: 2, Err: errors.New("devpeers: --smtp and --http are both empty; nothing to run")}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			p, err := devpeer.Start(ctx, devpeer.Config{SMTPAddr: smtpAddr, HTTPAddr: httpAddr, Log: out})
			if err != nil {
				return &ExitError{Code: 1, Err: err}
			}
			fmt.Fprintln(out, "herald devpeers: local provider stand-ins for demos and development - not for production; nothing is delivered")
			if a := p.SMTPAddr(); a != "" {
				fmt.Fprintf(out, "  smtp   %s  (email plugin: host/port, tls \"none\")\n", a)
			}
			if u := p.HTTPURL(); u != "" {
				fmt.Fprintf(out, "  fcm    %s/v1/projects/{project}/messages:send  (push plugin endpoint %s)\n", u, u)
				fmt.Fprintf(out, "  twilio %s/2010-04-01/Accounts/{sid}/Messages.json  (sms plugin base url %s)\n", u, u)
				fmt.Fprintf(out, "  slack  %s/api/chat.postMessage  (slack plugin api url %s/api/)\n", u, u)
				fmt.Fprintf(out, "  slack  %s/services/T0HERALDDEV/B0ALERTS/demo  (slack plugin webhook URL, mode \"webhook\")\n", u)
			}
			fmt.Fprintln(out, "waiting for messages; Ctrl-C stops")
			<-ctx.Done()
			err = p.Close()
			fmt.Fprintln(out, "herald devpeers: stopped")
			return err
		},
	}
	cmd.Flags().StringVar(&smtpAddr, "smtp", devpeer.DefaultSMTPAddr, "loopback host:port of the SMTP peer (\"\" = none)")
	cmd.Flags().StringVar(&httpAddr, "http", devpeer.DefaultHTTPAddr, "loopback host:port of the FCM/Twilio/Slack HTTP peer (\"\" = none)")
	return cmd
}
