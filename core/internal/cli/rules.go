package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/store"
)

func init() { commands = append(commands, newRulesCmd) }

func newRulesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Check rules files and explain decisions",
	}
	cmd.AddCommand(newRulesCheckCmd(), newRulesExplainCmd(), newRulesSchemaCmd())
	return cmd
}

func newRulesSchemaCmd() *cobra.Command {
	var dir bool
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of the rules format (or, with --directory, of the directory format)",
		Long: `Schema prints a JSON Schema (draft 2020-12) of a rules file in its YAML
spelling, generated from the spec the loader decodes through. Point an
editor's YAML language server at it to check rules files as they are typed:

  herald rules schema > rules.schema.json
  # first line of a rules YAML file:
  # yaml-language-server: $schema=./rules.schema.json

The schema checks fields and their shapes; herald rules check also checks
meaning (templates, channel references, time zones, durations).

With --directory it prints the directory format's schema instead, the same
as herald directory schema.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := rulesfile.JSONSchema()
			if dir {
				var err error
				if out, err = directory.Schema(false); err != nil {
					return err
				}
			}
			_, err := cmd.OutOrStdout().Write(out)
			return err
		},
	}
	cmd.Flags().BoolVar(&dir, "directory", false, "print the directory format's schema")
	return cmd
}

func newRulesCheckCmd() *cobra.Command {
	var (
		pluginDir string
		together  bool
		noResolve bool
		configure bool
	)
	cmd := &cobra.Command{
		Use:   "check FILE...",
		Short: "Validate rules files (HCL or YAML)",
		Long: `Check validates rules files and prints every problem with its file, line,
rule and field, exiting 1; or prints a one-line summary and exits 0.

Each FILE is checked as a complete rule set on its own (so herald.hcl and
herald.yaml, the same rules in two formats, can be checked in one call).
With --together the files are loaded as one rule set, as herald serve
loads its "rules" list: channels in one file, events in another, and an
event type or channel defined twice is an error.

Secret references in providers' config (env:NAME, file:PATH) are resolved
as herald serve resolves them, so an unset variable or an unreadable file
is reported at its field; values are never printed. With --no-resolve only
their syntax is checked (for a machine that does not hold the secrets).

With --configure (and --plugin-dir) every provider's plugin is launched and
configured with the provider's config, as herald serve does, so config the
plugin refuses (a Slack webhook URL that is not https, a missing token...)
is reported naming the field rather than at start-up. Nothing is sent.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if configure && (pluginDir == "" || noResolve) {
				return &ExitError{Code: 2, Err: errors.New("rules check: --configure needs --plugin-dir, and resolved secrets (not --no-resolve)")}
			}
			return runRulesCheck(cmd.OutOrStdout(), cmd.ErrOrStderr(), args, pluginDir, together, noResolve, configure)
		},
	}
	cmd.Flags().StringVar(&pluginDir, "plugin-dir", "", "also check that every provider's binary herald-plugin-<plugin> is in `DIR`")
	cmd.Flags().BoolVar(&together, "together", false, "load the files as one rule set, as herald serve does")
	cmd.Flags().BoolVar(&configure, "configure", false, "also launch every provider's plugin from --plugin-dir and Configure it with the provider's config (sends nothing)")
	cmd.Flags().BoolVar(&noResolve, "no-resolve", false, "check env:/file: references in provider config for syntax only, without reading the environment or the files")
	return cmd
}

