package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
)

func newDirectoryEraseCmd() *cobra.Command {
	var cfgPath, tenant, user string
	var batch int
	var settle time.Duration
	cmd := &cobra.Command{
		Use:   "erase --tenant T --user U",
		Short: "Remove a user from the directory and erase their personal data from stored notifications and deliveries",
		Long: `Erase does what DELETE /v1/recipients/{user_id}?erase=true does: it deletes
the user's recipient entry, devices, memberships and preferences in one
transaction (the next event no longer reaches them), then anonymises their
stored notifications, deliveries, delivery attempts and actions in batches:
addresses, rendered text, payload copies and error texts are erased and the
user id is replaced by a pseudonym (erased:<hex>); ids, statuses, counts and
times are kept. Deliveries still on their way become FAILED and are never
sent. Their unread counters and live tickets are deleted. docs/retention.md,
"What erase keeps", lists every column.

Safe to run again: an erase cut short (Ctrl-C, a lost connection) is
finished by the next run. Exit 0: erased; 1: the tenant has no trace of the
user, or a transaction older than the removal was still running after
--settle (run it again); 2: bad flags.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkEraseFlags(tenant, user, batch); err != nil {
				return err
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
			return runDirectoryErase(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), pool, tenant, user,
				store.EraseOptions{Batch: batch, Settle: settle})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant id")
	cmd.Flags().StringVar(&user, "user", "", "the user id to erase")
	cmd.Flags().IntVar(&batch, "batch", 500, "notifications (with their deliveries) erased per transaction")
	cmd.Flags().DurationVar(&settle, "settle", 10*time.Second, "how long to wait for relay transactions older than the removal")
	addConfigFlag(cmd, &cfgPath)
	return cmd
}

// checkEraseFlags refuses what erase cannot run with, naming the flag.
func checkEraseFlags(tenant, user string, batch int) error {
	switch {
	case tenant == "":
		return &ExitError{Code: 2, Err: errors.New("--tenant is required")}
	case user == "":
		return &ExitError{Code: 2, Err: errors.New("--user is required")}
	case !validText(user):
		return &ExitError{Code: 2, Err: errors.New("--user must be valid UTF-8 without NUL")}
	case batch < 1 || batch > 100000:
		return &ExitError{Code: 2, Err: fmt.Errorf("--batch must be 1 to 100000, got %d", batch)}
	}
	if err := store.ValidID("tenant", tenant); err != nil {
		return &ExitError{Code: 2, Err: fmt.Errorf("--tenant: %w", err)}
	}
	return nil
}

// validText reports whether s is valid UTF-8 without NUL (what PostgreSQL
// text takes).
func validText(s string) bool {
	return strings.ToValidUTF8(s, "\uFFFD") == s && !strings.ContainsRune(s, 0)
}

func runDirectoryErase(ctx context.Context, stdout, stderr io.Writer, pool *pgxpool.Pool, tenant, user string, opt store.EraseOptions) error {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE tenant_id = $1)`, tenant).Scan(&exists); err != nil {
		return withSchemaHint(err)
	}
	if !exists {
		return &ExitError{Code: 1, Err: fmt.Errorf("--tenant: no tenant %q", tenant)}
	}
	last := time.Now()
	opt.Progress = func(e store.Erasure) {
		if time.Since(last) >= 2*time.Second {
			last = time.Now()
			fmt.Fprintf(stderr, "erasing %s: %d notifications, %d deliveries so far\n", user, e.Notifications, e.Deliveries)
		}
	}
	e, err := store.EraseRecipient(ctx, pool, tenant, user, opt)
	if errors.Is(err, store.ErrNotFound) {
		return &ExitError{Code: 1, Err: fmt.Errorf("--user: tenant %s has no user %q: not in the directory and nothing stored for them (already erased?)", tenant, user)}
	}
	if err != nil {
		return fmt.Errorf("erase %s: %w (what was erased stays erased; run the command again to finish)", user, err)
	}
	r := e.Removed
	if r.Total() == 0 {
		fmt.Fprintf(stdout, "user %s was not in tenant %s's directory (removed earlier)\n", user, tenant)
	} else {
		fmt.Fprintf(stdout, "removed user %s from tenant %s's directory: %d recipient, %d %s, %d %s, %d %s\n", user, tenant,
			r.Recipient, r.Devices, pluralWord(int(r.Devices), "device", "devices"), r.Memberships, pluralWord(int(r.Memberships), "membership", "memberships"),
			r.Preferences, pluralWord(int(r.Preferences), "preference", "preferences"))
	}
	fmt.Fprintf(stdout, "erased: %d notifications, %d deliveries (%d on their way, now FAILED), %d attempt errors, %d actions, %d status events; deleted %d unread counters, %d live tickets\n",
		e.Notifications, e.Deliveries, e.Stopped, e.Attempts, e.Actions, e.StatusEvents, e.Counters, e.Tickets)
	fmt.Fprintf(stdout, "kept rows now carry the pseudonym %s\n", e.Pseudonym)
	if !e.Settled {
		return &ExitError{Code: 1, Err: fmt.Errorf("a transaction older than the removal was still running after --settle %s; "+
			"it may still write %s's notifications: run the command again", opt.Settle, user)}
	}
	return nil
}

