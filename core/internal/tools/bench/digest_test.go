package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/rulesfile"
)

// TestReportDigest checks the digest run's lines: the flush latencies
// after the window closed, the deliveries collected per second and their
// ratio to the plain fanout of the same shape in the same report.
func TestReportDigest(t *testing.T) {
	t.Parallel()
	shape := Scenario{Events: 2000, Recipients: 50, Channels: 1, Producers: 4, Serve: 1}
	plain := shape
	plain.Name = "fanout-no-digest"
	dig := shape
	dig.Name, dig.Digest, dig.Rate = "digest", time.Minute, 80
	rep := Report{Runs: []Result{
		{Scenario: plain, DeliveriesPerS: 4000, Check: Check{OK: true, Detail: "all 100000 deliveries SENT exactly once"}},
		{Scenario: dig, DeliveriesPerS: 3600, Check: Check{OK: true, Detail: "all 100000 items DIGESTED into 10000 digests"},
			Digest: &DigestSummary{Window: time.Minute, Items: 100000, Windows: 10000, Digests: 10000, ItemsPerSec: 3600,
				Flush: LatencySummary{Count: 10000, P50: 120, P99: 950, Max: 1400}, ToPlugin: LatencySummary{Count: 10000, P50: 300, P99: 2100, Max: 2500}}},
	}}
	rep.Evaluate()
	d := rep.Runs[1].Digest
	if d.Baseline != "fanout-no-digest" || d.BaselinePerS != 4000 || d.Ratio != 0.9 {
		t.Fatalf("baseline %q %v, ratio %v; want fanout-no-digest 4000, 0.9", d.Baseline, d.BaselinePerS, d.Ratio)
	}
	if !rep.OK {
		t.Fatal("report not OK with every check OK")
	}
	var buf bytes.Buffer
	rep.Print(&buf)
	out := buf.String()
	for _, want := range []string{
		"Digest digest (window 1m0s, events at 80/s): 100,000 items into 10,000 windows, 10,000 digests",
		"window close → digest written (flush): p50 120.0 ms, p99 950.0 ms, max 1400.0 ms",
		"window close → plugin Send of the digest: p50 300.0 ms, p99 2100.0 ms",
		"deliveries collected with the digest bookkeeping: 3,600/s; fanout-no-digest (no digest rule, same run): 4,000 deliveries/s sent; ratio 0.90×",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	// Without the plain run there is no ratio, and the line says so by
	// leaving it out.
	rep.Runs = rep.Runs[1:]
	rep.Evaluate()
	if rep.Runs[0].Digest.Baseline != "" || rep.Runs[0].Digest.Ratio != 0 {
		t.Errorf("no plain run: baseline %q ratio %v", rep.Runs[0].Digest.Baseline, rep.Runs[0].Digest.Ratio)
	}
}

// TestDigestRulesCompile loads the digest run's rules as herald serve
// does: the event collects every channel over the scenario's window.
func TestDigestRulesCompile(t *testing.T) {
	t.Parallel()
	sc := Scenario{Recipients: 50, Channels: 2, Digest: 90 * time.Second}
	p := filepath.Join(t.TempDir(), "rules.hcl")
	if err := os.WriteFile(p, []byte(rulesFile(sc, []string{"BENCH1", "BENCH2"}, t.TempDir())), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := rulesfile.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	d, ok := rs.Digest(benchEventType)
	if !ok || d.Window != 90*time.Second || d.MaxItems != digestMaxItems || len(d.Channels) != 2 {
		t.Fatalf("digest %+v, %v; want both channels over 90s, max %d", d, ok, digestMaxItems)
	}
	sc.Digest = 0
	if strings.Contains(rulesFile(sc, []string{"BENCH1"}, t.TempDir()), "digest") {
		t.Error("a run without Digest has a digest block")
	}
}
