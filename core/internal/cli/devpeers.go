package cli

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/heraldhq/herald/core/internal/tools/devpeer"
	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newDevpeersCmd) }

func newDevpeersCmd() *cobra.Command {
	var smtpAddr, httpAddr, tlsAddr, tlsDir string
	cmd := &cobra.Command{
		Use:   "devpeers [--smtp 127.0.0.1:2525] [--http 127.0.0.1:4010] [--tls 127.0.0.1:4443]",
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
  TLS   --tls   one HTTPS server (HTTP/2) for the push plugin's other providers:
                  POST /webpush/{id}       Web Push: checks the VAPID JWT, DECRYPTS the
                                           payload and prints it (subscriptions are
                                           derived from {id}; see --tls-dir)
                  POST /3/device/{token}   APNs: checks the provider token and apns-*
                                           headers (any signing key) and prints the payload
                It writes its CA and throw-away keys into --tls-dir for the push
                plugin's config: ca.pem (ca_file), vapid-public-key and
                vapid-private-key (vapid_*_key = "file:..."), apns-key.p8
                (apns_key = "file:..."), all new at every start. Set the push
                plugin's webpush_private_endpoints = true: it listens on loopback.

Requests are checked the way the real services check them (credentials present,
required fields present) and answered with the services' success and error
shapes; every message or request is printed as one line on standard output.
Nothing is delivered to anyone.

THIS IS NOT FOR PRODUCTION. The peers accept any credentials, deliver nothing,
and listen on loopback addresses only. Point examples/quickstart/rules.hcl at
them; point real configs at real providers.

An empty address (--smtp "", --http "" or --tls "") leaves that peer out. The command
runs until interrupted (SIGINT or SIGTERM).`,
		Example: `  herald devpeers
  herald devpeers --smtp 127.0.0.1:2525 --http 127.0.0.1:4010`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if smtpAddr == "" && httpAddr == "" && tlsAddr == "" {
				return &ExitError{Code: 2, Err: errors.New("devpeers: --smtp, --http and --tls are all empty; nothing to run")}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			p, err := devpeer.Start(ctx, devpeer.Config{SMTPAddr: smtpAddr, HTTPAddr: httpAddr, TLSAddr: tlsAddr, TLSDir: tlsDir, Log: out})
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
			if u := p.TLSURL(); u != "" {
				fmt.Fprintf(out, "  webpush %s/webpush/{id}  (push plugin providers webpush; subscriptions: endpoint %s/webpush/<id>)\n", u, u)
				fmt.Fprintf(out, "  apns   %s/3/device/{token}  (push plugin apns_endpoint %s)\n", u, u)
				fmt.Fprintf(out, "  tls    CA and dev keys in %s (ca_file %s)\n", tlsDir, filepath.Join(tlsDir, devpeer.FileCA))
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
	cmd.Flags().StringVar(&tlsAddr, "tls", devpeer.DefaultTLSAddr, "loopback host:port of the Web Push/APNs HTTPS peer (\"\" = none)")
	cmd.Flags().StringVar(&tlsDir, "tls-dir", filepath.Join(os.TempDir(), "herald-devpeers"), "directory the HTTPS peer writes its CA and the push plugin's dev keys to")
	return cmd
}
