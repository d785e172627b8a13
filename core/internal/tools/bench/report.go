package bench

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is a whole `herald bench` invocation: the machine, the ceilings
// and every scenario's result.
type Report struct {
	Started  time.Time `json:"started"`
	Machine  Machine   `json:"machine"`
	Ceilings []Ceiling `json:"ceilings"`
	// Floors are the database floors of the fanout and single shapes
	// (RunFloor), when they ran.
	Floors []Floor  `json:"floors,omitempty"`
	Runs   []Result `json:"runs"`
	// Admin is the superadmin API benchmark, when it ran.
	Admin *AdminResult `json:"admin,omitempty"`
	// Inbox is the notification centre benchmark, when it ran.
	Inbox *InboxResult `json:"inbox,omitempty"`
	// Directory is the directory benchmark's store-level steps, when it
	// ran.
	Directory *DirectoryResult `json:"directory,omitempty"`
	// DirectoryAPI is the directory API benchmark, when it ran.
	DirectoryAPI *DirectoryAPIResult `json:"directory_api,omitempty"`
	// RLSCosts compare runs with the run of the same shape on a database
	// without row-level security, when the report has one.
	RLSCosts []RLSCost `json:"rls_costs,omitempty"`
	// EnqueueRounds are the rounds of the enqueue ceilings, when they ran.
	EnqueueRounds []EnqueueRound `json:"enqueue_rounds,omitempty"`
	Targets       []Target       `json:"targets"`
	// OK is true when every run passed its exactly-once check.
	OK bool `json:"exactly_once_ok"`
}

// RLSCost is what row-level security cost one run's fan-out: its
// deliveries/s against those of the same scenario on a database where
// row-level security is disabled (RLSOff), measured in the same report.
type RLSCost struct {
	Run  string  `json:"run"`
	Mode RLSMode `json:"mode"`
	// RelayRLS is the run's Result.RelayRLS: the relay wrote by INSERT.
	RelayRLS       bool    `json:"relay_rls_active"`
	DeliveriesPerS float64 `json:"deliveries_per_sec"`
	Baseline       string  `json:"baseline"`
	BaselinePerS   float64 `json:"baseline_deliveries_per_sec"`
	// Ratio is DeliveriesPerS ÷ BaselinePerS.
	Ratio float64 `json:"ratio"`
}

// enqueueTarget is the least ratio of herald_enqueue's events/s (as a
// producer login) to the direct INSERT's: within 10 %.
const enqueueTarget = 0.90

// rlsTarget is the least ratio to the run without row-level security that
// the pipeline's default role may reach: within 5 %.
const rlsTarget = 0.95

// floorTarget is the least ratio of the fanout run's deliveries/s to its
// database floor's (issue 30).
const floorTarget = 0.80

// singleProducersTarget is the least ratio of the single run's events/s to
// what the producers alone commit (issue 30).
const singleProducersTarget = 0.70

// Machine describes where the benchmark ran.
type Machine struct {
	CPUs      int    `json:"cpus"`
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	GoVersion string `json:"go_version"`
	Postgres  string `json:"postgres"`
	RabbitMQ  string `json:"rabbitmq"`
}

// Target is one of the performance targets and whether the run met
// it.
type Target struct {
	Name     string  `json:"name"`
	Want     string  `json:"want"`
	Got      string  `json:"got"`
	Met      bool    `json:"met"`
	Measured float64 `json:"measured"`
	// Note says what to judge the target against, when the run measured it.
	Note string `json:"note,omitempty"`
}

// NewMachine fills in what Go knows; the server versions are added by the
// caller.
func NewMachine() Machine {
	return Machine{CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GoVersion: runtime.Version()}
}

// ceiling returns the ceiling whose name has the prefix, if measured.
func (r *Report) ceiling(prefix string) (Ceiling, bool) {
	for _, c := range r.Ceilings {
		if strings.HasPrefix(c.Name, prefix) {
			return c, true
		}
	}
	return Ceiling{}, false
}

