package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestReportProducerCeiling checks that the single run is put next to what
// the producers alone committed: a ratio column and a line under the
// targets.
func TestReportProducerCeiling(t *testing.T) {
	t.Parallel()
	rep := Report{
		Ceilings: []Ceiling{
			newCeiling("postgresql copy (batch 1000)", "rows/s", 200000, 2*time.Second),
			newCeiling(ProducerCeilingName+" (8 producers, one event per transaction)", "events/s", 20000, 5*time.Second),
		},
		Runs: []Result{{Scenario: Scenario{Name: "single", Recipients: 1, Channels: 1, Serve: 1},
			EventsEnqueued: 10000, EventsPerSec: 2000, DeliveriesPerS: 2000, Check: Check{OK: true}}},
	}
	rep.Evaluate()
	var single Target
	for _, tg := range rep.Targets {
		if strings.HasPrefix(tg.Name, "single") {
			single = tg
		}
	}
	const note = "producers alone commit 4,000 events/s on this machine (no daemon): single's upper bound, below its target"
	if single.Note != note {
		t.Errorf("single target note = %q, want %q", single.Note, note)
	}
	var out bytes.Buffer
	rep.Print(&out)
	lines := strings.Split(out.String(), "\n")
	header, row := -1, -1
	for i, l := range lines {
		if strings.Contains(l, "÷producers") {
			header = i
		}
		if strings.HasPrefix(strings.TrimSpace(l), "single ") && header >= 0 && row < 0 {
			row = i
		}
	}
	if header < 0 || row < 0 {
		t.Fatalf("no ÷producers column or no single row:\n%s", out.String())
	}
	// 2,000 events/s of 4,000: 0.50; 2,000 deliveries/s of 100,000 rows/s: 0.02.
	if f := strings.Fields(lines[row]); !strings.Contains(strings.Join(f, " "), "- 0.02 0.50") {
		t.Errorf("single row = %q, want ÷rabbit, ÷pg copy, ÷producers = -, 0.02, 0.50", lines[row])
	}
	if !strings.Contains(out.String(), "\n  "+note+"\n") {
		t.Errorf("report has no line %q:\n%s", note, out.String())
	}
}

// TestReportScaleOut: each run with more daemons is judged against the
// one-daemon fanout run of the same report.
func TestReportScaleOut(t *testing.T) {
	t.Parallel()
	fan := Scenario{Name: "fanout", Recipients: 10, Channels: 3, Serve: 1}
	s2, s3 := fan, fan
	s2.Name, s2.Serve = "scale-2", 2
	s3.Name, s3.Serve = "scale-3", 3
	rep := Report{Runs: []Result{
		{Scenario: fan, DeliveriesPerS: 10000, Check: Check{OK: true}},
		{Scenario: s2, DeliveriesPerS: 9800, Check: Check{OK: true}},
		{Scenario: s3, DeliveriesPerS: 8000, Check: Check{OK: true}},
	}}
	rep.Evaluate()
	got := map[string]Target{}
	for _, tg := range rep.Targets {
		got[tg.Name] = tg
	}
	if tg := got["scale-out: 2 daemons vs one (scale-2)"]; !tg.Met || tg.Got != "0.98×" {
		t.Errorf("scale-2 target = %+v, want met at 0.98×", tg)
	}
	if tg := got["scale-out: 3 daemons vs one (scale-3)"]; tg.Met || tg.Got != "0.80×" {
		t.Errorf("scale-3 target = %+v, want not met at 0.80×", tg)
	}
}