func runRulesCheck(stdout, stderr io.Writer, args []string, pluginDir string, together, noResolve, configure bool) error {
	sets := [][]string{args}
	if !together {
		sets = sets[:0]
		for _, a := range args {
			sets = append(sets, []string{a})
		}
	}
	var (
		problems   int
		files      = map[string]bool{}
		eventTypes = map[string]bool{}
		channels   = map[string]bool{}
	)
	for _, set := range sets {
		rs, read, warnings, err := rulesfile.Check(rulesfile.Options{PluginDir: pluginDir, KeepReferences: noResolve}, set...)
		// Warnings do not change the exit code.
		for _, w := range warnings {
			fmt.Fprintln(stderr, "warning: "+w.Error())
		}
		for _, f := range read {
			files[f] = true
		}
		if err != nil {
			var errs rulesfile.Errors
			if errors.As(err, &errs) {
				for _, e := range errs {
					fmt.Fprintln(stderr, e.Error())
					if e.Snippet != "" {
						fmt.Fprintln(stderr, e.Snippet)
					}
				}
				problems += len(errs)
			} else {
				fmt.Fprintln(stderr, err)
				problems++
			}
			continue
		}
		if configure {
			for _, p := range checkProviderConfigs(context.Background(), read, rs, pluginDir) {
				fmt.Fprintln(stderr, p)
				problems++
			}
		}
		for _, t := range rs.EventTypes() {
			eventTypes[t] = true
		}
		for _, ch := range rs.Channels() {
			channels[ch.Name] = true
		}
	}
	if problems > 0 {
		fmt.Fprintf(stderr, "%d %s\n", problems, pluralWord(problems, "problem", "problems"))
		return &ExitError{Code: 1}
	}
	fmt.Fprintf(stdout, "ok: %d %s, %d event %s, %d %s\n",
		len(files), pluralWord(len(files), "file", "files"),
		len(eventTypes), pluralWord(len(eventTypes), "type", "types"),
		len(channels), pluralWord(len(channels), "channel", "channels"))
	return nil
}

func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// rulesExplainOptions are the flags of `herald rules explain`.
type rulesExplainOptions struct {
	rules       []string
	event       string
	directory   string
	at          string
	json        bool
	databaseURL string
	tenant      string
	user        string
	pluginDir   string
}