// Evaluate fills Targets and OK from the runs named fanout, latency and
// single (the standard suite's names), the scale-out and row-level
// security runs judged against the runs they vary (RLSCosts too), the
// superadmin benchmark's shapes and the inbox benchmark's endpoints and
// reads per second; other runs only count for OK.
func (r *Report) Evaluate() {
	r.OK = len(r.Runs) > 0 || len(r.Floors) > 0
	r.Targets = nil
	r.digestBaselines()
	for _, run := range r.Runs {
		if !run.Check.OK {
			r.OK = false
		}
	}
	for _, f := range r.Floors {
		if !f.Check.OK {
			r.OK = false
		}
	}
	var daemonPeak int64
	for _, run := range r.Runs {
		daemonPeak = max(daemonPeak, run.DaemonPeakBytes)
		switch run.Scenario.Name {
		case "fanout":
			r.Targets = append(r.Targets, Target{Name: "fanout throughput (10 recipients × 3 channels)",
				Want: "≥ 10,000 deliveries/s", Got: fmt.Sprintf("%s deliveries/s", num(run.DeliveriesPerS)),
				Met: run.DeliveriesPerS >= 10000, Measured: run.DeliveriesPerS})
			if f, ok := r.floor(run.Scenario); ok && f.DeliveriesPerS > 0 {
				ratio := run.DeliveriesPerS / f.DeliveriesPerS
				r.Targets = append(r.Targets, Target{Name: "fanout ÷ its database floor, deliveries/s",
					Want: fmt.Sprintf("≥ %.2f×", floorTarget), Got: fmt.Sprintf("%.2f×", ratio), Met: ratio >= floorTarget, Measured: ratio,
					Note: fmt.Sprintf("fanout floor: %s deliveries/s with no broker and no plugin, %.2f row writes per delivery",
						num(f.DeliveriesPerS), f.WritesPerDelivery)})
			}
		case "latency":
			r.Targets = append(r.Targets,
				Target{Name: fmt.Sprintf("latency p50 at %s events/s", num(run.Scenario.Rate)), Want: "< 50 ms",
					Got: fmt.Sprintf("%.1f ms", run.Latency.P50), Met: run.Latency.Count > 0 && run.Latency.P50 < 50, Measured: run.Latency.P50},
				Target{Name: fmt.Sprintf("latency p99 at %s events/s", num(run.Scenario.Rate)), Want: fmt.Sprintf("< %.0f ms", latencyP99Target),
					Got: fmt.Sprintf("%.1f ms", run.Latency.P99), Met: run.Latency.Count > 0 && run.Latency.P99 < latencyP99Target, Measured: run.Latency.P99,
					Note: warmupNote(run)})
		case "single":
			t := Target{Name: "single (1 recipient × 1 channel, confirms on)",
				Want: "≥ 4,500 events/s", Got: fmt.Sprintf("%s events/s", num(run.EventsPerSec)),
				Met: run.EventsPerSec >= 4500, Measured: run.EventsPerSec}
			// Every event is its own producer transaction, so the run
			// cannot go faster than the producers commit.
			if c, ok := r.ceiling(ProducerCeilingName); ok && c.PerSec > 0 {
				t.Note = fmt.Sprintf("producers alone commit %s events/s on this machine (no daemon): single's upper bound", num(c.PerSec))
				if c.PerSec < 4500 {
					t.Note += ", below its target"
				}
			}
			r.Targets = append(r.Targets, t)
			if c, ok := r.ceiling(ProducerCeilingName); ok && c.PerSec > 0 {
				ratio := run.EventsPerSec / c.PerSec
				t := Target{Name: "single ÷ producers alone, events/s", Want: fmt.Sprintf("≥ %.2f×", singleProducersTarget),
					Got: fmt.Sprintf("%.2f×", ratio), Met: ratio >= singleProducersTarget, Measured: ratio,
					Note: "single ≥ 2.5× a Watermill outbox forwarder tuned with confirms: not run by herald bench; " +
						"measure the peer on the same servers the same day: cd core/internal/tools/watermillpeer && go run ."}
				if f, ok := r.floor(run.Scenario); ok && f.EventsPerSec > 0 {
					t.Note = fmt.Sprintf("single floor: %s events/s (%.2f× producers alone); ", num(f.EventsPerSec), f.EventsPerSec/c.PerSec) + t.Note
				}
				r.Targets = append(r.Targets, t)
			}
		}
		if run.Soak != nil && len(run.Soak.Windows) >= 2 {
			last := run.Soak.Windows[len(run.Soak.Windows)-1]
			// A ratio of windows not all measured under the producers'
			// load compares unlike windows, and proves nothing.
			t := Target{Name: fmt.Sprintf("soak %s: last window's deliveries/s ÷ first's at %s deliveries", run.Scenario.Name, num(float64(last.Deliveries))),
				Want: fmt.Sprintf("≥ %.2f", soakTarget), Got: fmt.Sprintf("%.2f", run.Soak.Ratio),
				Met: run.Soak.Ratio >= soakTarget && run.Soak.UnderLoad, Measured: run.Soak.Ratio}
			if run.Soak.UnderLoad {
				t.Note = fmt.Sprintf("soak %s: every window under the producers' load; %s deliveries drained after the last window, in none",
					run.Scenario.Name, num(float64(run.Soak.Drained)))
			} else {
				t.Note = fmt.Sprintf("soak %s: NOT every window was measured under the producers' load", run.Scenario.Name)
			}
			if run.Soak.PairRatio > 0 {
				t.Note += fmt.Sprintf("; last two windows ÷ first two: %.2f", run.Soak.PairRatio)
			}
			r.Targets = append(r.Targets, t)
		}
	}
	// Scale-out: N daemons on the same servers against the one-daemon
	// fanout run of the same report. On one machine they share its CPUs,
	// so they cannot help there; they must not hurt. Within 5 % counts as
	// not hurting: single runs of the same scenario vary more than that.
	if one, ok := r.run("fanout"); ok && one.DeliveriesPerS > 0 {
		for _, run := range r.Runs {
			if run.Scenario.Serve > 1 && run.Scenario.Recipients == one.Scenario.Recipients && run.Scenario.Channels == one.Scenario.Channels {
				ratio := run.DeliveriesPerS / one.DeliveriesPerS
				r.Targets = append(r.Targets, Target{Name: fmt.Sprintf("scale-out: %d daemons vs one (%s)", run.Scenario.Serve, run.Scenario.Name),
					Want: "≥ 0.95× (must not hurt)", Got: fmt.Sprintf("%.2f×", ratio), Met: ratio >= 0.95, Measured: ratio})
			}
		}
	}
	// Row-level security: every run against the run of the same shape on
	// a database without it. The pipeline's default role must stay within
	// 5 %; other modes are reported as they are.
	r.RLSCosts = nil
	if base, ok := r.rlsBaseline(); ok && base.DeliveriesPerS > 0 {
		for _, run := range r.Runs {
			if run.Scenario.RLS == RLSOff || !sameShape(run.Scenario, base.Scenario) {
				continue
			}
			ratio := run.DeliveriesPerS / base.DeliveriesPerS
			r.RLSCosts = append(r.RLSCosts, RLSCost{Run: run.Scenario.Name, Mode: run.Scenario.RLS, RelayRLS: run.RelayRLS,
				DeliveriesPerS: run.DeliveriesPerS, Baseline: base.Scenario.Name, BaselinePerS: base.DeliveriesPerS, Ratio: ratio})
			if run.Scenario.RLS == RLSWorker {
				t := Target{
					Name: fmt.Sprintf("RLS cost: %s (%s, relay by %s) vs %s", run.Scenario.Name, run.Scenario.RLS,
						relayWrite(run.RelayRLS), base.Scenario.Name),
					Want: fmt.Sprintf("≥ %.2f× (within 5 %%)", rlsTarget), Got: fmt.Sprintf("%.2f×", ratio),
					Met: ratio >= rlsTarget, Measured: ratio}
				// Both write by COPY and run the same statements otherwise:
				// a large difference either way is variance between runs.
				if !run.RelayRLS && !base.RelayRLS && (ratio < rlsTarget || ratio > 2-rlsTarget) {
					t.Note = fmt.Sprintf("%s and %s both wrote deliveries by COPY; a difference of %+.0f %% between them is "+
						"variance between single runs on this machine rather than a cost: run --scenario rls again to judge",
						run.Scenario.Name, base.Scenario.Name, (ratio-1)*100)
				}
				r.Targets = append(r.Targets, t)
			}
		}
	}
	// The relay's fanout while recipients are written, against the same
	// run without the writes: it must not drop (within 10 %: single runs
	// vary more than 5 % here, see MEASUREMENTS.md).
	if base, ok := r.run("fanout"); ok && base.DeliveriesPerS > 0 {
		for _, run := range r.Runs {
			if run.Scenario.DirectoryWrites == 0 || !sameShape(run.Scenario, base.Scenario) {
				continue
			}
			ratio := run.DeliveriesPerS / base.DeliveriesPerS
			r.Targets = append(r.Targets, Target{
				Name: fmt.Sprintf("fanout while the directory is written (%s rows/s) vs without", num(run.DirectoryRowsPerS)),
				Want: "≥ 0.90× (must not drop)", Got: fmt.Sprintf("%.2f×", ratio), Met: ratio >= 0.90, Measured: ratio,
				Note: fmt.Sprintf("%s: %s directory rows written during the run (asked %s rows/s)", run.Scenario.Name,
					num(float64(run.DirectoryRows)), num(float64(run.Scenario.DirectoryWrites)))})
		}
	}
	r.sourceTargets()
	// herald_enqueue against the direct INSERT it replaced, measured in
	// the same run by EnqueueCeilings: within 10 % of the direct INSERT's
	// events/s, by Herald's login through the same pool (only the
	// statement differs) and by a producer login (its own pool).
	if direct, ok := r.ceiling(EnqueueDirectName); ok && direct.PerSec > 0 {
		for k, way := range []struct{ name, target string }{
			{EnqueueOwnerName, "herald_enqueue vs direct INSERT (Herald's login, same pool), events/s"},
			{EnqueueProducerName, "herald_enqueue as a producer login vs direct INSERT, events/s"},
		} {
			fn, ok := r.ceiling(way.name)
			if !ok {
				continue
			}
			ratio := fn.PerSec / direct.PerSec
			t := Target{Name: way.target, Want: fmt.Sprintf("≥ %.2f× (within 10 %%)", enqueueTarget), Got: fmt.Sprintf("%.2f×", ratio),
				Met: ratio >= enqueueTarget, Measured: ratio}
			if ratios := r.enqueueRatios(k + 1); len(ratios) > 0 {
				t.Note = fmt.Sprintf("over all %d rounds; the rounds' own ratios: median %.2f×, from %.2f× to %.2f×",
					len(ratios), median(ratios), slices.Min(ratios), slices.Max(ratios))
			}
			if direct, fn := r.enqueueCPU(0), r.enqueueCPU(k+1); len(direct) > 0 && len(fn) > 0 {
				t.Note += fmt.Sprintf("; PostgreSQL's CPU per event (median of the rounds): direct INSERT %.0f µs, this way %.0f µs (%.2f×)",
					median(direct), median(fn), median(fn)/median(direct))
			}
			r.Targets = append(r.Targets, t)
		}
	}
	if len(r.Runs) > 0 {
		r.Targets = append(r.Targets, Target{Name: "daemon peak RSS", Want: fmt.Sprintf("< %d MiB", DaemonRSSTarget>>20),
			Got: mib(daemonPeak), Met: daemonPeak > 0 && daemonPeak < DaemonRSSTarget, Measured: float64(daemonPeak) / (1 << 20)})
	}
	if a := r.Admin; a != nil {
		for _, s := range a.Shapes {
			t := Target{Name: fmt.Sprintf("superadmin list p99, %s (%s rows)", s.Name, num(float64(a.Scenario.Rows))),
				Want: fmt.Sprintf("< %.0f ms", AdminTarget), Got: fmt.Sprintf("%.1f ms", s.Latency.P99), Met: s.Met(), Measured: s.Latency.P99}
			if s.Failed > 0 {
				t.Got += fmt.Sprintf(", %d failed", s.Failed)
			}
			r.Targets = append(r.Targets, t)
		}
	}
	if in := r.Inbox; in != nil {
		r.Targets = append(r.Targets, in.targets()...)
	}
}

