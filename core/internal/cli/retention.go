package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/store"
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
		Short: "List the monthly partitions and when retention drops each",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := loadDaemon(cfgPath)
			if err != nil {
				return err
			}
			return withTx(cmd.Context(), cfgPath, func(ctx context.Context, q store.Querier) error {
				return runRetentionStatus(ctx, cmd.OutOrStdout(), q, retentionOf(d), time.Now())
			})
		},
	}
	apply := &cobra.Command{
		Use:   "apply",
		Short: "Drop the partitions past retention now (the daemon does it every hour)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := loadDaemon(cfgPath)
			if err != nil {
				return err
			}
			return withTx(cmd.Context(), cfgPath, func(ctx context.Context, q store.Querier) error {
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
		},
	}
	addConfigFlag(status, &cfgPath)
	addConfigFlag(apply, &cfgPath)
	cmd.AddCommand(status, apply)
	return cmd
}

func retentionOf(d config.Daemon) store.Retention {
	return store.Retention{DeliveryAttempts: d.Retention.DeliveryAttempts, Notifications: d.Retention.Notifications,
		Deliveries: d.Retention.Deliveries}
}

func day(t time.Time) string { return t.UTC().Format("2006-01-02") }

// runRetentionStatus prints, for every partitioned table, its retention
// and each partition with its range, size and when retention drops it
// (at now or past: on the daemon's next round).
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
		fmt.Fprintln(tw, "PARTITION\tFROM\tTO\tROWS (EST.)\tBYTES\tDROPPED")
		for _, p := range parts {
			drop := "never"
			if at, ok := r.DropAt(p); ok {
				drop = at.UTC().Format(time.RFC3339)
				if !at.After(now) {
					drop += " (due: next round)"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", p.Name, day(p.From), day(p.To), p.EstimatedRows, p.Bytes, drop)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
