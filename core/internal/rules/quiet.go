package rules

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// window is a parsed daily quiet-hours window; start > end means it spans
// midnight.
type window struct {
	start, end int // minutes after local midnight
	text       string
}

type windowError struct {
	field string
	msg   string
}

func (e *windowError) Error() string { return e.field + ": " + e.msg }

// ParseQuietHours checks a quiet-hours window: both ends "HH:MM", and
// different.
func ParseQuietHours(qh QuietHours) error {
	_, err := parseWindow(qh)
	return err
}

func parseWindow(qh QuietHours) (*window, error) {
	start, err := parseClock(qh.Start)
	if err != nil {
		return nil, &windowError{field: KeyStart, msg: err.Error()}
	}
	end, err := parseClock(qh.End)
	if err != nil {
		return nil, &windowError{field: KeyEnd, msg: err.Error()}
	}
	if start == end {
		return nil, &windowError{field: KeyEnd, msg: fmt.Sprintf("equals start (%s): the window would be empty", qh.Start)}
	}
	return &window{start: start, end: end, text: qh.Start + "–" + qh.End}, nil
}

// parseClock parses "HH:MM" (00:00 to 23:59) into minutes after midnight.
func parseClock(s string) (int, error) {
	hh, mm, ok := strings.Cut(s, ":")
	if !ok || len(hh) != 2 || len(mm) != 2 {
		return 0, fmt.Errorf("bad time %q: want HH:MM", s)
	}
	h, err1 := strconv.Atoi(hh)
	m, err2 := strconv.Atoi(mm)
	if err1 != nil || err2 != nil || h < 0 || h > 23 || m < 0 || m > 59 {
		return 0, fmt.Errorf("bad time %q: want HH:MM between 00:00 and 23:59", s)
	}
	return h*60 + m, nil
}

// contains reports whether the wall-clock time of t (already in the
// recipient's zone) falls in the window.
func (w *window) contains(t time.Time) bool {
	m := t.Hour()*60 + t.Minute()
	if w.start < w.end {
		return m >= w.start && m < w.end
	}
	return m >= w.start || m < w.end
}

// endAfter returns when the window that contains t ends, in t's zone. It
// steps calendar days, not 24h, so the answer is right across DST changes.
// An end that falls in a spring-forward gap (02:30 on the night clocks jump
// from 02:00 to 03:00) resolves to the transition itself, the first instant
// whose wall clock is past the end.
func (w *window) endAfter(t time.Time) time.Time {
	y, mo, d := t.Date()
	if w.start > w.end && t.Hour()*60+t.Minute() >= w.start {
		d++ // overnight window, before midnight: it ends tomorrow
	}
	end := time.Date(y, mo, d, w.end/60, w.end%60, 0, 0, t.Location())
	if end.Hour()*60+end.Minute() != w.end {
		if start, _ := end.ZoneBounds(); !start.IsZero() && start.After(t) {
			end = start
		}
	}
	return end
}

// zoneCache keeps loaded locations: LoadLocation reads zoneinfo, and the
// decision must not repeat that work per recipient.
var zoneCache sync.Map // string → *time.Location (nil for unknown zones)

func loadZone(name string) *time.Location {
	if v, ok := zoneCache.Load(name); ok {
		loc, _ := v.(*time.Location)
		return loc
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		loc = nil
	}
	zoneCache.Store(name, loc)
	return loc
}
