package rules

import (
	"fmt"
	"strings"
	"time"
)

// MaxScheduleLen bounds the text of a digest schedule: the longest valid
// one, "weekly mon 08:00", is 16 bytes.
const MaxScheduleLen = 64

// Schedule is a parsed digest schedule: a wall-clock time every day, or
// every week on one weekday, in the recipient's zone. Its grammar is
// strict, with exactly one space between words:
//
//	daily HH:MM
//	weekly DAY HH:MM
//
// where HH is 00 to 23, MM is 00 to 59 (both two digits) and DAY is one
// of mon, tue, wed, thu, fri, sat, sun.
type Schedule struct {
	// Weekly is true for "weekly"; Weekday is then the day.
	Weekly  bool
	Weekday time.Weekday
	// Hour and Minute are the wall-clock time.
	Hour, Minute int
}

// scheduleDays are the weekday names a schedule accepts.
var scheduleDays = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday,
	"wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

// scheduleGrammar is what a bad schedule is told to look like.
const scheduleGrammar = `want "daily HH:MM" or "weekly DAY HH:MM" (DAY mon, tue, wed, thu, fri, sat or sun), e.g. "daily 08:00"`

// ParseSchedule parses a digest schedule ("daily 08:00", "weekly mon
// 08:00"). Its errors say what is wrong: the grammar, an hour or minute out
// of range, an unknown weekday.
func ParseSchedule(s string) (Schedule, error) {
	if len(s) > MaxScheduleLen {
		return Schedule{}, fmt.Errorf("is %d bytes long; %s", len(s), scheduleGrammar)
	}
	words := strings.Split(s, " ")
	var sc Schedule
	var clock string
	switch {
	case len(words) == 2 && words[0] == "daily":
		clock = words[1]
	case len(words) == 3 && words[0] == "weekly":
		day, ok := scheduleDays[words[1]]
		if !ok {
			return Schedule{}, fmt.Errorf("unknown weekday %q: want mon, tue, wed, thu, fri, sat or sun", words[1])
		}
		sc.Weekly, sc.Weekday, clock = true, day, words[2]
	default:
		return Schedule{}, fmt.Errorf("bad schedule %q: %s", s, scheduleGrammar)
	}
	if len(clock) != 5 || clock[2] != ':' || !digits(clock[:2]) || !digits(clock[3:]) {
		return Schedule{}, fmt.Errorf("bad time %q in schedule %q: want HH:MM, two digits each, such as 08:00", clock, s)
	}
	sc.Hour = int(clock[0]-'0')*10 + int(clock[1]-'0')
	sc.Minute = int(clock[3]-'0')*10 + int(clock[4]-'0')
	if sc.Hour > 23 {
		return Schedule{}, fmt.Errorf("hour %02d out of range in schedule %q: want 00 to 23", sc.Hour, s)
	}
	if sc.Minute > 59 {
		return Schedule{}, fmt.Errorf("minute %02d out of range in schedule %q: want 00 to 59", sc.Minute, s)
	}
	return sc, nil
}

func digits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// String is the schedule in its own grammar.
func (sc Schedule) String() string {
	if sc.Weekly {
		return fmt.Sprintf("weekly %s %02d:%02d", strings.ToLower(sc.Weekday.String()[:3]), sc.Hour, sc.Minute)
	}
	return fmt.Sprintf("daily %02d:%02d", sc.Hour, sc.Minute)
}

// Next returns the schedule's first occurrence strictly after t, in loc.
// It steps calendar days, not 24 hours, so the wall-clock time holds
// across DST changes. Each day has exactly one occurrence:
//
//   - a time that does not exist that day (02:30 on the night clocks jump
//     from 02:00 to 03:00) is the transition itself, the first instant
//     whose wall clock is past it (03:00 local);
//   - a time that happens twice (01:30 on the night clocks fall back from
//     02:00 to 01:00) is its first, earlier instant; the second is not an
//     occurrence.
func (sc Schedule) Next(t time.Time, loc *time.Location) time.Time {
	local := t.In(loc)
	y, m, d := local.Date()
	// A weekly schedule is due within 8 calendar days; a skipped day
	// (a zone that jumped a whole date) can add one more.
	for i := 0; i < 10; i++ {
		day := time.Date(y, m, d+i, 12, 0, 0, 0, loc) // noon: the date exists
		if sc.Weekly && day.Weekday() != sc.Weekday {
			continue
		}
		at := sc.on(day.Year(), day.Month(), day.Day(), loc)
		if at.After(t) {
			return at
		}
	}
	// Unreachable for real zones; a week on keeps the window bounded.
	return t.Add(7 * 24 * time.Hour)
}

// on is the schedule's occurrence on the local date y-m-d in loc.
func (sc Schedule) on(y int, m time.Month, d int, loc *time.Location) time.Time {
	at := time.Date(y, m, d, sc.Hour, sc.Minute, 0, 0, loc)
	if at.Hour() != sc.Hour || at.Minute() != sc.Minute {
		// In a spring-forward gap: the transition is the occurrence.
		// time.Date normalised the wall clock forward (past the gap, so
		// the transition began the zone period at is in) or back (before
		// it, so the transition ends that period).
		start, end := at.ZoneBounds()
		if at.Day() == d && at.Hour()*60+at.Minute() < sc.Hour*60+sc.Minute {
			if !end.IsZero() {
				return end
			}
		} else if !start.IsZero() {
			return start
		}
		return at
	}
	// In a fall-back overlap the earlier instant has the same wall clock
	// in the zone in force before the transition.
	start, _ := at.ZoneBounds()
	if start.IsZero() {
		return at
	}
	_, off := at.Zone()
	_, prevOff := start.Add(-time.Nanosecond).Zone()
	if prevOff > off {
		earlier := at.Add(-time.Duration(prevOff-off) * time.Second)
		if earlier.Before(start) {
			if e := earlier.In(loc); e.Hour() == sc.Hour && e.Minute() == sc.Minute && e.Day() == d {
				return earlier
			}
		}
	}
	return at
}
