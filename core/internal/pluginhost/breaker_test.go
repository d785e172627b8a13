package pluginhost

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBreaker(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	policy := BreakerPolicy{ConsecutiveFailures: 3, ErrorRate: 0.5, Window: 10 * time.Second, MinRequests: 4, Cooldown: 5 * time.Second}
	// step is one call: at offset, either allow (want ok/probe) or record.
	type step struct {
		at      time.Duration
		record  *bool // nil: call allow
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
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := &breaker{policy: policy}
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				if s.record != nil {
					b.record(now, *s.record, s.probe)
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
