package pluginhost

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/metrics"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
)

// TestPluginResultBounded sends to a plugin that pads every reason, code
// and provider message id to 1 MiB (ending in a two-byte rune, so that a
// cut at a byte count splits it): the host hands on at most
// MaxReasonBytes, MaxCodeBytes and MaxMessageIDBytes, valid UTF-8, marked
// as cut. On main before the bound the 1 MiB values came back whole (and a
// 3 MiB reason was stored and served by the API).
func TestPluginResultBounded(t *testing.T) {
	t.Parallel()
	const big = 1 << 20
	env := startHost(t, []channel.Config{
		sinkChannel("PERM", map[string]any{"outcome": "permanent", "reason_bytes": big}),
		sinkChannel("SENT", map[string]any{"reason_bytes": big}),
	}, nil)
	for _, ch := range []string{"PERM", "SENT"} {
		results, _, err := env.h.Send(context.Background(), ch, deliveries("b", 2))
		if err != nil {
			t.Fatalf("%s: %v", ch, err)
		}
		for _, r := range results {
			for _, f := range []struct {
				name, v string
				max     int
			}{{"reason", r.Reason, MaxReasonBytes}, {"code", r.Code, MaxCodeBytes}, {"provider message id", r.ProviderMessageID, MaxMessageIDBytes}} {
				if len(f.v) > f.max || !utf8.ValidString(f.v) || !strings.Contains(f.v, "[truncated from ") {
					t.Errorf("%s: %s is %d bytes (max %d), valid UTF-8 %v, ends %q", ch, f.name, len(f.v), f.max,
						utf8.ValidString(f.v), f.v[max(0, len(f.v)-40):])
				}
			}
		}
	}
}

func TestBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"bad \xff byte", 64, "bad \uFFFD byte"},
		{"", 10, ""},
	} {
		if got := Bound(tc.in, tc.n); got != tc.want {
			t.Errorf("Bound(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
	for n := 0; n < 60; n++ {
		got := Bound(strings.Repeat("é", 40), n)
		if len(got) > max(n, len("…[truncated from 80 bytes]")) || !utf8.ValidString(got) {
			t.Errorf("Bound(80 bytes of é, %d) = %q (%d bytes)", n, got, len(got))
		}
	}
}

// TestPluginLogLinesBounded has a plugin log 4,000 lines in one Send: the
// host re-emits at most the burst of LogBurst (plus its own lines), counts
// the rest in herald_plugin_log_lines_dropped_total, and says once how many
// it dropped when the plugin's next line is let through (and not again
// within LogSummaryEvery). On main before the
// bound every one of the 4,000 lines was re-emitted.
func TestPluginLogLinesBounded(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	env := startHost(t, []channel.Config{sinkChannel("NOISY", map[string]any{"log_lines": 4000})},
		func(c *Config) { c.Metrics = m })
	if _, _, err := env.h.Send(context.Background(), "NOISY", deliveries("n", 1)); err != nil {
		t.Fatal(err)
	}
	dropped := func() float64 {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() == "herald_plugin_log_lines_dropped_total" {
				var n float64
				for _, s := range f.GetMetric() {
					n += s.GetCounter().GetValue()
				}
				return n
			}
		}
		return 0
	}
	// The plugin's lines reach the host through a pipe after Send
	// returns; wait until all 4,000 are accounted for (re-emitted or
	// dropped).
	testenv.Eventually(t, 20*time.Second, func() bool {
		return float64(strings.Count(env.logs.String(), "sink noise"))+dropped() >= 4000
	}, "the plugin's 4,000 lines re-emitted or counted as dropped")
	if n := strings.Count(env.logs.String(), "sink noise"); n > LogBurst+LogLinesPerSecond*20 || n < 10 {
		t.Errorf("%d of the plugin's 4,000 lines re-emitted, want about the burst of %d", n, LogBurst)
	}
	// A later line (the next Send's) is let through once tokens return,
	// preceded by the summary of what was dropped.
	testenv.Eventually(t, 20*time.Second, func() bool {
		if strings.Contains(env.logs.String(), "plugin log lines dropped") {
			return true
		}
		_, _, _ = env.h.Send(context.Background(), "NOISY", deliveries("m", 1))
		return false
	}, "a summary line of the dropped lines")
	// One summary so far: the next is due LogSummaryEvery later.
	if n := strings.Count(env.logs.String(), "plugin log lines dropped"); n != 1 {
		t.Errorf("%d summary lines, want 1", n)
	}
}
