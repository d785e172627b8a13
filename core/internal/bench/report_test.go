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
