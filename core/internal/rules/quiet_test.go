package rules

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/directory"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestQuietWindowAcrossDST(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		zone       string
		start, end string
		at         string // RFC3339 instant
		wantIn     bool
		wantUntil  string // RFC3339 in the zone, when wantIn
	}{
		"rome spring forward: overnight window ends in summer time": {
			zone: "Europe/Rome", start: "22:00", end: "08:00",
			at: "2026-03-28T23:30:00+01:00", wantIn: true, wantUntil: "2026-03-29T08:00:00+02:00",
		},
		"rome spring forward: after midnight, before the jump": {
			zone: "Europe/Rome", start: "22:00", end: "08:00",
			at: "2026-03-29T01:59:00+01:00", wantIn: true, wantUntil: "2026-03-29T08:00:00+02:00",
		},
		"rome fall back: first 01:30": {
			zone: "Europe/Rome", start: "22:00", end: "08:00",
			at: "2026-10-25T01:30:00+02:00", wantIn: true, wantUntil: "2026-10-25T08:00:00+01:00",
		},
		"rome fall back: second 02:30": {
			zone: "Europe/Rome", start: "22:00", end: "08:00",
			at: "2026-10-25T02:30:00+01:00", wantIn: true, wantUntil: "2026-10-25T08:00:00+01:00",
		},
		"rome fall back: evening before": {
			zone: "Europe/Rome", start: "22:00", end: "08:00",
			at: "2026-10-24T22:00:00+02:00", wantIn: true, wantUntil: "2026-10-25T08:00:00+01:00",
		},
		"rome: window end inside the spring-forward gap resolves to the jump": {
			zone: "Europe/Rome", start: "22:00", end: "02:30",
			at: "2026-03-28T23:00:00+01:00", wantIn: true, wantUntil: "2026-03-29T03:00:00+02:00",
		},
		"new york spring forward": {
			zone: "America/New_York", start: "22:00", end: "08:00",
			at: "2026-03-07T23:00:00-05:00", wantIn: true, wantUntil: "2026-03-08T08:00:00-04:00",
		},
		"new york fall back": {
			zone: "America/New_York", start: "21:30", end: "07:15",
			at: "2026-10-31T22:30:00-04:00", wantIn: true, wantUntil: "2026-11-01T07:15:00-05:00",
		},
		"new york: the repeated 01:30 is inside": {
			zone: "America/New_York", start: "22:00", end: "08:00",
			at: "2026-11-01T01:30:00-05:00", wantIn: true, wantUntil: "2026-11-01T08:00:00-05:00",
		},
		"window end is exclusive": {
			zone: "Europe/Rome", start: "22:00", end: "08:00",
			at: "2026-03-29T08:00:00+02:00", wantIn: false,
		},
		"window start is inclusive": {
			zone: "UTC", start: "22:00", end: "08:00",
			at: "2026-06-01T22:00:00Z", wantIn: true, wantUntil: "2026-06-02T08:00:00Z",
		},
		"daytime window": {
			zone: "Europe/Rome", start: "12:00", end: "14:00",
			at: "2026-06-01T13:59:00+02:00", wantIn: true, wantUntil: "2026-06-01T14:00:00+02:00",
		},
		"outside a daytime window": {
			zone: "Europe/Rome", start: "12:00", end: "14:00",
			at: "2026-06-01T15:00:00+02:00", wantIn: false,
		},
		"the instant is read in the recipient's zone, not the caller's": {
			zone: "America/New_York", start: "22:00", end: "08:00",
			at: "2026-06-02T08:00:00+02:00", wantIn: true, wantUntil: "2026-06-02T08:00:00-04:00",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w, err := parseWindow(directory.QuietHours{Start: tc.start, End: tc.end})
			if err != nil {
				t.Fatal(err)
			}
			at, err := time.Parse(time.RFC3339, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			local := at.In(mustZone(t, tc.zone))
			if got := w.contains(local); got != tc.wantIn {
				t.Fatalf("contains(%s) = %v, want %v", local, got, tc.wantIn)
			}
			if !tc.wantIn {
				return
			}
			got := w.endAfter(local)
			if diff := cmp.Diff(tc.wantUntil, got.Format(time.RFC3339)); diff != "" {
				t.Errorf("endAfter(%s) mismatch (-want +got):\n%s", local, diff)
			}
			if w.contains(got) {
				t.Errorf("endAfter(%s) = %s is still inside the window", local, got)
			}
			if !got.After(at) {
				t.Errorf("endAfter(%s) = %s is not after the instant", local, got)
			}
		})
	}
}
