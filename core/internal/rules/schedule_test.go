package rules

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseSchedule(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in      string
		want    Schedule
		wantErr string // a substring of the error; "" for none
	}{
		"daily":                  {in: "daily 08:00", want: Schedule{Hour: 8}},
		"daily midnight":         {in: "daily 00:00", want: Schedule{}},
		"daily last minute":      {in: "daily 23:59", want: Schedule{Hour: 23, Minute: 59}},
		"weekly":                 {in: "weekly mon 08:30", want: Schedule{Weekly: true, Weekday: time.Monday, Hour: 8, Minute: 30}},
		"weekly sunday":          {in: "weekly sun 18:00", want: Schedule{Weekly: true, Weekday: time.Sunday, Hour: 18}},
		"hour out of range":      {in: "daily 24:00", wantErr: `hour 24 out of range in schedule "daily 24:00": want 00 to 23`},
		"minute out of range":    {in: "daily 08:60", wantErr: `minute 60 out of range in schedule "daily 08:60": want 00 to 59`},
		"unknown weekday":        {in: "weekly monday 08:00", wantErr: `unknown weekday "monday": want mon, tue, wed, thu, fri, sat or sun`},
		"capital weekday":        {in: "weekly Mon 08:00", wantErr: `unknown weekday "Mon"`},
		"one-digit hour":         {in: "daily 8:00", wantErr: `bad time "8:00" in schedule "daily 8:00": want HH:MM`},
		"seconds":                {in: "daily 08:00:00", wantErr: `bad time "08:00:00"`},
		"sign":                   {in: "daily +8:00", wantErr: `bad time "+8:00"`},
		"unknown period":         {in: "hourly 08:00", wantErr: `bad schedule "hourly 08:00": want "daily HH:MM" or "weekly DAY HH:MM"`},
		"weekly without day":     {in: "weekly 08:00", wantErr: `bad schedule "weekly 08:00"`},
		"daily with day":         {in: "daily mon 08:00", wantErr: `bad schedule "daily mon 08:00"`},
		"two spaces":             {in: "daily  08:00", wantErr: `bad schedule "daily  08:00"`},
		"trailing space":         {in: "daily 08:00 ", wantErr: `bad schedule`},
		"empty":                  {in: "", wantErr: `bad schedule ""`},
		"upper-case period":      {in: "Daily 08:00", wantErr: `bad schedule "Daily 08:00"`},
		"too long":               {in: "daily " + strings.Repeat("0", 100), wantErr: "is 106 bytes long"},
		"non-ascii digits":       {in: "daily ０8:00", wantErr: `bad time`},
		"weekly hour overflow":   {in: "weekly fri 99:00", wantErr: "hour 99 out of range"},
		"weekly minute overflow": {in: "weekly fri 07:99", wantErr: "minute 99 out of range"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseSchedule(tc.in)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("ParseSchedule(%q): %v", tc.in, err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("ParseSchedule(%q) = %+v, want an error with %q", tc.in, got, tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("ParseSchedule(%q): %q, want it to contain %q", tc.in, err, tc.wantErr)
			case tc.wantErr == "":
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Fatalf("ParseSchedule(%q) (-want +got):\n%s", tc.in, diff)
				}
				if s := got.String(); s != tc.in {
					t.Fatalf("String() = %q, want %q", s, tc.in)
				}
			}
		})
	}
}

