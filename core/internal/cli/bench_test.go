package cli

import (
	"errors"
	"strings"
	"testing"
)

// TestBenchSoakFlags checks that bad soak flags are refused before
// anything runs, with the flag named and exit code 2.
func TestBenchSoakFlags(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"window above deliveries": {[]string{"--deliveries", "5", "--soak-window", "10"}, "--soak-window"},
		"no deliveries":           {[]string{"--deliveries", "0"}, "--deliveries"},
		"no backlog":              {[]string{"--soak-backlog", "0"}, "--soak-backlog"},
		"negative baseline":       {[]string{"--soak-baseline", "-1"}, "--soak-baseline: -1"},
		"missing baseline binary": {[]string{"--soak-baseline", "14", "--soak-baseline-herald", "/nonexistent/herald"}, "--soak-baseline-herald"},
		"not a number":            {[]string{"--deliveries", "many"}, "--deliveries"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := NewRoot()
			root.SetArgs(append([]string{"bench", "--scenario", "soak", "--plugins-dir", t.TempDir()}, tc.args...))
			root.SilenceUsage, root.SilenceErrors = true, true
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("herald bench %v: %v, want an error naming %s", tc.args, err, tc.want)
			}
			var ee *ExitError
			if strings.HasPrefix(tc.want, "--soak") && (!errors.As(err, &ee) || ee.Code != 2) {
				t.Errorf("herald bench %v: %v, want exit code 2", tc.args, err)
			}
		})
	}
}

// TestBenchFloorFlags checks that a database floor of no events is refused
// before anything runs, with the flags named and exit code 2.
func TestBenchFloorFlags(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"no fanout events": {"--floor-fanout-events", "0"},
		"no single events": {"--floor-single-events", "-1"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := NewRoot()
			root.SetArgs(append([]string{"bench", "--scenario", "floor", "--plugins-dir", t.TempDir()}, args...))
			root.SilenceUsage, root.SilenceErrors = true, true
			err := root.Execute()
			var ee *ExitError
			if err == nil || !strings.Contains(err.Error(), "--floor-fanout-events and --floor-single-events") || !errors.As(err, &ee) || ee.Code != 2 {
				t.Fatalf("herald bench %v: %v, want exit code 2 naming both flags", args, err)
			}
		})
	}
}
