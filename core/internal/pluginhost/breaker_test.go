package pluginhost

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBreaker(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	policy := BreakerPolicy{ConsecutiveFailures: 3, ErrorRate: 0.5, Window: 10 * time.Second, MinRequests: 4, Cooldown: 5 * time.Second,
		HealthFailures: 2}
	// step is one call: at offset, record a send's outcome, note a health
	// check, abandon a probe, or else call allow (want ok/probe).
	type step struct {
		at      time.Duration
		record  *bool // a failed send?
		health  *bool // a failed health check?
		abandon bool  // an inconclusive probe
		probe   bool  // for record
		wantOK  bool
		wantPrb bool
	}
	fail, ok := true, false
	tests := map[string]struct {
		steps    []step
		wantOpen bool
	}{
		"closed lets traffic through": {
			steps:    []step{{wantOK: true}, {record: &ok}, {wantOK: true}},
			wantOpen: false,
		},
		"consecutive failures open": {
			steps: []step{{record: &fail}, {record: &fail}, {record: &fail}, {at: time.Second, wantOK: false}},
			// open
			wantOpen: true,
		},
		"a success resets the run": {
			steps: []step{{record: &ok}, {record: &ok}, {record: &ok}, {record: &ok},
				{record: &fail}, {record: &fail}, {record: &ok}, {record: &fail}, {record: &fail}, {wantOK: true}},
			wantOpen: false,
		},
		"error rate over the window opens": {
			steps: []step{{record: &ok}, {record: &fail}, {record: &ok}, {record: &fail},
				{wantOK: false}},
			wantOpen: true,
		},
		"old events leave the window": {
			steps: []step{{record: &fail}, {record: &ok}, {record: &fail}, {record: &ok},
				{at: 20 * time.Second, record: &fail}, {at: 20 * time.Second, wantOK: true}},
			wantOpen: false,
		},
		"half-open after cooldown, one probe only": {
			steps: []step{{record: &fail}, {record: &fail}, {record: &fail},
				{at: 4 * time.Second, wantOK: false},
				{at: 5 * time.Second, wantOK: true, wantPrb: true},
				{at: 5 * time.Second, wantOK: false}},
			wantOpen: true,
		},
		"successful probe closes": {
			steps: []step{{record: &fail}, {record: &fail}, {record: &fail},
				{at: 6 * time.Second, wantOK: true, wantPrb: true},
				{at: 6 * time.Second, record: &ok, probe: true},
				{at: 6 * time.Second, wantOK: true}},
			wantOpen: false,
		},
		"failed probe reopens for another cooldown": {
			steps: []step{{record: &fail}, {record: &fail}, {record: &fail},
				{at: 6 * time.Second, wantOK: true, wantPrb: true},
				{at: 6 * time.Second, record: &fail, probe: true},
				{at: 10 * time.Second, wantOK: false},
				{at: 11 * time.Second, wantOK: true, wantPrb: true}},
			wantOpen: true,
		},
		"one failed health check does not open": {
			steps:    []step{{health: &fail}, {wantOK: true}},
			wantOpen: false,
		},
		"failed health checks in a row open": {
			steps:    []step{{health: &fail}, {health: &fail}, {wantOK: false}},
			wantOpen: true,
		},
		"a passing health check resets the run": {
			steps:    []step{{health: &fail}, {health: &ok}, {health: &fail}, {wantOK: true}},
			wantOpen: false,
		},
		"successful sends do not hide failed health checks": {
			steps:    []step{{health: &fail}, {record: &ok}, {record: &ok}, {health: &fail}, {wantOK: false}},
			wantOpen: true,
		},
		"no probe while unhealthy, one once healthy": {
			steps: []step{{health: &fail}, {health: &fail},
				{at: 20 * time.Second, wantOK: false},
				{at: 21 * time.Second, health: &ok},
				{at: 21 * time.Second, wantOK: true, wantPrb: true},
				{at: 21 * time.Second, record: &ok, probe: true},
				{at: 21 * time.Second, wantOK: true}},
			wantOpen: false,
		},
		"inconclusive probe: the next send probes": {
			steps: []step{{record: &fail}, {record: &fail}, {record: &fail},
				{at: 6 * time.Second, wantOK: true, wantPrb: true},
				{at: 6 * time.Second, abandon: true},
				{at: 6 * time.Second, wantOK: true, wantPrb: true}},
			wantOpen: true,
		},
		"failed health checks during the probe keep the circuit open": {
			steps: []step{{record: &fail}, {record: &fail}, {record: &fail},
				{at: 6 * time.Second, wantOK: true, wantPrb: true},
				{at: 6 * time.Second, health: &fail},
				{at: 6 * time.Second, health: &fail},
				{at: 7 * time.Second, record: &ok, probe: true},
				{at: 20 * time.Second, wantOK: false}},
			wantOpen: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := &breaker{policy: policy}
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				switch {
				case s.record != nil:
					b.record(now, *s.record, s.probe)
					continue
				case s.health != nil:
					b.health(now, !*s.health)
					continue
				case s.abandon:
					b.abandon(true)
					continue
				}
				gotOK, gotPrb := b.allow(now)
				if diff := cmp.Diff([]bool{s.wantOK, s.wantPrb}, []bool{gotOK, gotPrb}); diff != "" {
					t.Fatalf("step %d allow (-want +got ok,probe):\n%s", i, diff)
				}
			}
			if b.open() != tc.wantOpen {
				t.Errorf("open() = %v, want %v", b.open(), tc.wantOpen)
			}
		})
	}
}