// TestScheduleNextAcrossZonesAndDST pins the next occurrence of a
// schedule after an instant, in a zone: the wall-clock time holds across
// DST changes; a time that does not exist that day (spring forward) is
// the transition; a time that happens twice (fall back) is its first
// instant, once.
func TestScheduleNextAcrossZonesAndDST(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		schedule string
		zone     string
		after    string // RFC3339 instant
		want     string // RFC3339 in the zone
	}{
		"later today": {
			schedule: "daily 08:00", zone: "Europe/Paris",
			after: "2026-03-10T06:00:00+01:00", want: "2026-03-10T08:00:00+01:00",
		},
		"already past today: tomorrow": {
			schedule: "daily 08:00", zone: "Europe/Paris",
			after: "2026-03-10T15:00:00+01:00", want: "2026-03-11T08:00:00+01:00",
		},
		"exactly at the time: the next one": {
			schedule: "daily 08:00", zone: "Europe/Paris",
			after: "2026-03-10T08:00:00+01:00", want: "2026-03-11T08:00:00+01:00",
		},
		"the recipient's zone, not the instant's": {
			schedule: "daily 08:00", zone: "America/New_York",
			after: "2026-03-10T15:00:00+01:00", want: "2026-03-11T08:00:00-04:00",
		},
		"east of UTC: the local date is already tomorrow": {
			schedule: "daily 08:00", zone: "Asia/Tokyo",
			after: "2026-03-10T23:30:00Z", want: "2026-03-12T08:00:00+09:00",
		},
		"across spring forward: still 08:00 local, 23 hours later": {
			schedule: "daily 08:00", zone: "Europe/Paris",
			after: "2026-03-28T09:00:00+01:00", want: "2026-03-29T08:00:00+02:00",
		},
		"across fall back: still 08:00 local, 25 hours later": {
			schedule: "daily 08:00", zone: "Europe/Paris",
			after: "2026-10-24T09:00:00+02:00", want: "2026-10-25T08:00:00+01:00",
		},
		"02:30 does not exist on spring-forward night: the jump (03:00)": {
			schedule: "daily 02:30", zone: "Europe/Paris",
			after: "2026-03-28T12:00:00+01:00", want: "2026-03-29T03:00:00+02:00",
		},
		"02:30 the night after the jump exists again": {
			schedule: "daily 02:30", zone: "Europe/Paris",
			after: "2026-03-29T03:00:00+02:00", want: "2026-03-30T02:30:00+02:00",
		},
		"02:30 in the US gap": {
			schedule: "daily 02:30", zone: "America/New_York",
			after: "2026-03-07T12:00:00-05:00", want: "2026-03-08T03:00:00-04:00",
		},
		"02:30 happens twice on fall-back night: the first": {
			schedule: "daily 02:30", zone: "Europe/Paris",
			after: "2026-10-24T12:00:00+02:00", want: "2026-10-25T02:30:00+02:00",
		},
		"between the two 02:30s: the second is not an occurrence": {
			schedule: "daily 02:30", zone: "Europe/Paris",
			after: "2026-10-25T02:45:00+02:00", want: "2026-10-26T02:30:00+01:00",
		},
		"01:30 twice in New York: the first": {
			schedule: "daily 01:30", zone: "America/New_York",
			after: "2026-10-31T12:00:00-04:00", want: "2026-11-01T01:30:00-04:00",
		},
		"weekly: the next monday": {
			schedule: "weekly mon 08:00", zone: "Europe/Paris",
			after: "2026-03-10T15:00:00+01:00", want: "2026-03-16T08:00:00+01:00",
		},
		"weekly: monday before the time": {
			schedule: "weekly mon 08:00", zone: "Europe/Paris",
			after: "2026-03-16T07:59:00+01:00", want: "2026-03-16T08:00:00+01:00",
		},
		"weekly: monday after the time, a week on": {
			schedule: "weekly mon 08:00", zone: "Europe/Paris",
			after: "2026-03-16T08:01:00+01:00", want: "2026-03-23T08:00:00+01:00",
		},
		"weekly across spring forward": {
			schedule: "weekly sun 08:00", zone: "Europe/Paris",
			after: "2026-03-22T09:00:00+01:00", want: "2026-03-29T08:00:00+02:00",
		},
		"weekly: the weekday is the recipient's": {
			schedule: "weekly mon 08:00", zone: "Pacific/Auckland",
			after: "2026-03-15T20:00:00Z", want: "2026-03-23T08:00:00+13:00",
		},
		"UTC": {
			schedule: "daily 00:00", zone: "UTC",
			after: "2026-12-31T23:59:59Z", want: "2027-01-01T00:00:00Z",
		},
		"a zone with a half-hour offset": {
			schedule: "daily 08:00", zone: "Asia/Kolkata",
			after: "2026-03-10T00:00:00Z", want: "2026-03-10T08:00:00+05:30",
		},
		"Lord Howe's half-hour DST: 02:15 does not exist": {
			schedule: "daily 02:15", zone: "Australia/Lord_Howe",
			after: "2026-10-03T12:00:00+10:30", want: "2026-10-04T02:30:00+11:00",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sc, err := ParseSchedule(tc.schedule)
			if err != nil {
				t.Fatal(err)
			}
			loc := mustZone(t, tc.zone)
			after, err := time.Parse(time.RFC3339, tc.after)
			if err != nil {
				t.Fatal(err)
			}
			want, err := time.Parse(time.RFC3339, tc.want)
			if err != nil {
				t.Fatal(err)
			}
			got := sc.Next(after, loc)
			if !got.Equal(want) {
				t.Fatalf("%s in %s after %s = %s, want %s", tc.schedule, tc.zone, tc.after,
					got.In(loc).Format(time.RFC3339), want.In(loc).Format(time.RFC3339))
			}
			if !got.After(after) {
				t.Fatalf("next %s is not after %s", got, after)
			}
		})
	}
}

