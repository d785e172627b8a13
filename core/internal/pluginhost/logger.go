package pluginhost

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Bounds of the log lines the host re-emits for one provider's plugin: a
// burst of LogBurst lines, then LogLinesPerSecond; a line over the budget is
// dropped and counted, and a line let through is preceded by one summary
// line saying how many were dropped since the last summary, at most one
// summary per LogSummaryEvery. A line's message is cut to
// LogLineBytes, each string value to LogValueBytes, and a line keeps at most
// LogMaxArgs key/value elements.
const (
	LogLinesPerSecond = 20
	LogBurst          = 200
	LogLineBytes      = 2048
	LogValueBytes     = 1024
	LogMaxArgs        = 32
	LogSummaryEvery   = 10 * time.Second
)

// logLimit is the token bucket of one provider's plugin log lines, shared by
// every logger derived from its pluginLogger and by its restarts.
type logLimit struct {
	mu      sync.Mutex
	tokens  float64
	last    time.Time
	dropped int
	// summarized is when the last summary was logged.
	summarized time.Time
	// onDrop counts dropped lines (the metric); may be nil.
	onDrop func(n int)
	now    func() time.Time
}

func newLogLimit(onDrop func(int)) *logLimit {
	return &logLimit{tokens: LogBurst, onDrop: onDrop, now: time.Now}
}

// take spends a token for one line: ok says whether the line may be
// logged, and dropped how many lines were dropped since the last summary,
// when one is due before this line.
func (b *logLimit) take() (ok bool, dropped int) {
	if b == nil {
		return true, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if !b.last.IsZero() {
		b.tokens = min(LogBurst, b.tokens+now.Sub(b.last).Seconds()*LogLinesPerSecond)
	}
	b.last = now
	if b.tokens < 1 {
		b.dropped++
		if b.onDrop != nil {
			b.onDrop(1)
		}
		return false, 0
	}
	b.tokens--
	if b.dropped > 0 && (b.summarized.IsZero() || now.Sub(b.summarized) >= LogSummaryEvery) {
		dropped, b.dropped, b.summarized = b.dropped, 0, now
	}
	return true, dropped
}

// pluginLogger is the logger go-plugin re-emits a plugin's log lines to:
// the provider's logger, which already names the plugin, channel and
// provider. A pair of a line whose key the logger already carries is
// dropped when its value is the same (the SDK logs "configured
// provider=NAME", which hclog would print as "provider=NAME
// provider=NAME"), and kept as "plugin_KEY" when it differs, so that every
// key appears once in a line.
//
// Lines are bounded by lim (see LogLinesPerSecond) and cut (see
// LogLineBytes).
type pluginLogger struct {
	hclog.Logger
	lim *logLimit
}

// newPluginLogger wraps l; see pluginLogger. lim may be nil: no bound on
// the number of lines.
func newPluginLogger(l hclog.Logger, lim *logLimit) hclog.Logger { return pluginLogger{l, lim} }

// admit reports whether a line may be logged now, logging the summary of
// the lines dropped before it first.
func (l pluginLogger) admit() bool {
	ok, dropped := l.lim.take()
	if dropped > 0 {
		l.Logger.Warn("plugin log lines dropped: over the host's bound", "dropped", dropped,
			"lines_per_second", LogLinesPerSecond, "burst", LogBurst)
	}
	return ok
}

// bound cuts a line's message and values (see LogLineBytes).
func bound(msg string, args []any) (string, []any) {
	msg = Bound(msg, LogLineBytes)
	if len(args) > LogMaxArgs {
		args = append(args[:LogMaxArgs:LogMaxArgs], "args_dropped", len(args)-LogMaxArgs)
	}
	for i, a := range args {
		switch v := a.(type) {
		case string:
			args[i] = Bound(v, LogValueBytes)
		case error:
			args[i] = Bound(v.Error(), LogValueBytes)
		case fmt.Stringer:
			args[i] = Bound(v.String(), LogValueBytes)
		}
	}
	return msg, args
}

// emit logs one line at level through the wrapped logger if the budget
// allows, without the pairs dedup drops, cut by bound.
func (l pluginLogger) emit(level hclog.Level, msg string, args []any) {
	if level != hclog.NoLevel && level < l.Logger.GetLevel() {
		return
	}
	if !l.admit() {
		return
	}
	msg, args = bound(msg, l.dedup(args))
	l.Logger.Log(level, msg, args...)
}

// dedup returns args without the pairs that repeat a key of the logger's
// implied args (see pluginLogger).
func (l pluginLogger) dedup(args []any) []any {
	implied := l.ImpliedArgs()
	if len(implied) == 0 || len(args) < 2 {
		return args
	}
	has := make(map[string]any, len(implied)/2)
	for i := 0; i+1 < len(implied); i += 2 {
		has[fmt.Sprint(implied[i])] = implied[i+1]
	}
	out := make([]any, 0, len(args))
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			out = append(out, args[i])
			break
		}
		k, v := fmt.Sprint(args[i]), args[i+1]
		if hv, ok := has[k]; ok {
			if fmt.Sprint(hv) == fmt.Sprint(v) {
				continue
			}
			k = "plugin_" + k
		}
		out = append(out, k, v)
	}
	return out
}

// Log, Trace, Debug, Info, Warn and Error log through the wrapped logger
// without the pairs dedup drops.
func (l pluginLogger) Log(level hclog.Level, msg string, args ...any) { l.emit(level, msg, args) }
func (l pluginLogger) Trace(msg string, args ...any)                  { l.emit(hclog.Trace, msg, args) }
func (l pluginLogger) Debug(msg string, args ...any)                  { l.emit(hclog.Debug, msg, args) }
func (l pluginLogger) Info(msg string, args ...any)                   { l.emit(hclog.Info, msg, args) }
func (l pluginLogger) Warn(msg string, args ...any)                   { l.emit(hclog.Warn, msg, args) }
func (l pluginLogger) Error(msg string, args ...any)                  { l.emit(hclog.Error, msg, args) }

// With, Named and ResetNamed return loggers that dedup as well: go-plugin
// names its logger after the plugin binary before it re-emits a line.
func (l pluginLogger) With(args ...any) hclog.Logger {
	return pluginLogger{l.Logger.With(args...), l.lim}
}
func (l pluginLogger) Named(name string) hclog.Logger {
	return pluginLogger{l.Logger.Named(name), l.lim}
}
func (l pluginLogger) ResetNamed(name string) hclog.Logger {
	return pluginLogger{l.Logger.ResetNamed(name), l.lim}
}

var _ hclog.Logger = pluginLogger{}
