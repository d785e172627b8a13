package pluginhost

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestPluginLoggerNamesEachKeyOnce: a plugin's line re-emitted under the
// provider's logger carries each key once; a plugin's value that differs
// from the host's is kept as plugin_KEY.
func TestPluginLoggerNamesEachKeyOnce(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		args []any
		want string
	}{
		"same value dropped":     {args: []any{"provider", "p1", "field", "from"}, want: "channel=EMAIL plugin=email provider=p1 field=from"},
		"other value renamed":    {args: []any{"provider", "fcm"}, want: "channel=EMAIL plugin=email provider=p1 plugin_provider=fcm"},
		"no shared key":          {args: []any{"pid", 7}, want: "channel=EMAIL plugin=email provider=p1 pid=7"},
		"odd arg count kept":     {args: []any{"provider", "p1", "dangling"}, want: "channel=EMAIL plugin=email provider=p1"},
		"no args":                {args: nil, want: "channel=EMAIL plugin=email provider=p1"},
		"named logger keeps it":  {args: []any{"provider", "p1", "channel", "EMAIL"}, want: "channel=EMAIL plugin=email provider=p1"},
		"with after wrap dedups": {args: []any{"queue", "q1", "provider", "p1"}, want: "channel=EMAIL plugin=email provider=p1 queue=q1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var buf strings.Builder
			base := hclog.New(&hclog.LoggerOptions{Name: "herald", Output: &buf}).With("plugin", "email", "channel", "EMAIL", "provider", "p1")
			l := newPluginLogger(base, nil).Named("herald-plugin-email")
			if name == "with after wrap dedups" {
				l = l.With("queue", "q1")
			}
			l.Info("configured", tc.args...)
			line := strings.TrimSpace(buf.String())
			if _, got, _ := strings.Cut(line, "configured: "); !strings.HasPrefix(got, tc.want) {
				t.Errorf("line %q, want %q after the message", line, tc.want)
			}
			assertKeysOnce(t, line)
		})
	}
}

// TestPluginLogLinesCarryProviderOnce: the SDK's "configured
// provider=NAME" line of a real plugin, re-emitted by the host, names the
// provider once.
func TestPluginLogLinesCarryProviderOnce(t *testing.T) {
	t.Parallel()
	env := startHost(t, []channel.Config{sinkChannel("TEST", nil)}, nil)
	var line string
	testenv.Eventually(t, 10*time.Second, func() bool {
		for _, l := range strings.Split(env.logs.String(), "\n") {
			if strings.Contains(l, ": configured:") {
				line = l
				return true
			}
		}
		return false
	}, "the plugin's configured line in the host log:\n%s", env.logs)
	if !strings.Contains(line, "provider=sink") {
		t.Errorf("line %q lacks provider=sink", line)
	}
	assertKeysOnce(t, line)
}

var logKey = regexp.MustCompile(`(?:^|\s)([a-z_]+)=`)

func assertKeysOnce(t *testing.T, line string) {
	t.Helper()
	seen := map[string]bool{}
	for _, m := range logKey.FindAllStringSubmatch(line, -1) {
		if seen[m[1]] {
			t.Errorf("key %s twice in %q", m[1], line)
		}
		seen[m[1]] = true
	}
}