// TestScheduleNextEveryDay walks a year in several zones: each daily
// occurrence comes after the one before, on the next local date, at the
// schedule's wall clock unless that day skips it.
func TestScheduleNextEveryDay(t *testing.T) {
	t.Parallel()
	for _, zone := range []string{"Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Pacific/Apia", "UTC"} {
		for _, s := range []string{"daily 02:30", "daily 08:00", "daily 00:00", "weekly sun 02:30"} {
			sc, err := ParseSchedule(s)
			if err != nil {
				t.Fatal(err)
			}
			loc := mustZone(t, zone)
			at := time.Date(2026, 1, 1, 0, 0, 0, 0, loc)
			step := 24 * time.Hour
			if sc.Weekly {
				step = 7 * 24 * time.Hour
			}
			for i := 0; i < 60; i++ {
				next := sc.Next(at, loc)
				if !next.After(at) || next.Sub(at) > step+2*time.Hour {
					t.Fatalf("%s in %s: after %s came %s", s, zone, at.Format(time.RFC3339), next.Format(time.RFC3339))
				}
				if l := next.In(loc); l.Hour()*60+l.Minute() != sc.Hour*60+sc.Minute {
					if _, end := next.Add(-time.Nanosecond).ZoneBounds(); !end.Equal(next) {
						t.Fatalf("%s in %s: %s is neither the time nor a transition", s, zone, l.Format(time.RFC3339))
					}
				}
				at = next
			}
		}
	}
}

// FuzzParseSchedule feeds ParseSchedule arbitrary text: it never panics,
// what it accepts prints back as itself, and the next occurrence of an
// accepted schedule is within eight days.
func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{"daily 08:00", "weekly mon 08:00", "daily 24:00", "weekly xyz 08:00", "daily 8:0", "", " ", "weekly  mon 08:00"} {
		f.Add(s)
	}
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		f.Fatal(err)
	}
	at := time.Date(2026, 3, 29, 1, 0, 0, 0, paris)
	f.Fuzz(func(t *testing.T, s string) {
		sc, err := ParseSchedule(s)
		if err != nil {
			return
		}
		if got := sc.String(); got != s {
			t.Fatalf("ParseSchedule(%q).String() = %q", s, got)
		}
		if next := sc.Next(at, paris); !next.After(at) || next.Sub(at) > 8*24*time.Hour {
			t.Fatalf("%q: next after %s is %s", s, at, next)
		}
	})
}
