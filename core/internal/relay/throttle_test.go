package relay_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/relay"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
)

const throttleRules = `
defaults { time_zone = "UTC" }
channel "SMS" { providers = [{ plugin = "sink" }] }
channel "WEBSOCKET" {
  best_effort = true
  providers   = [{ plugin = "sink" }]
}
event "KITCHEN_ALERT" {
  audience { user = "{{ .payload.user }}" }
  mandatory   = ["WEBSOCKET", "SMS"]
  quiet_hours = "ignore"
  throttle {
    channels = ["SMS"]
    key      = "{{ .payload.oven }}"
    limit    = 2
    per      = "1h"
  }
}
`

// TestThrottleDropsWhatGoesOverTheLimit relays seven alerts for one user
// (five about oven 1, two about oven 2) through two relay workers at once:
// per oven at most two SMS go out in the hour, the rest are SKIPPED with
// the reason, WEBSOCKET is not throttled, and an alert whose key renders
// empty fails its SMS alone.
func TestThrottleDropsWhatGoesOverTheLimit(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	p := filepath.Join(t.TempDir(), "rules.hcl")
	if err := os.WriteFile(p, []byte(throttleRules), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := rulesfile.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		enqueue(t, db, fmt.Sprintf("oven1-%d", i), "KITCHEN_ALERT", `{"user": "u1", "oven": "1"}`)
	}
	enqueue(t, db, "oven2-0", "KITCHEN_ALERT", `{"user": "u1", "oven": "2"}`)
	enqueue(t, db, "oven2-1", "KITCHEN_ALERT", `{"user": "u1", "oven": "2"}`)
	enqueue(t, db, "no-oven", "KITCHEN_ALERT", `{"user": "u1", "oven": ""}`)
	done := make(chan error, 2)
	for range 2 {
		go func() {
			r := relay.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(), relay.Config{BatchSize: 2})
			for {
				n, err := r.RunOnce(context.Background())
				if err != nil || n == 0 {
					done <- err
					return
				}
			}
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE channel = 'SMS' AND status = 'PENDING' AND event_id LIKE 'oven1-%'`); n != 2 {
		t.Errorf("%d SMS for oven 1 pending, want 2", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE channel = 'SMS' AND status = 'SKIPPED' AND last_error = 'throttled: 2 per 1h'`); n != 3 {
		t.Errorf("%d SMS SKIPPED as throttled, want 3", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE channel = 'SMS' AND status = 'PENDING' AND event_id LIKE 'oven2-%'`); n != 2 {
		t.Errorf("%d SMS for oven 2 pending, want 2 (its own count)", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE channel = 'WEBSOCKET' AND status = 'PENDING'`); n != 8 {
		t.Errorf("%d WEBSOCKET pending, want 8 (not throttled)", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE event_id = 'no-oven' AND channel = 'SMS' AND status = 'FAILED' AND last_error LIKE 'throttle key: %rendered empty%'`); n != 1 {
		t.Errorf("the empty key's SMS did not fail alone")
	}
}
