// Package progress draws a one-line progress bar on a terminal, or a plain
// line every 2 s on any other writer. herald bench and herald directory
// import use it.
package progress

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// barWidth is the number of cells between the brackets.
const barWidth = 20

// plainEvery is the shortest interval between two lines when the output is
// not a terminal (a log file or a pipe).
const plainEvery = 2 * time.Second

// defaultEvery is the redraw interval when New gets none.
const defaultEvery = 200 * time.Millisecond

// Bar draws a one-line progress bar such as
//
//	[#########...........] 45%  12,345/27,000 deliveries  4,012/s  eta 4s
//
// On a terminal it redraws the line in place with a carriage return; on any
// other writer it prints a plain line at most every 2 s. The rate is the
// average since the start. Start it with New and end it with Stop.
type Bar struct {
	w        io.Writer
	label    string
	total    int
	current  func() int
	terminal bool
	start    time.Time

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
	lastLen  int // length of the last terminal line, to blank out leftovers
}

// New starts drawing the progress of current() towards total on w
// every interval (at most every 2 s when w is not a terminal). label names
// the unit, such as "deliveries". A total of zero or less means the total is
// unknown: the bar, percentage and eta are left out. current is called from
// another goroutine, so it must be safe for concurrent use.
func New(w io.Writer, label string, total int, every time.Duration, current func() int) *Bar {
	return newBar(w, label, total, every, current, isTerminal(w))
}

func newBar(w io.Writer, label string, total int, every time.Duration, current func() int, terminal bool) *Bar {
	if every <= 0 {
		every = defaultEvery
	}
	if !terminal && every < plainEvery {
		every = plainEvery
	}
	p := &Bar{
		w: w, label: label, total: total, current: current, terminal: terminal,
		start: time.Now(), stop: make(chan struct{}), done: make(chan struct{}),
	}
	if terminal {
		p.draw(p.current(), 0, false)
	}
	go p.run(every)
	return p
}

// isTerminal reports whether w is a character device, such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (p *Bar) run(every time.Duration) {
	defer close(p.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.draw(p.current(), time.Since(p.start), false)
		}
	}
}

// Stop stops redrawing and prints the final state followed by a newline.
// Later calls do nothing.
func (p *Bar) Stop() {
	p.stopOnce.Do(func() {
		close(p.stop)
		<-p.done
		p.draw(p.current(), time.Since(p.start), true)
	})
}

// draw writes one state. It is called by one goroutine at a time: the
// constructor, then run, then Stop after run has returned.
func (p *Bar) draw(cur int, elapsed time.Duration, final bool) {
	line := p.line(cur, elapsed, final)
	if !p.terminal {
		fmt.Fprintln(p.w, line)
		return
	}
	pad := ""
	if n := p.lastLen - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	p.lastLen = len(line)
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprint(p.w, "\r"+line+pad+end)
}

// line renders the state after elapsed with cur done. The final line shows
// the elapsed time instead of the eta.
func (p *Bar) line(cur int, elapsed time.Duration, final bool) string {
	var b strings.Builder
	rate := 0.0
	if elapsed > 0 {
		rate = float64(cur) / elapsed.Seconds()
	}
	if p.total > 0 {
		frac := float64(cur) / float64(p.total)
		frac = max(0, min(1, frac))
		cells := int(frac * barWidth)
		b.WriteByte('[')
		b.WriteString(strings.Repeat("#", cells))
		b.WriteString(strings.Repeat(".", barWidth-cells))
		fmt.Fprintf(&b, "] %3d%%  %s/%s", int(frac*100), Thousands(int64(cur)), Thousands(int64(p.total)))
	} else {
		b.WriteString(Thousands(int64(cur)))
	}
	if p.label != "" {
		b.WriteString(" " + p.label)
	}
	b.WriteString("  " + Thousands(int64(rate+0.5)) + "/s")
	switch {
	case final:
		b.WriteString("  in " + formatSeconds(elapsed))
	case p.total <= 0:
	case cur >= p.total:
		b.WriteString("  eta 0s")
	case rate > 0:
		left := time.Duration(float64(p.total-cur) / rate * float64(time.Second))
		b.WriteString("  eta " + formatETA(left))
	default:
		b.WriteString("  eta ?")
	}
	return b.String()
}

// formatETA rounds d up to whole seconds: "4s", "2m05s", "1h02m".
func formatETA(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	default:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
}

// formatSeconds formats d with one decimal under a minute ("6.7s") and like
// formatETA above.
func formatSeconds(d time.Duration) string {
	if d < time.Minute {
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return formatETA(d)
}

// Thousands formats n with commas between groups of three digits.
func Thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
