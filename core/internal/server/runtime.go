package server

import (
	"runtime/debug"

	"github.com/heraldhq/herald/core/internal/config"
)

// MemoryLimit is the soft memory limit in force after ApplyMemoryLimit.
type MemoryLimit struct {
	// Bytes is the limit (math.MaxInt64: none).
	Bytes int64
	// From says where it came from: "GOMEMLIMIT" (the environment),
	// "runtime.memory_limit_mib" or "" (none).
	From string
}

// ApplyMemoryLimit sets the Go runtime's soft memory limit from c
// (runtime.memory_limit_mib), unless getenv("GOMEMLIMIT") is set: the Go
// runtime read that at start, and the operator's environment wins. A
// setting of 0 leaves the runtime's limit as it is (none, unless
// GOMEMLIMIT).
func ApplyMemoryLimit(c config.RuntimeConfig, getenv func(string) string) MemoryLimit {
	if getenv("GOMEMLIMIT") != "" {
		return MemoryLimit{Bytes: debug.SetMemoryLimit(-1), From: "GOMEMLIMIT"}
	}
	if c.MemoryLimitMiB <= 0 {
		return MemoryLimit{Bytes: debug.SetMemoryLimit(-1)}
	}
	limit := int64(c.MemoryLimitMiB) << 20
	debug.SetMemoryLimit(limit)
	return MemoryLimit{Bytes: limit, From: "runtime.memory_limit_mib"}
}
