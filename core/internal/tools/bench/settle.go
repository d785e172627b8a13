package bench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"
)

// Settle waits until the machine's CPUs were at least idleFrac idle over a
// whole second (read from /proc/stat), or until within has passed. It
// reports whether the machine went idle and how long it waited.
func Settle(ctx context.Context, idleFrac float64, within time.Duration) (bool, time.Duration) {
	start := time.Now()
	prevIdle, prevTotal, err := cpuTimes()
	if err != nil {
		return false, 0
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for time.Since(start) < within {
		select {
		case <-ctx.Done():
			return false, time.Since(start)
		case <-t.C:
		}
		idle, total, err := cpuTimes()
		if err != nil {
			return false, time.Since(start)
		}
		if total > prevTotal && float64(idle-prevIdle)/float64(total-prevTotal) >= idleFrac {
			return true, time.Since(start)
		}
		prevIdle, prevTotal = idle, total
	}
	return false, time.Since(start)
}

// cpuTimes returns the idle and total jiffies of all CPUs. Time waiting
// for I/O is not idle: the last run's database being dropped or its dirty
// pages being written back would stall the next run's commits.
func cpuTimes() (idle, total uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	for i, f := range fields[1:] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, 0, err
		}
		total += v
		if i == 3 {
			idle += v
		}
	}
	return idle, total, nil
}
