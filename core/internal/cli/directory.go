package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/progress"
	"github.com/heraldhq/herald/core/internal/store"
)

func newDirectoryCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "directory", Short: "Import, check and describe directory files (recipients, groups, members, preferences, settings)"}
	cmd.AddCommand(newDirectoryImportCmd(), newDirectoryCheckCmd(), newDirectorySchemaCmd(),
		newDirectoryExportCmd(), newDirectoryEraseCmd()) // directory_erase.go
	return cmd
}

// directoryFormatHelp is the part of the help the directory commands share.
const directoryFormatHelp = `A directory file is JSON or YAML (an object of the lists recipients, groups,
members, preferences and settings; see docs/rules.md and herald directory
schema) or JSONL, one entry a line ({"recipient": {...}}, {"member": {...}},
...), for large imports. The format follows the extension (.json, .yaml/.yml,
.jsonl/.ndjson) unless --format says. The file is checked as a whole, and
every problem is printed with its line and entry:

  dir.json:14: recipients[3] (user s1): time_zone: unknown zone "Europe/Roma": ...

Unknown fields, members/preferences/settings of groups or users the file
does not declare, unknown IANA zones, bad or empty quiet-hours windows,
duplicate ids, malformed e-mail addresses and non-E.164 phone numbers are
all problems.`

func newDirectoryImportCmd() *cobra.Command {
	var cfgPath, tenant, format string
	var partial, prune, dryRun bool
	imp := &cobra.Command{
		Use:   "import --tenant T [--partial | --prune [--dry-run]] FILE",
		Short: "Check a directory file as a whole and upsert it in one transaction",
		Long: `Import checks a directory file and upserts its entries into the tenant's
directory in one transaction (COPY), all or nothing: with any problem,
nothing is imported and every problem is listed (exit 1). With --partial the
good entries are imported and the refused ones listed (exit 1 when any was
refused). References may name groups and users the tenant's directory
already has. A progress bar goes to stderr on a terminal, a line every 2 s
otherwise.

With --prune the tenant's directory becomes equal to the file, in the same
transaction as the upsert: every recipient, device, group, member,
preference and setting the file does not list is deleted, and listed
(stored notifications and deliveries stay: herald directory erase removes a
user's personal data). References must then be declared in the file. With
--dry-run the import and the prune run and are rolled back: what would be
removed is listed, nothing changes.

` + directoryFormatHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tenant == "" {
				return &ExitError{Code: 2, Err: errors.New("--tenant is required")}
			}
			if prune && partial {
				return &ExitError{Code: 2, Err: errors.New("--prune with --partial would delete the entries the file refuses; fix the file, or drop one flag")}
			}
			if dryRun && !prune {
				return &ExitError{Code: 2, Err: errors.New("--dry-run goes with --prune")}
			}
			d, err := loadDaemon(cfgPath)
			if err != nil {
				return err
			}
			pool, err := connect(cmd.Context(), d)
			if err != nil {
				return err
			}
			defer pool.Close()
			if prune {
				return runDirectoryPrune(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), pool, tenant, args[0], directory.Format(format), dryRun)
			}
			return runDirectoryImport(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), pool, tenant, args[0], directory.Format(format), partial)
		},
	}
	imp.Flags().StringVar(&tenant, "tenant", "", "tenant id")
	imp.Flags().BoolVar(&partial, "partial", false, "import the good entries even when some are refused (they are listed)")
	imp.Flags().StringVar(&format, "format", "", "json, yaml or jsonl (default: from the file's extension)")
	imp.Flags().BoolVar(&prune, "prune", false, "make the tenant's directory equal to the file: delete (and list) what it does not list")
	imp.Flags().BoolVar(&dryRun, "dry-run", false, "with --prune: list what would be removed, change nothing")
	addConfigFlag(imp, &cfgPath)
	return imp
}

func runDirectoryImport(ctx context.Context, stdout, stderr io.Writer, pool *pgxpool.Pool, tenant, path string, format directory.Format, partial bool) error {
	if err := store.EnsureTenant(ctx, pool, tenant, ""); err != nil {
		return &ExitError{Code: 2, Err: fmt.Errorf("--tenant: %w", err)}
	}
	known := func(groups, users []string) (map[string]bool, map[string]bool, error) {
		return store.ExistingDirectoryKeys(ctx, pool, tenant, groups, users)
	}
	res, err := readDirectory(stderr, path, format, known, true)
	if err != nil {
		return err
	}
	if !res.OK() {
		printProblems(stderr, res)
		if !partial {
			fmt.Fprintf(stderr, "%d %s in %d of %d entries: nothing imported (--partial imports the good ones)\n",
				len(res.Problems)+res.Dropped, pluralWord(len(res.Problems)+res.Dropped, "problem", "problems"), res.Bad, res.Entries)
			return &ExitError{Code: 1}
		}
	}
	dir := &res.Directory
	var done atomic.Int64
	start := time.Now()
	pr := progress.New(stderr, "rows imported", store.ImportRows(dir), 0, func() int { return int(done.Load()) })
	err = store.ImportDirectoryProgress(ctx, pool, tenant, dir, &done)
	pr.Stop()
	if err != nil {
		return fmt.Errorf("%s: %w (nothing imported)", path, err)
	}
	fmt.Fprintf(stdout, "imported %d recipients, %d groups, %d members, %d preferences, %d settings in %.1fs\n",
		len(dir.Recipients), len(dir.Groups), len(dir.Members), len(dir.Preferences), len(dir.Settings), time.Since(start).Seconds())
	if res.Bad > 0 || res.Dropped > 0 {
		fmt.Fprintf(stderr, "refused %d of %d entries (listed above)\n", res.Bad, res.Entries)
		return &ExitError{Code: 1}
	}
	return nil
}