// Err says why the invocation failed, or returns nil: a run that failed
// its exactly-once check, or superadmin requests that were not answered.
func (r *Report) Err() error {
	var errs []error
	if (len(r.Runs) > 0 || len(r.Floors) > 0) && !r.OK {
		errs = append(errs, errors.New("exactly-once check failed"))
	}
	if r.Admin != nil && r.Admin.Failed > 0 {
		errs = append(errs, fmt.Errorf("%d superadmin requests were not answered 200", r.Admin.Failed))
	}
	if r.Inbox != nil && r.Inbox.Failed > 0 {
		errs = append(errs, fmt.Errorf("%d inbox requests were not answered as expected", r.Inbox.Failed))
	}
	if r.Inbox != nil && !r.Inbox.Check.OK {
		errs = append(errs, errors.New("inbox check failed: "+r.Inbox.Check.Detail))
	}
	if r.DirectoryAPI != nil && r.DirectoryAPI.Failed > 0 {
		errs = append(errs, fmt.Errorf("%d directory API requests were not answered 200 or 201: %s", r.DirectoryAPI.Failed, r.DirectoryAPI.Detail))
	}
	if len(r.Runs) == 0 && len(r.Floors) == 0 && r.Admin == nil && r.Inbox == nil && r.Directory == nil && r.DirectoryAPI == nil && len(r.Ceilings) == 0 {
		errs = append(errs, errors.New("nothing ran"))
	}
	return errors.Join(errs...)
}

