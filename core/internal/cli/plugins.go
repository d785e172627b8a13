package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/core/internal/httpguard"
	"github.com/heraldhq/herald/core/internal/pluginhost"
)

func init() {
	commands = append(commands, newPluginsCmd)
}

// adminFlags locate the daemon's admin API and its token.
type adminFlags struct {
	url, tokenFile, config string
}

func (f *adminFlags) register(cmd *cobra.Command) {
	fl := cmd.PersistentFlags()
	fl.StringVar(&f.url, "admin-url", os.Getenv("HERALD_ADMIN_URL"),
		"the daemon's admin API; env HERALD_ADMIN_URL (default: http.admin_listen of the daemon config)")
	fl.StringVar(&f.tokenFile, "admin-token-file", os.Getenv("HERALD_ADMIN_TOKEN_FILE"),
		"file holding the admin token; env HERALD_ADMIN_TOKEN_FILE (default: http.admin_token_file of the daemon config)")
	fl.StringVarP(&f.config, "config", "c", defaultConfigPath(), "daemon config file to take the admin address and token file from; env HERALD_CONFIG")
}

// adminTarget is where the admin API is and the token it wants.
type adminTarget struct {
	url   string
	token []byte
}

// resolve takes the admin URL and token file from the flags (or their
// environment variables), else from the daemon config, and reads the
// token.
func (f *adminFlags) resolve() (adminTarget, error) {
	t := adminTarget{url: f.url}
	tokenFile := f.tokenFile
	if t.url == "" || tokenFile == "" {
		d, err := loadDaemon(f.config)
		if err != nil {
			return t, err
		}
		if tokenFile == "" {
			tokenFile = d.HTTP.AdminTokenFile
		}
		if t.url == "" {
			if d.HTTP.AdminListen == "" {
				return t, &ExitError{Code: 2, Err: errors.New("the daemon config has no admin API (http.admin_listen is empty); pass --admin-url")}
			}
			host, port, err := net.SplitHostPort(d.HTTP.AdminListen)
			if err != nil {
				return t, &ExitError{Code: 2, Err: fmt.Errorf("http.admin_listen: %w", err)}
			}
			if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
				host = "127.0.0.1"
			}
			t.url = "http://" + net.JoinHostPort(host, port)
		}
	}
	if tokenFile != "" {
		tok, err := httpguard.ReadTokenFile(tokenFile)
		if err != nil {
			return t, &ExitError{Code: 2, Err: err}
		}
		t.token = tok
	}
	return t, nil
}

func newPluginsCmd() *cobra.Command {
	var af adminFlags
	cmd := &cobra.Command{
		Use:   "plugins",
		Short: "Inspect and hot-swap the running daemon's channel plugins (admin API)",
	}
	af.register(cmd)

	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List every provider: name, version, channel, provider, state, pid, uptime, last error",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			at, err := af.resolve()
			if err != nil {
				return err
			}
			var st []pluginhost.ProviderStatus
			if err := adminCall(cmd.Context(), http.MethodGet, at, pluginhost.AdminPluginsPath, &st); err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			return printPlugins(cmd.OutOrStdout(), st)
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")

	reload := &cobra.Command{
		Use:   "reload NAME",
		Short: "Hot-swap a plugin: start the binary now on disk, health-check it, switch traffic, drain and stop the old one",
		Long: "NAME is a plugin name (\"email\": every provider running herald-plugin-email), a provider name,\n" +
			"or CHANNEL/PROVIDER. When the new binary fails its health check the old one keeps serving\n" +
			"and the command fails with the reason.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			at, err := af.resolve()
			if err != nil {
				return err
			}
			var out pluginhost.ReloadResponse
			path := "/admin/v1/plugins/" + url.PathEscape(args[0]) + "/reload"
			if err := adminCall(cmd.Context(), http.MethodPost, at, path, &out); err != nil {
				return err
			}
			for _, s := range out.Reloaded {
				fmt.Fprintf(cmd.OutOrStdout(), "reloaded %s/%s: %s version %s pid %d\n", s.Channel, s.Provider, s.State, s.Version, s.PID)
			}
			return nil
		},
	}
	cmd.AddCommand(ls, reload)
	return cmd
}

// adminCall performs one admin API request and decodes the JSON answer
// into out; a non-2xx answer becomes an error carrying the daemon's
// message.
func adminCall(ctx context.Context, method string, at adminTarget, path string, out any) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(at.url, "/")+path, nil)
	if err != nil {
		return &ExitError{Code: 2, Err: fmt.Errorf("admin url: %w", err)}
	}
	if at.token != nil {
		req.Header.Set("Authorization", "Bearer "+string(at.token))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("admin API at %s (is herald serve running? --admin-url / HERALD_ADMIN_URL): %w", at.url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("admin API: read answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var ae pluginhost.AdminError
		if json.Unmarshal(body, &ae) == nil && ae.Detail != "" {
			if resp.StatusCode == http.StatusUnauthorized {
				return fmt.Errorf("%s; name the token file with --admin-token-file, HERALD_ADMIN_TOKEN_FILE or http.admin_token_file in --config", ae.Detail)
			}
			return errors.New(ae.Detail)
		}
		return fmt.Errorf("admin API: %s: %s", resp.Status, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("admin API: decode answer: %w", err)
	}
	return nil
}

// printPlugins writes the status table.
func printPlugins(w io.Writer, st []pluginhost.ProviderStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tCHANNEL\tPROVIDER\tSTATE\tPID\tUPTIME\tRESTARTS\tCAPABILITIES\tLAST ERROR")
	for _, s := range st {
		pid, uptime := "-", "-"
		if s.PID > 0 {
			pid = strconv.Itoa(s.PID)
			uptime = s.Uptime.Round(time.Second).String()
		}
		state := string(s.State)
		if !s.ThrottledUntil.IsZero() {
			state += " (throttled)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n",
			s.Name, orDash(s.Version), s.Channel, s.Provider, state, pid, uptime, s.Restarts,
			orDash(strings.Join(s.Capabilities, ",")), orDash(oneLine(s.LastError)))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}