// readDirectory parses a directory file, with a progress bar of the bytes
// read when showProgress is set. A file that cannot be read as a directory at
// all is an ExitError 1 after its problem is printed.
func readDirectory(stderr io.Writer, path string, format directory.Format, known func(groups, users []string) (map[string]bool, map[string]bool, error), showProgress bool) (*directory.Result, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	defer fh.Close()
	var read atomic.Int64
	var pr *progress.Bar
	if showProgress {
		size := 0
		if st, err := fh.Stat(); err == nil {
			size = int(st.Size())
		}
		pr = progress.New(stderr, "bytes checked", size, 0, func() int { return int(read.Load()) })
	}
	res, err := directory.Parse(fh, path, directory.Options{Format: format, Known: known, Read: &read})
	if pr != nil {
		pr.Stop()
	}
	if err != nil {
		var ps directory.Problems
		if errors.As(err, &ps) {
			for _, p := range ps {
				fmt.Fprintln(stderr, p.Error())
			}
			return nil, &ExitError{Code: 1}
		}
		return nil, &ExitError{Code: 2, Err: err}
	}
	return res, nil
}

func printProblems(w io.Writer, res *directory.Result) {
	for _, p := range res.Problems {
		fmt.Fprintln(w, p.Error())
	}
	if res.Dropped > 0 {
		fmt.Fprintf(w, "... and %d more problems\n", res.Dropped)
	}
}

func newDirectoryCheckCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "check FILE",
		Short: "Check a directory file as a whole, without a database",
		Long: `Check reads a directory file as import does and prints every problem
(exit 1) or a one-line summary (exit 0). References must be declared in the
file itself.

` + directoryFormatHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := readDirectory(cmd.ErrOrStderr(), args[0], directory.Format(format), nil, false)
			if err != nil {
				return err
			}
			if !res.OK() {
				printProblems(cmd.ErrOrStderr(), res)
				fmt.Fprintf(cmd.ErrOrStderr(), "%d %s in %d of %d entries\n", len(res.Problems)+res.Dropped,
					pluralWord(len(res.Problems)+res.Dropped, "problem", "problems"), res.Bad, res.Entries)
				return &ExitError{Code: 1}
			}
			d := res.Directory
			fmt.Fprintf(cmd.OutOrStdout(), "ok: %d recipients, %d groups, %d members, %d preferences, %d settings\n",
				len(d.Recipients), len(d.Groups), len(d.Members), len(d.Preferences), len(d.Settings))
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "", "json, yaml or jsonl (default: from the file's extension)")
	return cmd
}

func newDirectorySchemaCmd() *cobra.Command {
	var jsonl bool
	cmd := &cobra.Command{
		Use:   "schema [--jsonl]",
		Short: "Print the JSON Schema of the directory format (for editors and CI)",
		Long: `Schema prints a JSON Schema (draft 2020-12) of the directory format, derived
from the definitions the parser decodes with. Point an editor's YAML or
JSON language server at it. With --jsonl it describes one JSONL line. What
a schema cannot say (known zone names, duplicates, references to declared
groups and users) is checked by herald directory check / import.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := directory.Schema(jsonl)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
			return err
		},
	}
	cmd.Flags().BoolVar(&jsonl, "jsonl", false, "the schema of one JSONL line")
	return cmd
}

// readExplainDirectory reads the --directory file of rules explain: every
// problem is listed and none may remain.
func readExplainDirectory(stderr io.Writer, path string) (*directory.Directory, error) {
	res, err := readDirectory(stderr, path, "", nil, false)
	if err != nil {
		return nil, err
	}
	if !res.OK() {
		printProblems(stderr, res)
		fmt.Fprintf(stderr, "--directory: %d %s\n", len(res.Problems)+res.Dropped, pluralWord(len(res.Problems)+res.Dropped, "problem", "problems"))
		return nil, &ExitError{Code: 1}
	}
	return &res.Directory, nil
}