// sourceLagTarget is the most the source stage's lag (event commit in the
// source → its row in Herald) may take at p99 at half load, in ms.
const sourceLagTarget = 1000

// sourceTargets adds the targets of the source path: the relay's fanout
// throughput through a source database within 10 % of the direct path's
// in the same report (the mean deliveries/s of the runs of the fanout
// run's shape with a source over those without: --scenario source runs
// them in the order direct, source, source, direct), and the source
// stage's lag p99 under 1 s in every paced source run.
func (r *Report) sourceTargets() {
	base, ok := r.run("fanout")
	if !ok {
		return
	}
	var direct, via []Result
	for _, run := range r.Runs {
		sc := run.Scenario
		if !sameShape(sc, base.Scenario) || sc.RLS != base.Scenario.RLS || sc.Window != 0 || sc.DirectoryWrites != 0 || sc.MigrationLevel != 0 {
			continue
		}
		if sc.Source {
			via = append(via, run)
		} else {
			direct = append(direct, run)
		}
	}
	if len(direct) > 0 && len(via) > 0 {
		d, v := meanDeliveries(direct), meanDeliveries(via)
		if d > 0 {
			ratio := v / d
			r.Targets = append(r.Targets, Target{Name: "fanout through a source database vs direct, deliveries/s",
				Want: "≥ 0.90× (within 10 %)", Got: fmt.Sprintf("%.2f×", ratio), Met: ratio >= 0.90, Measured: ratio,
				Note: fmt.Sprintf("mean of %s over mean of %s", runRates(via), runRates(direct))})
		}
	}
	for _, run := range r.Runs {
		if !run.Scenario.Source || run.Scenario.Rate <= 0 || run.ToHerald == nil {
			continue
		}
		lag := run.ToHerald
		r.Targets = append(r.Targets, Target{
			Name: fmt.Sprintf("source stage lag p99 at %s events/s (%s)", num(run.Scenario.Rate), run.Scenario.Name),
			Want: fmt.Sprintf("< %d ms", sourceLagTarget), Got: fmt.Sprintf("%.1f ms", lag.P99),
			Met: lag.Count > 0 && lag.P99 < sourceLagTarget, Measured: lag.P99,
			Note: fmt.Sprintf("event commit in the source → its row in Herald: p50 %.1f ms, max %.1f ms over %s events; to the plugin's Send: p50 %.1f ms, p99 %.1f ms",
				lag.P50, lag.Max, num(float64(lag.Count)), run.Latency.P50, run.Latency.P99)})
	}
}

// meanDeliveries is the runs' mean deliveries/s.
func meanDeliveries(runs []Result) float64 {
	var sum float64
	for _, run := range runs {
		sum += run.DeliveriesPerS
	}
	return sum / float64(len(runs))
}

// runRates names the runs with their deliveries/s.
func runRates(runs []Result) string {
	parts := make([]string, len(runs))
	for i, run := range runs {
		parts[i] = fmt.Sprintf("%s %s/s", run.Scenario.Name, num(run.DeliveriesPerS))
	}
	return strings.Join(parts, ", ")
}

// enqueueRatios returns, per round of the enqueue ceilings, way w's
// events/s over the direct INSERT's.
func (r *Report) enqueueRatios(w int) []float64 {
	var ratios []float64
	for _, rd := range r.EnqueueRounds {
		if len(rd.PerSec) > w && rd.PerSec[0] > 0 {
			ratios = append(ratios, rd.PerSec[w]/rd.PerSec[0])
		}
	}
	return ratios
}

// enqueueCPU returns, per round of the enqueue ceilings that measured it,
// way w's server CPU per event in µs.
func (r *Report) enqueueCPU(w int) []float64 {
	var us []float64
	for _, rd := range r.EnqueueRounds {
		if len(rd.ServerCPU) > w && rd.ServerCPU[w] > 0 {
			us = append(us, rd.ServerCPU[w])
		}
	}
	return us
}

