package rules

import (
	"sync"
	"time"

	"github.com/heraldhq/herald/core/internal/directory"
)

// window is a parsed daily quiet-hours window; start > end means it spans
// midnight.
type window struct {
	start, end int // minutes after local midnight
	text       string
}

func parseWindow(qh directory.QuietHours) (*window, error) {
	start, end, err := qh.Minutes()
	if err != nil {
		return nil, err
	}
	return &window{start: start, end: end, text: qh.Start + "–" + qh.End}, nil
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