func newDirectoryExportCmd() *cobra.Command {
	var cfgPath, tenant, format, out string
	cmd := &cobra.Command{
		Use:   "export --tenant T [--format json|yaml|jsonl] [--output FILE]",
		Short: "Write a tenant's directory out as a directory file",
		Long: `Export writes the tenant's whole directory (recipients with their devices,
groups, members, preferences, settings), read in one snapshot, as a directory
file: JSON (the default), YAML or JSONL (one entry a line, for large
directories). Importing it with herald directory import --prune changes
nothing. Without --output it goes to stdout; with it, to FILE (written whole,
then renamed, mode 0600: it holds addresses). The format follows FILE's
extension unless --format says.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if tenant == "" {
				return &ExitError{Code: 2, Err: errors.New("--tenant is required")}
			}
			if err := store.ValidID("tenant", tenant); err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("--tenant: %w", err)}
			}
			f := directory.Format(format)
			if f == "" && out != "" {
				f = directory.FormatOf(out)
			}
			switch f {
			case "", directory.JSON, directory.YAML, directory.JSONL:
			default:
				return &ExitError{Code: 2, Err: fmt.Errorf("--format must be json, yaml or jsonl, got %q", format)}
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
			return runDirectoryExport(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), pool, tenant, f, out)
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant id")
	cmd.Flags().StringVar(&format, "format", "", "json, yaml or jsonl (default: from --output's extension, else json)")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file instead of stdout")
	addConfigFlag(cmd, &cfgPath)
	return cmd
}

func runDirectoryExport(ctx context.Context, stdout, stderr io.Writer, pool *pgxpool.Pool, tenant string, format directory.Format, out string) error {
	var dir *directory.Directory
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE tenant_id = $1)`, tenant).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return &ExitError{Code: 1, Err: fmt.Errorf("--tenant: no tenant %q", tenant)}
		}
		if err := store.SetTenant(ctx, tx, tenant, ""); err != nil {
			return err
		}
		var err error
		dir, err = store.ExportDirectory(ctx, tx, tenant)
		return err
	})
	if err != nil {
		return withSchemaHint(err)
	}
	if out == "" {
		w := bufio.NewWriter(stdout)
		if err := directory.Encode(w, dir, format); err != nil {
			return err
		}
		return w.Flush()
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return &ExitError{Code: 2, Err: fmt.Errorf("--output: %w", err)}
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // gone after the rename
	w := bufio.NewWriter(tmp)
	err = directory.Encode(w, dir, format)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), out)
	}
	if err != nil {
		return fmt.Errorf("--output %s: %w", out, err)
	}
	fmt.Fprintf(stderr, "exported %d recipients, %d groups, %d members, %d preferences, %d settings to %s\n",
		len(dir.Recipients), len(dir.Groups), len(dir.Members), len(dir.Preferences), len(dir.Settings), out)
	return nil
}