// median returns the median of vs (not empty).
func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// rlsBaseline returns the report's first run without row-level security.
func (r *Report) rlsBaseline() (Result, bool) {
	for _, run := range r.Runs {
		if run.Scenario.RLS == RLSOff {
			return run, true
		}
	}
	return Result{}, false
}

// sameShape reports whether two scenarios differ at most in name, size,
// cap and row-level security mode.
func sameShape(a, b Scenario) bool {
	return a.Recipients == b.Recipients && a.Channels == b.Channels && a.Producers == b.Producers &&
		a.Rate == b.Rate && a.Serve == b.Serve
}

// floor returns the report's database floor of sc's shape (recipients ×
// channels), if it ran.
func (r *Report) floor(sc Scenario) (Floor, bool) {
	for _, f := range r.Floors {
		if f.Scenario.Recipients == sc.Recipients && f.Scenario.Channels == sc.Channels {
			return f, true
		}
	}
	return Floor{}, false
}

// run returns the report's run of that scenario name.
func (r *Report) run(name string) (Result, bool) {
	for _, run := range r.Runs {
		if run.Scenario.Name == name {
			return run, true
		}
	}
	return Result{}, false
}

// Print writes the report as tables for people.
func (r *Report) Print(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "\nHerald benchmark, %s\n", r.Started.Format(time.RFC3339))
	fmt.Fprintf(w, "machine: %d CPUs, %s/%s, %s; %s; %s\n\n", m.CPUs, m.GOOS, m.GOARCH, m.GoVersion, m.Postgres, m.RabbitMQ)
	if len(r.Ceilings) > 0 {
		fmt.Fprintln(w, "Raw ceilings of the same servers, same run:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "ceiling\t\tops\tseconds\trate\t")
		for _, c := range r.Ceilings {
			fmt.Fprintf(tw, "%s\t\t%s\t%.2f\t%s %s\t\n", c.Name, num(float64(c.Ops)), c.Elapsed.Seconds(), num(c.PerSec), c.Unit)
		}
		_ = tw.Flush()
		fmt.Fprintln(w)
	}
	if len(r.Floors) > 0 {
		r.printFloors(w)
	}
	if len(r.EnqueueRounds) > 0 {
		fmt.Fprintln(w, "Enqueue ceilings by round (events/s; the ways alternate, each round in a rotated order):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "round\tevents\tdirect INSERT\therald_enqueue, Herald's login\therald_enqueue, producer login\tratios\tserver CPU µs/event\t")
		for i, rd := range r.EnqueueRounds {
			if len(rd.PerSec) != 3 || rd.PerSec[0] <= 0 {
				continue
			}
			cpu := "-"
			if len(rd.ServerCPU) == 3 {
				cpu = fmt.Sprintf("%.0f %.0f %.0f", rd.ServerCPU[0], rd.ServerCPU[1], rd.ServerCPU[2])
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%.2f× %.2f×\t%s\t\n", i+1, num(float64(rd.Events)), num(rd.PerSec[0]), num(rd.PerSec[1]),
				num(rd.PerSec[2]), rd.PerSec[1]/rd.PerSec[0], rd.PerSec[2]/rd.PerSec[0], cpu)
		}
		_ = tw.Flush()
		fmt.Fprintln(w)
	}
	if len(r.Runs) > 0 {
		r.printRuns(w)
	}
	if len(r.RLSCosts) > 0 {
		r.printRLSCosts(w)
	}
	for _, run := range r.Runs {
		if run.Soak != nil {
			run.Soak.print(w, run.Scenario.Name, run.Check)
		}
		if run.Digest != nil {
			run.Digest.print(w, run.Scenario.Name, run.Scenario.Rate)
		}
	}
	if r.Admin != nil {
		if len(r.Runs) > 0 {
			fmt.Fprintln(w)
		}
		r.Admin.print(w)
	}
	if r.Inbox != nil {
		if len(r.Runs) > 0 || r.Admin != nil {
			fmt.Fprintln(w)
		}
		r.Inbox.print(w)
	}
	if r.Directory != nil {
		fmt.Fprintln(w)
		r.Directory.print(w)
	}
	if r.DirectoryAPI != nil {
		fmt.Fprintln(w)
		r.DirectoryAPI.print(w)
	}
	if len(r.Targets) > 0 {
		fmt.Fprintln(w, "\nTargets:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, t := range r.Targets {
			met := "met"
			if !t.Met {
				met = "NOT MET"
			}
			fmt.Fprintf(tw, "  %s\twant %s\tgot %s\t%s\n", t.Name, t.Want, t.Got, met)
		}
		_ = tw.Flush()
		for _, t := range r.Targets {
			if t.Note != "" {
				fmt.Fprintf(w, "  %s\n", t.Note)
			}
		}
	}
	if len(r.Runs) > 0 || len(r.Floors) > 0 {
		if r.OK {
			fmt.Fprintln(w, "\nexactly-once check: every expected delivery SENT exactly once in every run")
		} else {
			fmt.Fprintln(w, "\nexactly-once check: FAILED (see above)")
		}
	}
	if r.Admin != nil {
		if r.Admin.Failed == 0 {
			fmt.Fprintln(w, "\nsuperadmin API: every request answered 200")
		} else {
			fmt.Fprintf(w, "\nsuperadmin API: %d requests NOT answered 200 (see above)\n", r.Admin.Failed)
		}
	}
	if r.Inbox != nil {
		fmt.Fprintf(w, "\ninbox counters: %s\n", r.Inbox.Check.Detail)
		if r.Inbox.Failed > 0 {
			fmt.Fprintf(w, "inbox API: %d requests NOT answered as expected (see above)\n", r.Inbox.Failed)
		}
	}
}

// printRuns writes the pipeline runs.
func (r *Report) printRuns(w io.Writer) {
	rabbit, hasRabbit := r.ceiling("rabbitmq")
	pg, hasPG := r.ceiling("postgresql")
	producers, hasProducers := r.ceiling(ProducerCeilingName)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tserve\tevents\trcpt×ch\trate\tevents/s\tdeliveries/s\t÷rabbit\t÷pg copy\t÷producers\t÷floor\tp50 ms\tp95 ms\tp99 ms\tdaemon RSS\tplugin RSS\texactly once\t")
	for _, run := range r.Runs {
		s := run.Scenario
		rate := "max"
		if s.Rate > 0 {
			rate = num(s.Rate) + "/s"
		}
		// Deliveries are compared with the servers' ceilings, events
		// with the producers'.
		ratio := func(v float64, c Ceiling, ok bool) string {
			if !ok || c.PerSec == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", v/c.PerSec)
		}
		verdict := "yes"
		if !run.Check.OK {
			verdict = "NO"
		}
		// Deliveries are compared with the floor of the same shape.
		toFloor := "-"
		if f, ok := r.floor(s); ok && f.DeliveriesPerS > 0 {
			toFloor = fmt.Sprintf("%.2f", run.DeliveriesPerS/f.DeliveriesPerS)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d×%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t%.1f\t%s\t%s\t%s\t\n",
			s.Name, s.Serve, num(float64(run.EventsEnqueued)), s.Recipients, s.Channels, rate,
			num(run.EventsPerSec), num(run.DeliveriesPerS), ratio(run.DeliveriesPerS, rabbit, hasRabbit),
			ratio(run.DeliveriesPerS, pg, hasPG), ratio(run.EventsPerSec, producers, hasProducers), toFloor,
			run.Latency.P50, run.Latency.P95, run.Latency.P99, mib(run.DaemonPeakBytes), mib(run.PluginPeakBytes), verdict)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	width := 8
	for _, run := range r.Runs {
		width = max(width, len(run.Scenario.Name))
	}
	fmt.Fprintln(w, "Where the time goes (p50 / p99 ms): commit → delivery rows written (relay); rows → SENT recorded (publisher, broker, listener, plugin)")
	for _, run := range r.Runs {
		procs := ""
		if run.Scenario.Serve > 1 && run.DaemonProcs > 0 {
			procs = fmt.Sprintf("; each daemon GOMAXPROCS=%d", run.DaemonProcs)
		}
		fmt.Fprintf(w, "  %-*s relay %.1f / %.1f   delivery %.1f / %.1f   (the benchmark process itself: %.0f%% of a core%s)\n", width, run.Scenario.Name,
			run.ToFanout.P50, run.ToFanout.P99, run.ToRecord.P50, run.ToRecord.P99, run.BenchCPU*100, procs)
	}
	fmt.Fprintln(w, "Where the p99 comes from (medians of the trips at or above it, ms): commit → relay claim (wake-up); claim → row written (relay); row → plugin Send (commit, handoff, broker, listener)")
	for _, run := range r.Runs {
		if t := run.Tail; t.Count > 0 {
			fifths := make([]string, len(t.Fifths))
			for i, f := range t.Fifths {
				fifths[i] = fmt.Sprintf("%.1f", f)
			}
			fmt.Fprintf(w, "  %-*s %d trips ≥ %.1f ms: wake %.1f   relay %.1f   deliver %.1f   p99 by fifth of the run: %s\n", width, run.Scenario.Name,
				t.Count, t.From, t.Wake, t.Relay, t.Deliver, strings.Join(fifths, " / "))
		}
	}
	fmt.Fprintln(w)
	for _, run := range r.Runs {
		fmt.Fprintf(w, "%s: %s\n", run.Scenario.Name, run.Check.Detail)
		if run.Dir != "" {
			fmt.Fprintf(w, "%s: configs and logs kept in %s\n", run.Scenario.Name, run.Dir)
		}
	}
}

// printFloors writes the database floors and the row writes per delivery
// each observed.
func (r *Report) printFloors(w io.Writer) {
	fmt.Fprintln(w, "Database floor, same run: the pipeline's own code and SQL with no broker and no plugin (herald_worker, RLS on):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "floor\trcpt×ch\tevents\tdeliveries\tseconds\tevents/s\tdeliveries/s\twrites/delivery\tGo CPU\texactly once\t")
	for _, f := range r.Floors {
		verdict := "yes"
		if !f.Check.OK {
			verdict = "NO"
		}
		fmt.Fprintf(tw, "%s\t%d×%d\t%s\t%s\t%.2f\t%s\t%s\t%.2f\t%.0f%%\t%s\t\n", f.Scenario.Name, f.Scenario.Recipients, f.Scenario.Channels,
			num(float64(f.EventsEnqueued)), num(float64(f.Deliveries)), f.Elapsed.Seconds(), num(f.EventsPerSec), num(f.DeliveriesPerS),
			f.WritesPerDelivery, f.GoCPU*100, verdict)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "Row writes per delivery (pg_stat_user_tables; HOT: updates that wrote no index entry):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "floor\ttable\tinserts\tupdates\tHOT\tdeletes\ttotal\t")
	for _, f := range r.Floors {
		for _, t := range f.Writes {
			fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", f.Scenario.Name, t.Table, f.perDelivery(t.Inserts),
				f.perDelivery(t.Updates), f.perDelivery(t.HOTUpdates), f.perDelivery(t.Deletes), f.perDelivery(t.Rows()))
		}
	}
	_ = tw.Flush()
	for _, f := range r.Floors {
		fmt.Fprintf(w, "  %s: %s; %s\n", f.Scenario.Name, f.Concurrency, f.Check.Detail)
		if f.Redelivered > 0 {
			fmt.Fprintf(w, "  %s: %d messages given back by the listener and handled again\n", f.Scenario.Name, f.Redelivered)
		}
	}
	fmt.Fprintln(w)
}

// printRLSCosts writes one "RLS cost" line per run compared with the run
// without row-level security.
func (r *Report) printRLSCosts(w io.Writer) {
	base := r.RLSCosts[0]
	fmt.Fprintf(w, "\nRLS cost on fan-out, same run: deliveries/s against %s (%s/s, %s, relay by COPY):\n",
		base.Baseline, num(base.BaselinePerS), RLSOff)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range r.RLSCosts {
		fmt.Fprintf(tw, "  RLS cost %s\t%.2f× (%+.0f %%)\t%s/s\t%s, relay by %s\n", c.Run, c.Ratio, (c.Ratio-1)*100,
			num(c.DeliveriesPerS), c.Mode, relayWrite(c.RelayRLS))
	}
	_ = tw.Flush()
}

// print writes the superadmin benchmark: one line per shape.
func (a *AdminResult) print(w io.Writer) {
	sc := a.Scenario
	fmt.Fprintf(w, "Superadmin API, %s notifications (%d tenants × %s users, %d days; %s with indexes; loaded in %.1f s, ANALYZE %.1f s),\n",
		num(float64(sc.Rows)), sc.Tenants, num(float64(sc.UsersPerTenant)), sc.Days, mib(a.TableBytes), a.Load.Seconds(), a.Analyze.Seconds())
	fmt.Fprintf(w, "served in-process over loopback HTTP; %d requests per shape one at a time after %d unmeasured, limit %d:\n",
		sc.Requests, sc.Warmup, sc.Limit)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\trequests\trows/page\tp50 ms\tp95 ms\tp99 ms\tmax ms\tfailed\tp99 < 50 ms\t")
	line := func(s ShapeResult, perPage string, met string) {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%s\t\n", s.Name, s.Latency.Count, perPage,
			s.Latency.P50, s.Latency.P95, s.Latency.P99, s.Latency.Max, s.Failed, met)
	}
	failed := 0
	for _, s := range a.Shapes {
		perPage := "-"
		if s.Latency.Count > 0 {
			perPage = fmt.Sprintf("%.1f", float64(s.Items)/float64(s.Latency.Count))
		}
		met := "met"
		if !s.Met() {
			met = "MISSED"
		}
		failed += s.Failed
		line(s, perPage, met)
	}
	line(ShapeResult{Name: "every list request", Latency: a.Overall, Failed: failed}, "", "")
	line(a.Stats, "", "(no target)")
	_ = tw.Flush()
	for _, s := range append(a.Shapes[:len(a.Shapes):len(a.Shapes)], a.Stats) {
		if s.Detail != "" {
			fmt.Fprintf(w, "  %s: %s\n", s.Name, s.Detail)
		}
	}
	fmt.Fprintln(w, "  e.g.:")
	for _, s := range a.Shapes {
		ex, err := url.QueryUnescape(s.Example)
		if err != nil {
			ex = s.Example
		}
		fmt.Fprintf(w, "    %-36s GET /v1/admin/notifications?%s\n", s.Name, abbreviate(ex, 110))
	}
	if a.Database != "" {
		fmt.Fprintf(w, "  database kept: %s\n", a.Database)
	}
}

// abbreviate shortens s to n bytes with an ellipsis (cursors are long).
func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// num formats n with thousands separators and no decimals.
func num(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func mib(b int64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

// latencyP99Target is the p99 the latency run (half the fan-out's rate)
// must stay under, in ms (issue 30).
const latencyP99Target = 100.0

// warmupNote says what a run's warm-up left out of its latencies ("" when
// it had none).
func warmupNote(run Result) string {
	w := run.WarmupLatency
	if w == nil {
		return ""
	}
	return fmt.Sprintf("after a warm-up of %s events (the database growing from empty), left out: p50 %.1f ms, p99 %.1f ms over the warm-up",
		num(float64(run.Scenario.Warmup)), w.P50, w.P99)
}

// targets judges the inbox benchmark: p99 of each read endpoint under the
// concurrent readers, and their reads per second.
func (in *InboxResult) targets() []Target {
	sc := in.Scenario
	under := fmt.Sprintf("%d readers, %s rows", sc.Readers, num(float64(sc.Rows)))
	var out []Target
	for _, e := range in.Reads {
		want := InboxPageTarget
		if e.Name == "unread-count" {
			want = InboxCountTarget
		}
		t := Target{Name: fmt.Sprintf("inbox %s p99 (%s)", e.Name, under), Want: fmt.Sprintf("< %.0f ms", want),
			Got: fmt.Sprintf("%.1f ms", e.Latency.P99), Met: e.Met(want), Measured: e.Latency.P99}
		if e.Failed > 0 {
			t.Got += fmt.Sprintf(", %d failed", e.Failed)
		}
		out = append(out, t)
	}
	t := Target{Name: fmt.Sprintf("inbox reads/s (%s)", under), Want: fmt.Sprintf("≥ %s reads/s", num(InboxReadsTarget)),
		Got: fmt.Sprintf("%s reads/s", num(in.ReadsPerSec)), Met: in.ReadsPerSec >= InboxReadsTarget, Measured: in.ReadsPerSec}
	if in.ReadCPU > 0 {
		t.Note = fmt.Sprintf("inbox: the API and its %d readers share this process, which used %.2f of the machine's %d cores while measured; "+
			"PostgreSQL ran on the same cores", sc.Readers, in.ReadCPU, runtime.NumCPU())
	}
	return append(out, t)
}

// print writes the inbox benchmark: the lone reader, the concurrent
// readers, the writers and the check.
func (in *InboxResult) print(w io.Writer) {
	sc := in.Scenario
	fmt.Fprintf(w, "Inbox API, %s notifications (%s of them shared: %s events × %d sharers) of %s users in %d tenants, %d days;\n",
		num(float64(sc.Rows)), num(float64(in.SharedRows)), num(float64(sc.SharedEvents)), sc.Sharers, num(float64(sc.Users)), sc.Tenants, sc.Days)
	fmt.Fprintf(w, "%s with indexes (loaded in %.1f s, counters %.1f s, VACUUM (ANALYZE) %.1f s); served in-process over loopback HTTP,\n",
		mib(in.TableBytes), in.Load.Seconds(), in.Counters.Seconds(), in.Vacuum.Seconds())
	fmt.Fprintf(w, "API pool %d connections, a token per user. A round is one random user's unread count, bell and first page (limit %d).\n",
		sc.APIConns, sc.Limit)
	fmt.Fprintf(w, "Phases: one reader alone (%d rounds: the service time, no target); %d readers (%s measured after %s unmeasured);\n",
		sc.Baseline, sc.Readers, sc.ReadFor, sc.Warmup)
	fmt.Fprintf(w, "%d writers marking random unread notifications read and acting on random shared ones (%.0f %% actions), %.1f s.\n",
		sc.Writers, sc.ActionShare*100, in.WriteTime.Seconds())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\trequest\trequests\tper s\tp50 ms\tp95 ms\tp99 ms\tmax ms\titems/answer\tfailed\ttarget\t")
	line := func(phase string, e EndpointResult, target string) {
		perAnswer, perSec := "", "-"
		if e.Latency.Count > 0 && (e.Name == "unread-count" || e.Name == "bell" || e.Name == "list") {
			perAnswer = fmt.Sprintf("%.1f", float64(e.Items)/float64(e.Latency.Count))
		}
		if e.PerSec > 0 {
			perSec = num(e.PerSec)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%d\t%s\t\n", phase, e.Request, num(float64(e.Latency.Count)), perSec,
			e.Latency.P50, e.Latency.P95, e.Latency.P99, e.Latency.Max, perAnswer, e.Failed, target)
	}
	judge := func(e EndpointResult) string {
		want := InboxPageTarget
		if e.Name == "unread-count" {
			want = InboxCountTarget
		}
		if e.Met(want) {
			return fmt.Sprintf("p99 < %.0f ms met", want)
		}
		return fmt.Sprintf("p99 < %.0f ms MISSED", want)
	}
	for _, e := range in.Baseline {
		line("alone", e, "")
	}
	readers := fmt.Sprintf("%d readers", sc.Readers)
	all := EndpointResult{Request: "every read", PerSec: in.ReadsPerSec}
	for _, e := range in.Reads {
		line(readers, e, judge(e))
		all.Latency.Count += e.Latency.Count
		all.Failed += e.Failed
	}
	reads := fmt.Sprintf("≥ %s/s met", num(InboxReadsTarget))
	if in.ReadsPerSec < InboxReadsTarget {
		reads = fmt.Sprintf("≥ %s/s MISSED", num(InboxReadsTarget))
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\t\t\t\t\t%d\t%s\t\n", readers, all.Request, num(float64(all.Latency.Count)), num(all.PerSec), all.Failed, reads)
	writers := fmt.Sprintf("%d writers", sc.Writers)
	all = EndpointResult{Request: "every write", PerSec: in.WritesPerSec}
	for _, e := range in.Writes {
		line(writers, e, "")
		all.Latency.Count += e.Latency.Count
		all.Failed += e.Failed
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\t\t\t\t\t%d\t(no target)\t\n", writers, all.Request, num(float64(all.Latency.Count)), num(all.PerSec), all.Failed)
	_ = tw.Flush()
	for _, e := range in.Writes {
		if e.Name == "action" {
			fmt.Fprintf(w, "  actions: %s won (200), %s already handled by another sharer (409)\n", num(float64(e.Items)), num(float64(e.Conflicts)))
		}
	}
	for _, e := range append(append(in.Baseline[:len(in.Baseline):len(in.Baseline)], in.Reads...), in.Writes...) {
		if e.Detail != "" {
			fmt.Fprintf(w, "  %s: %s\n", e.Request, e.Detail)
		}
	}
	if in.Database != "" {
		fmt.Fprintf(w, "  database kept: %s\n", in.Database)
	}
}
