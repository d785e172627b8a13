package bench

import (
	"context"
	"testing"
	"time"
)

func TestCPUTimesAndSettle(t *testing.T) {
	idle, total, err := cpuTimes()
	if err != nil || total == 0 || idle > total {
		t.Fatalf("cpuTimes = %d idle of %d, %v", idle, total, err)
	}
	// Any machine is at least 0% idle: the first whole second settles it.
	if ok, _ := Settle(context.Background(), 0, 5*time.Second); !ok {
		t.Fatal("Settle with a 0% idle threshold did not return idle")
	}
	// No machine is more than 100% idle: it gives up when told to.
	if ok, waited := Settle(context.Background(), 1.01, 1500*time.Millisecond); ok || waited <= 0 {
		t.Fatalf("Settle with an impossible threshold = %v after %s", ok, waited)
	}
}