// printPruned lists what a prune removed (or would remove), at most 20
// keys a kind.
func printPruned(w io.Writer, p store.Pruned, verb string) {
	if p.Total() == 0 {
		fmt.Fprintf(w, "%s nothing: the directory lists every entry the tenant has\n", verb)
		return
	}
	for _, k := range []struct {
		what string
		keys []string
	}{{"recipients", p.Recipients}, {"devices", p.Devices}, {"groups", p.Groups}, {"members", p.Members},
		{"preferences", p.Preferences}, {"settings", p.Settings}} {
		if len(k.keys) == 0 {
			continue
		}
		shown := k.keys
		more := ""
		if len(shown) > 20 {
			shown, more = shown[:20], fmt.Sprintf(" and %d more", len(k.keys)-20)
		}
		fmt.Fprintf(w, "%s %d %s: %s%s\n", verb, len(k.keys), k.what, strings.Join(shown, ", "), more)
	}
}

// runDirectoryPrune imports the file and deletes what it does not list, in
// one transaction (rolled back with dryRun), and prints what it removed.
func runDirectoryPrune(ctx context.Context, stdout, stderr io.Writer, pool *pgxpool.Pool, tenant, path string, format directory.Format, dryRun bool) error {
	if err := store.ValidID("tenant", tenant); err != nil {
		return &ExitError{Code: 2, Err: fmt.Errorf("--tenant: %w", err)}
	}
	res, err := readDirectory(stderr, path, format, nil, true)
	if err != nil {
		return err
	}
	if !res.OK() {
		printProblems(stderr, res)
		fmt.Fprintf(stderr, "%d %s in %d of %d entries: nothing imported or pruned\n",
			len(res.Problems)+res.Dropped, pluralWord(len(res.Problems)+res.Dropped, "problem", "problems"), res.Bad, res.Entries)
		return &ExitError{Code: 1}
	}
	dir := &res.Directory
	start := time.Now()
	var pruned store.Pruned
	errDryRun := errors.New("dry run")
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := store.EnsureTenant(ctx, tx, tenant, ""); err != nil {
			return &ExitError{Code: 2, Err: fmt.Errorf("--tenant: %w", err)}
		}
		if err := store.SetTenant(ctx, tx, tenant, ""); err != nil {
			return err
		}
		if err := store.ImportDirectory(ctx, tx, tenant, dir); err != nil {
			return err
		}
		var err error
		if pruned, err = store.PruneDirectory(ctx, tx, tenant, dir); err != nil {
			return err
		}
		if dryRun {
			return errDryRun
		}
		return nil
	})
	if dryRun && errors.Is(err, errDryRun) {
		fmt.Fprintf(stdout, "dry run: %s would upsert %d recipients, %d groups, %d members, %d preferences, %d settings; nothing changed\n",
			path, len(dir.Recipients), len(dir.Groups), len(dir.Members), len(dir.Preferences), len(dir.Settings))
		printPruned(stdout, pruned, "would remove")
		return nil
	}
	if err != nil {
		var ee *ExitError
		if errors.As(err, &ee) {
			return err
		}
		return fmt.Errorf("%s: %w (nothing imported or pruned)", path, withSchemaHint(err))
	}
	fmt.Fprintf(stdout, "imported %d recipients, %d groups, %d members, %d preferences, %d settings in %.1fs\n",
		len(dir.Recipients), len(dir.Groups), len(dir.Members), len(dir.Preferences), len(dir.Settings), time.Since(start).Seconds())
	printPruned(stdout, pruned, "removed")
	return nil
}
