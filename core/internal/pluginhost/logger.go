package pluginhost

import (
	"fmt"

	"github.com/hashicorp/go-hclog"
)

// pluginLogger is the logger go-plugin re-emits a plugin's log lines to:
// the provider's logger, which already names the plugin, channel and
// provider. A pair of a line whose key the logger already carries is
// dropped when its value is the same (the SDK logs "configured
// provider=NAME", which hclog would print as "provider=NAME
// provider=NAME"), and kept as "plugin_KEY" when it differs, so that every
// key appears once in a line.
type pluginLogger struct {
	hclog.Logger
}

// newPluginLogger wraps l; see pluginLogger.
func newPluginLogger(l hclog.Logger) hclog.Logger { return pluginLogger{l} }

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
func (l pluginLogger) Log(level hclog.Level, msg string, args ...any) {
	l.Logger.Log(level, msg, l.dedup(args)...)
}
func (l pluginLogger) Trace(msg string, args ...any) { l.Logger.Trace(msg, l.dedup(args)...) }
func (l pluginLogger) Debug(msg string, args ...any) { l.Logger.Debug(msg, l.dedup(args)...) }
func (l pluginLogger) Info(msg string, args ...any)  { l.Logger.Info(msg, l.dedup(args)...) }
func (l pluginLogger) Warn(msg string, args ...any)  { l.Logger.Warn(msg, l.dedup(args)...) }
func (l pluginLogger) Error(msg string, args ...any) { l.Logger.Error(msg, l.dedup(args)...) }

// With, Named and ResetNamed return loggers that dedup as well: go-plugin
// names its logger after the plugin binary before it re-emits a line.
func (l pluginLogger) With(args ...any) hclog.Logger { return pluginLogger{l.Logger.With(args...)} }
func (l pluginLogger) Named(name string) hclog.Logger {
	return pluginLogger{l.Logger.Named(name)}
}
func (l pluginLogger) ResetNamed(name string) hclog.Logger {
	return pluginLogger{l.Logger.ResetNamed(name)}
}

var _ hclog.Logger = pluginLogger{}
