package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/relay"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/sdk/producer"
)

// TestEventThatBreaksItsRulesFailsAtOnceEndToEnd: a producer login
// enqueues, through herald_enqueue, a reservation for four people at
// seat count 0 (the type's JSON Schema wants at least 1) and an event of a
// type no rule handles, between two good events. The relay's first claim
// fails both at once; the API's GET /v1/events/{id} (which `herald events
// show` prints, through producer.Client) shows FAILED after one attempt
// with the words POST /v1/events would have answered, and the good events
// are PROCESSED in the same batch.
func TestEventThatBreaksItsRulesFailsAtOnceEndToEnd(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "rules.hcl")
	if err := os.WriteFile(p, []byte(`
channel "WEBSOCKET" {
  best_effort = true
  providers   = [{ plugin = "sink" }]
}
event "RESERVATION_REQUESTED" {
  audience { user = "{{ .payload.user }}" }
  mandatory   = ["WEBSOCKET"]
  quiet_hours = "ignore"
  payload_schema = <<JSON
{"type": "object", "required": ["user", "pax"],
 "properties": {"user": {"type": "string"}, "pax": {"type": "integer", "minimum": 1}}}
JSON
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := rulesfile.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	svc := producerLogin(t, w, "svc_"+strings.TrimPrefix(w.db.Name, "herald_test_"), "a")
	for _, ev := range [][3]string{
		{"r-1", "RESERVATION_REQUESTED", `{"user": "u1", "pax": 2}`},
		{"r-2", "RESERVATION_REQUESTED", `{"user": "u1", "pax": 0}`},
		{"x-1", "RESERVATION_CANCELED", `{"user": "u1"}`},
		{"r-3", "RESERVATION_REQUESTED", `{"user": "u1", "pax": 4}`},
	} {
		var outcome string
		if err := svc.QueryRow(ctx, `SELECT outcome FROM herald_enqueue('a', $1, $2, $3::jsonb)`, ev[0], ev[1], ev[2]).Scan(&outcome); err != nil || outcome != "new" {
			t.Fatalf("enqueue %s: %q, %v", ev[0], outcome, err)
		}
	}
	r := relay.New(w.db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(), relay.Config{BatchSize: 10, MaxAttempts: 5})
	if n, err := r.RunOnce(ctx); err != nil || n != 4 {
		t.Fatalf("RunOnce = %d, %v; want the 4 events in one batch", n, err)
	}
	c := &producer.Client{BaseURL: w.url, APIKey: w.keys["a"]}
	for id, want := range map[string]struct{ status, lastError string }{
		"r-1": {"PROCESSED", ""},
		"r-2": {"FAILED", "payload at /pax: minimum: got 0, want 1"},
		"x-1": {"FAILED", `type: no rule handles event type "RESERVATION_CANCELED"`},
		"r-3": {"PROCESSED", ""},
	} {
		st, err := c.Event(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != want.status || st.LastError != want.lastError || st.Attempts != 1 {
			t.Errorf("GET /v1/events/%s: %s after %d attempts, %q; want %s after 1, %q", id, st.Status, st.Attempts, st.LastError, want.status, want.lastError)
		}
	}
	// POST /v1/events answers its 422 with rules.RuleSet.ValidatePayload's
	// error (this world's API has no rules loaded): the same words.
	if err := rs.ValidatePayload("RESERVATION_REQUESTED", []byte(`{"user":"u1","pax":0}`)); err == nil || err.Error() != "payload at /pax: minimum: got 0, want 1" {
		t.Fatalf("the API's check says %v", err)
	}
}
