package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

// digestMaxItems is the max_items of the digest run's rule: the most the
// rules allow, so that windows close on time rather than on count unless
// one recipient gets more than that many items in a window.
const digestMaxItems = 1000

// DigestSummary is what a digest run (Scenario.Digest set) measured: every
// delivery of the run's events is collected into a window per recipient,
// channel and team, and each window is sent as one digest when it closes.
type DigestSummary struct {
	// Window is the rule's window.
	Window time.Duration `json:"window_ns"`
	// Items is how many deliveries were collected (and DIGESTED); Windows
	// the distinct windows they were counted into; Digests the digest
	// deliveries written.
	Items   int `json:"items"`
	Windows int `json:"windows"`
	Digests int `json:"digests"`
	// ItemsPerSec is Items over first event commit → last item written:
	// the rate the relay wrote deliveries with the digest bookkeeping
	// (the windows' upserts), what a plain fanout publishes and sends.
	ItemsPerSec float64 `json:"items_per_sec"`
	// Flush is, per digest, its window's close (the time it fell due:
	// the window's end, or the item that reached max_items) → the digest
	// delivery written by the flusher; ToPlugin is the close → the
	// plugin's Send of the digest returning.
	Flush    LatencySummary `json:"flush"`
	ToPlugin LatencySummary `json:"to_plugin"`
	// Baseline is the run of the same shape without a digest rule in the
	// same report (Report.Evaluate), BaselinePerS its deliveries/s and
	// Ratio ItemsPerSec ÷ BaselinePerS.
	Baseline     string  `json:"baseline,omitempty"`
	BaselinePerS float64 `json:"baseline_deliveries_per_sec,omitempty"`
	Ratio        float64 `json:"ratio,omitempty"`
}

// digestBlock is the digest block of the digest run's rule: every channel,
// a window per recipient, channel and team.
func digestBlock(sc Scenario, quoted []string) string {
	if sc.Digest <= 0 {
		return ""
	}
	return fmt.Sprintf(`  digest {
    channels  = [%s]
    key       = "team:{{ .payload.team }}"
    window    = %q
    max_items = %d
  }
`, strings.Join(quoted, ", "), sc.Digest.String(), digestMaxItems)
}

// digestDone reports whether a digest run is complete: every expected
// item DIGESTED, no window left, every digest final and recorded by the
// sink.
func digestDone(ctx context.Context, pool *pgxpool.Pool, recorded, items int) (bool, error) {
	var digested, windows, digests, final int
	// The windows' table is small: while it holds any, the run is not
	// done, and the deliveries are not read.
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM digest_windows`).Scan(&windows); err != nil || windows > 0 {
		return false, err
	}
	err := pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM deliveries WHERE status = 'DIGESTED'),
			(SELECT count(*) FROM digest_windows),
			count(*), count(*) FILTER (WHERE status = ANY($1))
		FROM deliveries WHERE event_id LIKE 'digest:%'`, store.FinalStatuses).Scan(&digested, &windows, &digests, &final)
	if err != nil {
		return false, err
	}
	return digested >= items && windows == 0 && final == digests && recorded >= digests, nil
}

// checkDigest is the exactly-once verdict of a digest run: every expected
// item DIGESTED, one digest per window, each SENT once and received by
// the plugin once; and the run's digest figures.
func checkDigest(ctx context.Context, pool *pgxpool.Pool, sc Scenario, items int, recs []sinkRecord, commits []int64) (Check, DigestSummary, error) {
	c, d := Check{Expected: items}, DigestSummary{Window: sc.Digest}
	var digested, itemWindows, digestWindows, windowsLeft int
	var lastItem int64
	err := pool.QueryRow(ctx, `SELECT count(*),
			count(*) FILTER (WHERE status = 'SENT'), count(*) FILTER (WHERE status = 'FAILED'),
			count(*) FILTER (WHERE status <> ALL($1)),
			count(*) FILTER (WHERE event_id NOT LIKE 'digest:%'), count(*) FILTER (WHERE status = 'DIGESTED'),
			count(DISTINCT digest_window) FILTER (WHERE event_id NOT LIKE 'digest:%'),
			count(*) FILTER (WHERE event_id LIKE 'digest:%'), count(DISTINCT digest_window) FILTER (WHERE event_id LIKE 'digest:%'),
			coalesce(max(('x' || substr(replace(delivery_id::text, '-', ''), 1, 12))::bit(48)::bigint * 1000000)
				FILTER (WHERE event_id NOT LIKE 'digest:%'), 0),
			(SELECT count(*) FROM digest_windows)
		FROM deliveries`, store.FinalStatuses).Scan(&c.Rows, &c.Sent, &c.Failed, &c.Pending, &d.Items, &digested, &itemWindows,
		&d.Digests, &digestWindows, &lastItem, &windowsLeft)
	if err != nil {
		return c, d, fmt.Errorf("bench: check digests: %w", err)
	}
	d.Windows = itemWindows
	var problems []string
	if d.Items != items || digested != items {
		problems = append(problems, fmt.Sprintf("%d items collected, %d DIGESTED, want %d", d.Items, digested, items))
	}
	if d.Digests != itemWindows || digestWindows != itemWindows || windowsLeft > 0 {
		problems = append(problems, fmt.Sprintf("%d digests for %d windows of %d (%d windows not flushed), want one each",
			d.Digests, digestWindows, itemWindows, windowsLeft))
	}
	if c.Sent != d.Digests {
		problems = append(problems, fmt.Sprintf("%d digests SENT of %d (%d FAILED, %d not final)", c.Sent, d.Digests, c.Failed, c.Pending))
	}
	more, err := sentOnce(ctx, pool, &c, recs, "digests")
	if err != nil {
		return c, d, err
	}
	problems = append(problems, more...)
	c.OK = len(problems) == 0
	if c.OK {
		c.Detail = fmt.Sprintf("all %d items DIGESTED into %d digests, one per window, each SENT exactly once", items, d.Digests)
	} else {
		c.Detail = strings.Join(problems, "; ")
	}

	var first int64
	for _, t := range commits {
		if t > 0 && (first == 0 || t < first) {
			first = t
		}
	}
	if first > 0 && lastItem > first {
		d.ItemsPerSec = float64(d.Items) / time.Duration(lastItem-first).Seconds()
	}
	d.Flush, d.ToPlugin, err = flushLatencies(ctx, pool, recs)
	return c, d, err
}

