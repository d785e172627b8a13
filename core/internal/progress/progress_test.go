package progress

import (
	"bytes"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/testenv"
)

func TestProgressLine(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cur     int
		elapsed time.Duration
		final   bool
		total   int
		label   string
		want    string
	}{
		"start": {cur: 0, elapsed: 0,
			want: "[....................]   0%  0/27,000 deliveries  0/s  eta ?"},
		"middle": {cur: 12345, elapsed: 3 * time.Second,
			want: "[#########...........]  45%  12,345/27,000 deliveries  4,115/s  eta 4s"},
		"minutes": {cur: 1000, elapsed: 10 * time.Second,
			want: "[....................]   3%  1,000/27,000 deliveries  100/s  eta 4m20s"},
		"hours": {cur: 10, elapsed: 10 * time.Second,
			want: "[....................]   0%  10/27,000 deliveries  1/s  eta 7h29m"},
		"complete": {cur: 27000, elapsed: 9 * time.Second,
			want: "[####################] 100%  27,000/27,000 deliveries  3,000/s  eta 0s"},
		"over": {cur: 30000, elapsed: 10 * time.Second,
			want: "[####################] 100%  30,000/27,000 deliveries  3,000/s  eta 0s"},
		"final": {cur: 27000, elapsed: 6700 * time.Millisecond, final: true,
			want: "[####################] 100%  27,000/27,000 deliveries  4,030/s  in 6.7s"},
		"final long": {cur: 27000, elapsed: 90 * time.Second, final: true,
			want: "[####################] 100%  27,000/27,000 deliveries  300/s  in 1m30s"},
		"unknown total": {cur: 1234567, elapsed: time.Second, total: -1,
			want: "1,234,567 deliveries  1,234,567/s"},
		"no label": {cur: 5, elapsed: time.Second, total: 10, label: "-",
			want: "[##########..........]  50%  5/10  5/s  eta 1s"},
	} {
		q := &Bar{label: "deliveries", total: 27000}
		if tc.total != 0 {
			q.total = max(tc.total, 0)
		}
		if tc.label == "-" {
			q.label = ""
		}
		if got := q.line(tc.cur, tc.elapsed, tc.final); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", name, got, tc.want)
		}
	}
}

func TestThousands(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 12345: "12,345",
		1234567: "1,234,567", -1234: "-1,234", -999: "-999"} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestProgressPlain checks that a writer that is not a terminal gets plain
// lines, no carriage returns, and a final line on Stop.
func TestProgressPlain(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var cur atomic.Int64
	cur.Store(250)
	p := New(&buf, "deliveries", 1000, time.Millisecond, func() int { return int(cur.Load()) })
	if p.terminal {
		t.Fatal("a bytes.Buffer is taken for a terminal")
	}
	cur.Store(1000)
	p.Stop()
	p.Stop() // a second Stop does nothing
	out := buf.String()
	if strings.Contains(out, "\r") {
		t.Errorf("plain output holds a carriage return: %q", out)
	}
	if !strings.HasSuffix(out, "\n") {
		t.Errorf("output does not end with a newline: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	// The 2 s floor means at most the final line in a fast test, but do not
	// rely on timing: check the last line only.
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "[####################] 100%  1,000/1,000 deliveries  ") || !strings.Contains(last, "  in ") {
		t.Errorf("final line = %q", last)
	}
}

// TestProgressTerminal checks redraws with \r in terminal mode.
func TestProgressTerminal(t *testing.T) {
	t.Parallel()
	var buf testenv.LogBuffer
	var cur atomic.Int64
	p := newBar(&buf, "events", 20000, time.Millisecond, func() int { return int(cur.Load()) }, true)
	// The first state is drawn at once.
	if got := buf.String(); !strings.HasPrefix(got, "\r[....................]   0%  0/20,000 events") {
		t.Errorf("first draw = %q", got)
	}
	cur.Store(10000)
	testenv.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(buf.String(), "\r[##########..........]  50%  10,000/20,000 events")
	}, "a redraw at 50%%")
	cur.Store(20000)
	p.Stop()
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Errorf("want exactly one newline, at the end: %q", out)
	}
	final := out[strings.LastIndex(out, "\r")+1:]
	if !strings.HasPrefix(final, "[####################] 100%  20,000/20,000 events  ") || !strings.Contains(final, "  in ") {
		t.Errorf("final draw = %q", final)
	}
}

// TestProgressPadding checks that a shorter line blanks out the rest of a
// longer one.
func TestProgressPadding(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	p := &Bar{w: &buf, label: "x", total: 0, terminal: true}
	p.draw(123456789, time.Second, false)
	long := buf.Len()
	buf.Reset()
	p.draw(1, time.Second, true)
	if got, want := buf.String(), "\r1 x  1/s  in 1.0s"; !strings.HasPrefix(got, want) || buf.Len() != long+1 ||
		strings.TrimRight(got, " \n") != want {
		t.Errorf("short redraw = %q (len %d), want %q padded to %d and a newline", got, buf.Len(), want, long)
	}
}

func TestIsTerminal(t *testing.T) {
	t.Parallel()
	if isTerminal(&bytes.Buffer{}) {
		t.Error("bytes.Buffer is a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "progress")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Error("a regular file is a terminal")
	}
}
