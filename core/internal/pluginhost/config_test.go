package pluginhost

import (
	"testing"
	"time"
)

// TestWatchSetting: plugins.watch turns on watching every
// DefaultWatchInterval; a WatchInterval set in code wins, and without
// Watch nothing watches.
func TestWatchSetting(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		cfg  Config
		want time.Duration
	}{
		"off":              {Config{}, 0},
		"on":               {Config{Watch: true}, DefaultWatchInterval},
		"on, own interval": {Config{Watch: true, WatchInterval: time.Second}, time.Second},
		"off in code":      {Config{Watch: true, WatchInterval: -1}, -1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := tc.cfg
			c.setDefaults()
			if c.WatchInterval != tc.want {
				t.Fatalf("WatchInterval = %s, want %s", c.WatchInterval, tc.want)
			}
		})
	}
	if DefaultWatchInterval != 2*time.Second {
		t.Fatalf("DefaultWatchInterval = %s: the docs say 2s", DefaultWatchInterval)
	}
}
