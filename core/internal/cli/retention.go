package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
)

func init() {
	commands = append(commands, newRetentionCmd)
}

func newRetentionCmd() *cobra.Command {
	var cfgPath string
	cmd := &cobra.Command{Use: "retention", Short: "Retention of the partitioned tables (config block retention)"}
	status := &cobra.Command{
		Use:   "status",
		Short: "List the monthly partitions and when retention drops each, and the sweeps with their rows due",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := loadDaemon(cfgPath)
			if err != nil {
				return err
			}
			return withTx(cmd.Context(), cfgPath, func(ctx context.Context, q store.Querier) error {
				if err := runRetentionStatus(ctx, cmd.OutOrStdout(), q, retentionOf(d), time.Now()); err != nil {
					return err
				}
				return runSweepStatus(ctx, cmd.OutOrStdout(), q, retentionOf(d), time.Now())
			})
		},
	}
	apply := &cobra.Command{
		Use:   "apply",
		Short: "Drop the partitions past retention and run the sweeps now (the daemon does it every hour)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := loadDaemon(cfgPath)
			if err != nil {
				return err
			}
			err = withTx(cmd.Context(), cfgPath, func(ctx context.Context, q store.Querier) error {
				dropped, err := store.ApplyRetention(ctx, q, retentionOf(d), time.Now())
				if err != nil {
					return err
				}
				for _, p := range dropped {
					fmt.Fprintf(cmd.OutOrStdout(), "dropped %s (%s to %s)\n", p.Name, day(p.From), day(p.To))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%d partitions dropped\n", len(dropped))
				return nil
			})
			if err != nil {
				return err
			}
			// The sweeps run on a pool: each batch its own transaction.
			pool, err := connect(cmd.Context(), d)
			if err != nil {
				return err
			}
			defer pool.Close()
			return runSweepApply(cmd.Context(), cmd.OutOrStdout(), pool, retentionOf(d), time.Now(), store.SweepLimits{})
		},
	}
	addConfigFlag(status, &cfgPath)
	addConfigFlag(apply, &cfgPath)
	cmd.AddCommand(status, apply)
	return cmd
}

func retentionOf(d config.Daemon) store.Retention {
	r, _ := server.RetentionFromConfig(d.Retention)
	return r
}

func day(t time.Time) string { return t.UTC().Format("2006-01-02") }

// runRetentionStatus prints, for every partitioned table, its retention
// and each partition with its range, rows (partitionRows), size and when
// retention drops it (at now or past: on the daemon's next round).
func runRetentionStatus(ctx context.Context, w io.Writer, q store.Querier, r store.Retention, now time.Time) error {
	for _, t := range store.PartitionedTables {
		parts, err := store.Partitions(ctx, q, t)
		if err != nil {
			return err
		}
		keep := "forever (retention." + t + " not set)"
		if d := r.For(t); d > 0 {
			keep = d.String()
		}
		fmt.Fprintf(w, "%s: kept %s, %d monthly partitions\n", t, keep, len(parts))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PARTITION\tFROM\tTO\tROWS\tBYTES\tDROPPED")
		for _, p := range parts {
			rows, err := partitionRows(ctx, q, p)
			if err != nil {
				return err
			}
			drop := "never"
			if at, ok := r.DropAt(p); ok {
				drop = at.UTC().Format(time.RFC3339)
				if !at.After(now) {
					drop += " (due: next round)"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", p.Name, day(p.From), day(p.To), rows, p.Bytes, drop)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// partitionCountCap is how many rows of a partition `herald retention
// status` counts before it gives the planner's estimate instead.
const partitionCountCap = 100000

// partitionRows says how many rows partition p holds: counted exactly up
// to partitionCountCap; past it, the planner's estimate from the last
// ANALYZE marked "~N (est.)", or "100000+" when that estimate is older
// than the rows (pg_class.reltuples is 0, or -1, until a partition is
// first analyzed, which is why the estimate alone showed 0 rows for a
// partition that holds some).
func partitionRows(ctx context.Context, q store.Querier, p store.Partition) (string, error) {
	var n int64
	err := q.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+pgx.Identifier{"public", p.Name}.Sanitize()+` LIMIT $1) s`,
		partitionCountCap+1).Scan(&n)
	if err != nil {
		return "", fmt.Errorf("count rows of %s: %w", p.Name, err)
	}
	switch {
	case n <= partitionCountCap:
		return fmt.Sprint(n), nil
	case p.EstimatedRows > partitionCountCap:
		return fmt.Sprintf("~%d (est.)", p.EstimatedRows), nil
	default:
		return fmt.Sprintf("%d+", partitionCountCap), nil
	}
}

// sweepDueCap is where `herald retention status` stops counting a sweep's
// rows due (it prints "100000+").
const sweepDueCap = 100000

// runSweepStatus prints the sweeps r asks for (retention that whole
// partitions cannot give: events, archived notifications, tenants'
// shorter periods) with how many rows are past their period at now,
// counted up to sweepDueCap.
func runSweepStatus(ctx context.Context, w io.Writer, q store.Querier, r store.Retention, now time.Time) error {
	sweeps, err := r.Sweeps(ctx, q)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "sweeps (deleted in batches every round): %d\n", len(sweeps))
	if len(sweeps) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tTENANT\tKEY\tPERIOD\tROWS DUE")
	for _, s := range sweeps {
		n, err := store.SweepDue(ctx, q, s, now, sweepDueCap+1)
		if err != nil {
			return err
		}
		due := fmt.Sprint(n)
		if n > sweepDueCap {
			due = fmt.Sprintf("%d+", sweepDueCap)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Table(), s.Tenant, s.Key(), s.Period, due)
	}
	return tw.Flush()
}

// runSweepApply runs the sweeps once within l and prints what each
// deleted. A pass that stops on its limits says so; running apply again
// goes on.
func runSweepApply(ctx context.Context, w io.Writer, q store.Querier, r store.Retention, now time.Time, l store.SweepLimits) error {
	res, err := store.ApplySweeps(ctx, q, r, now, l)
	var total int64
	for _, s := range res {
		total += s.Deleted
		fmt.Fprintf(w, "swept %s of tenant %s (%s = %s): %d rows in %d statements\n", s.Table(), s.Tenant, s.Key(), s.Period, s.Deleted, s.Statements)
	}
	fmt.Fprintf(w, "%d rows swept\n", total)
	if errors.Is(err, store.ErrSweepBudget) {
		fmt.Fprintln(w, "the pass reached its limits: run apply again to go on")
		return nil
	}
	return err
}
