package server

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/heraldhq/herald/core/internal/config"
)

// TestApplyMemoryLimit: runtime.memory_limit_mib sets the runtime's soft
// memory limit, 0 leaves it alone, and a GOMEMLIMIT in the environment
// wins over the setting. The cases change a process-wide setting, so they
// run one after the other and the limit is restored at the end.
func TestApplyMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	noEnv := func(string) string { return "" }
	for _, tc := range []struct {
		name   string
		start  int64 // the limit in force before the call
		mib    int
		getenv func(string) string
		want   MemoryLimit
	}{
		{"the setting", math.MaxInt64, 100, noEnv, MemoryLimit{Bytes: 100 << 20, From: "runtime.memory_limit_mib"}},
		{"0 leaves no limit", math.MaxInt64, 0, noEnv, MemoryLimit{Bytes: math.MaxInt64}},
		{"0 leaves the runtime's limit", 64 << 20, 0, noEnv, MemoryLimit{Bytes: 64 << 20}},
		{"GOMEMLIMIT wins", 200 << 20, 100, func(k string) string {
			if k == "GOMEMLIMIT" {
				return "200MiB"
			}
			return ""
		}, MemoryLimit{Bytes: 200 << 20, From: "GOMEMLIMIT"}},
	} {
		debug.SetMemoryLimit(tc.start)
		got := ApplyMemoryLimit(config.RuntimeConfig{MemoryLimitMiB: tc.mib}, tc.getenv)
		if got != tc.want {
			t.Errorf("%s: ApplyMemoryLimit = %+v, want %+v", tc.name, got, tc.want)
		}
		if inForce := debug.SetMemoryLimit(-1); inForce != tc.want.Bytes {
			t.Errorf("%s: the runtime's limit is %d, want %d", tc.name, inForce, tc.want.Bytes)
		}
	}
}