func newRulesExplainCmd() *cobra.Command {
	var o rulesExplainOptions
	cmd := &cobra.Command{
		Use:   "explain --rules FILE --event EVENT.json (--directory DIR | --database-url URL) [--user ID] [--at RFC3339] [--json]",
		Short: "Show who gets an event, on which channels, and why",
		Long: `Explain runs the rule engine on a sample event and prints every recipient
with the channels kept, deferred and dropped, each with its reason, then the
users left out, and a warning for every audience that matched nobody.
Reasons say whether an explicit setting decided (a group setting, a user
preference, for the event type or every type: "(explicit)") or a default
(the user type's, the global one: "(default)"), and quiet hours name whose
window applied and the recipient's local time.

With --user ID it explains one user, even one no audience reached: every
audience says why it did or did not reach them (not a member, unknown
group, role outside the audience's roles, another user type, not in the
payload's list), then their channels or why they were left out
(inactive, over max_recipients, not in the directory).

A channel's class (best effort or persistent: whether quiet hours hold it
when the rules do not say) and its user types come from what its plugin
declares, as in herald serve, unless the rules set them: with --plugin-dir
(default $HERALD_PLUGINS_DIR) every provider's plugin is launched once and
asked (nothing is configured or sent); without it, channels the rules do
not classify count as persistent. The "channels" block says which won.

The directory comes from a directory file (JSON, YAML or JSONL, checked
strictly as herald directory check does: every problem is listed and none
may remain) or, with --database-url, from the live database of --tenant
(default: the event's tenant_id).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRulesExplain(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.rules, "rules", nil, "rules `FILE` or glob (repeatable; loaded as one rule set)")
	f.StringVar(&o.event, "event", "", "event `FILE` (JSON: type, event_id, tenant_id, payload, ...)")
	f.StringVar(&o.directory, "directory", "", "directory snapshot `FILE` (JSON)")
	f.StringVar(&o.at, "at", "", "decision time, RFC 3339 (default now)")
	f.BoolVar(&o.json, "json", false, "print the decision as JSON")
	f.StringVar(&o.databaseURL, "database-url", "", "read the directory from this PostgreSQL `URL` instead of --directory")
	f.StringVar(&o.tenant, "tenant", "", "tenant to read with --database-url (default: the event's tenant_id)")
	f.StringVar(&o.user, "user", "", "explain this user `ID` only, even when no audience reached them")
	f.StringVar(&o.pluginDir, "plugin-dir", os.Getenv("HERALD_PLUGINS_DIR"), "ask the plugins in `DIR` for their channels' class and user types (default $HERALD_PLUGINS_DIR)")
	_ = cmd.MarkFlagRequired("rules")
	_ = cmd.MarkFlagRequired("event")
	cmd.MarkFlagsMutuallyExclusive("directory", "database-url")
	cmd.MarkFlagsOneRequired("directory", "database-url")
	return cmd
}

func runRulesExplain(ctx context.Context, stdout, stderr io.Writer, o rulesExplainOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	// Explaining starts no plugin: provider config, and its secrets, are
	// not needed.
	rs, _, err := rulesfile.LoadWith(rulesfile.Options{KeepReferences: true}, o.rules...)
	if err != nil {
		var errs rulesfile.Errors
		if errors.As(err, &errs) {
			for _, e := range errs {
				fmt.Fprintln(stderr, e.Error())
			}
			return &ExitError{Code: 1}
		}
		return err
	}
	rs = withDeclaredClasses(ctx, stderr, rs, o.pluginDir)
	var ev rules.Event
	if err := readRulesJSON(o.event, &ev); err != nil {
		return &ExitError{Code: 2, Err: fmt.Errorf("--event: %w", err)}
	}
	at := time.Now()
	if o.at != "" {
		if at, err = time.Parse(time.RFC3339, o.at); err != nil {
			return &ExitError{Code: 2, Err: fmt.Errorf("--at: want RFC 3339 such as 2026-03-10T23:00:00+01:00: %w", err)}
		}
	}
	if err := rs.ValidatePayload(ev.Type, ev.Payload); err != nil {
		if errors.Is(err, rules.ErrNoRule) {
			return &ExitError{Code: 1, Err: fmt.Errorf("event type %q has no rule (rules have %v)", ev.Type, rs.EventTypes())}
		}
		fmt.Fprintf(stderr, "warning: the event would be refused at enqueue: %v\n", err)
	}

	var dir *directory.Directory
	if o.databaseURL != "" {
		tenant := o.tenant
		if tenant == "" {
			tenant = ev.TenantID
		}
		if tenant == "" {
			return &ExitError{Code: 2, Err: errors.New("--tenant is required when the event has no tenant_id")}
		}
		needs, err := rs.Needs(ev)
		if err != nil {
			return &ExitError{Code: 1, Err: err}
		}
		if o.user != "" {
			// The user is loaded even when no audience reaches them.
			needs = needs.Union(directory.Needs{UserIDs: []string{o.user}})
		}
		pool, err := pgxpool.New(ctx, o.databaseURL)
		if err != nil {
			return &ExitError{Code: 2, Err: fmt.Errorf("--database-url: %w", err)}
		}
		defer pool.Close()
		if dir, err = store.LoadDirectory(ctx, pool, tenant, needs); err != nil {
			return fmt.Errorf("load directory: %w", err)
		}
	} else {
		if dir, err = readExplainDirectory(stderr, o.directory); err != nil {
			return err
		}
	}

	if o.user != "" {
		ue, err := rs.ExplainUser(ev, dir, at, o.user)
		if err != nil {
			return &ExitError{Code: 1, Err: err}
		}
		if o.json {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(ue)
		}
		return rules.WriteUserExplain(stdout, ev, ue, at)
	}
	d, err := rs.Decide(ev, dir, at)
	if err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	return rules.WriteExplain(stdout, d, at)
}

// withDeclaredClasses gives rs what the plugins in pluginDir declare about
// their channels, as herald serve does, and says on stderr which channels
// are persistent only by default.
func withDeclaredClasses(ctx context.Context, stderr io.Writer, rs *rules.RuleSet, pluginDir string) *rules.RuleSet {
	if pluginDir != "" {
		declared, problems := declaredClasses(ctx, rs, pluginDir)
		for _, p := range problems {
			fmt.Fprintf(stderr, "warning: %s\n", p)
		}
		rs = rs.WithDeclared(declared)
	}
	var unknown []string
	for _, ch := range rs.Channels() {
		if ch.Resolved.ClassFrom == channel.FromNoPlugin {
			unknown = append(unknown, ch.Name)
		}
	}
	if len(unknown) > 0 {
		how := "pass --plugin-dir (or set HERALD_PLUGINS_DIR) to use what their plugins declare"
		if pluginDir != "" {
			how = "their plugins could not be asked"
		}
		which := "channels " + strings.Join(unknown, ", ") + " are"
		if len(unknown) == 1 {
			which = "channel " + unknown[0] + " is"
		}
		fmt.Fprintf(stderr, "note: %s taken as persistent: the rules do not set best_effort; %s\n", which, how)
	}
	return rs
}

// readRulesJSON decodes a JSON file strictly (unknown fields are errors).
func readRulesJSON(path string, v any) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	dec := json.NewDecoder(fh)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