// flushLatencies is, per digest, its window's close → the digest written,
// and → the plugin's Send returning (the sink's record). A window's close
// is its items' least next_attempt_at: the relay writes each item with
// its window's closes_at as it stood (its end, or now for the item that
// filled it).
func flushLatencies(ctx context.Context, pool *pgxpool.Pool, recs []sinkRecord) (LatencySummary, LatencySummary, error) {
	rows, err := pool.Query(ctx, `SELECT d.delivery_id::text, ('x' || substr(replace(d.delivery_id::text, '-', ''), 1, 12))::bit(48)::bigint * 1000000,
			(extract(epoch FROM w.closes) * 1e9)::bigint
		FROM deliveries d JOIN (SELECT digest_window, min(next_attempt_at) AS closes FROM deliveries
			WHERE digest_window IS NOT NULL AND event_id NOT LIKE 'digest:%' GROUP BY digest_window) w USING (digest_window)
		WHERE d.event_id LIKE 'digest:%'`)
	if err != nil {
		return LatencySummary{}, LatencySummary{}, fmt.Errorf("bench: flush latencies: %w", err)
	}
	defer rows.Close()
	sent := make(map[string]int64, len(recs))
	for _, r := range recs {
		if r.Outcome == "sent" && r.Attempt == 1 {
			sent[r.DeliveryID] = r.At
		}
	}
	flush, plugin := &Latencies{}, &Latencies{}
	for rows.Next() {
		var id string
		var written, closes int64
		if err := rows.Scan(&id, &written, &closes); err != nil {
			return LatencySummary{}, LatencySummary{}, err
		}
		flush.Add(time.Duration(max(written-closes, 0)))
		if at, ok := sent[id]; ok {
			plugin.Add(time.Duration(max(at-closes, 0)))
		}
	}
	if err := rows.Err(); err != nil {
		return LatencySummary{}, LatencySummary{}, err
	}
	return summarize(flush), summarize(plugin), nil
}

// digestBaselines compares each digest run with the run of the same
// shape without a digest rule in the report.
func (r *Report) digestBaselines() {
	for i := range r.Runs {
		d := r.Runs[i].Digest
		if d == nil {
			continue
		}
		d.Baseline, d.BaselinePerS, d.Ratio = "", 0, 0
		for _, b := range r.Runs {
			s, o := b.Scenario, r.Runs[i].Scenario
			if b.Digest == nil && s.Recipients == o.Recipients && s.Channels == o.Channels && s.Serve == o.Serve && b.DeliveriesPerS > 0 {
				d.Baseline, d.BaselinePerS, d.Ratio = s.Name, b.DeliveriesPerS, d.ItemsPerSec/b.DeliveriesPerS
			}
		}
	}
}

// print writes a digest run's lines.
func (d *DigestSummary) print(w io.Writer, name string, rate float64) {
	fmt.Fprintf(w, "\nDigest %s (window %s, events at %s/s): %s items into %s windows, %s digests\n", name, d.Window,
		num(rate), num(float64(d.Items)), num(float64(d.Windows)), num(float64(d.Digests)))
	fmt.Fprintf(w, "  window close → digest written (flush): p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", d.Flush.P50, d.Flush.P99, d.Flush.Max)
	fmt.Fprintf(w, "  window close → plugin Send of the digest: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", d.ToPlugin.P50, d.ToPlugin.P99, d.ToPlugin.Max)
	line := fmt.Sprintf("  deliveries collected with the digest bookkeeping: %s/s", num(d.ItemsPerSec))
	if d.Baseline != "" {
		line += fmt.Sprintf("; %s (no digest rule, same run): %s deliveries/s sent; ratio %.2f×", d.Baseline, num(d.BaselinePerS), d.Ratio)
	}
	fmt.Fprintln(w, line)
}
