package relay_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/metrics"
	"github.com/heraldhq/herald/core/internal/relay"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Events that break their type's rules reach the outbox through
// herald_enqueue (which does not know the rules): a payload that fails the
// type's JSON Schema, an unknown type, and (written before the contract,
// or by the owner with the trigger off) a payload that is not an object.
// Each ends FAILED at the first claim with the API's words naming the
// field, counted by reason, with no notification or delivery; the good
// events of the same batch are relayed in it.
func TestRelayFailsEventsThatBreakTheirTypesRulesAtOnce(t *testing.T) {
	t.Parallel()
	db, rs := setup(t)
	ctx := context.Background()
	enqueue(t, db, "good-1", "BOOKED", `{"user": "u1", "pax": 4}`)
	enqueue(t, db, "four-at-one", "BOOKED", `{"user": "u1", "pax": 0}`)
	enqueue(t, db, "no-pax", "BOOKED", `{"user": "u1"}`)
	enqueue(t, db, "unknown", "NO_SUCH_TYPE", `{"user": "u1"}`)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`ALTER TABLE event_outbox DISABLE TRIGGER event_outbox_contract`,
		`INSERT INTO event_outbox (tenant_id, event_id, event_type, payload) VALUES ('t1', 'array', 'PING', '[{"user": "u1"}]')`,
		`ALTER TABLE event_outbox ENABLE TRIGGER event_outbox_contract`} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue(t, db, "good-2", "PING", `{"user": "u1"}`)

	reg := prometheus.NewRegistry()
	r := relay.New(db.Pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(),
		relay.Config{BatchSize: 10, MaxAttempts: 5, Metrics: metrics.New(reg)})
	if n, err := r.RunOnce(ctx); err != nil || n != 6 {
		t.Fatalf("RunOnce = %d, %v; want the 6 events in one batch", n, err)
	}
	want := map[string]string{
		"four-at-one": "payload at /pax: minimum: got 0, want 1",
		"no-pax":      "payload at /: missing property 'pax'",
		"unknown":     `type: no rule handles event type "NO_SUCH_TYPE"`,
		"array":       "payload: must be a JSON object, not array",
	}
	for id, reason := range want {
		// What GET /v1/events/{id} answers and `herald events show` prints.
		st, err := store.GetEvent(ctx, db.Pool, "t1", id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != "FAILED" || st.Attempts != 1 || st.LastError != reason || len(st.Deliveries) != 0 {
			t.Errorf("%s: %s after %d attempts, %q, %d deliveries; want FAILED after 1 with %q and none",
				id, st.Status, st.Attempts, st.LastError, len(st.Deliveries), reason)
		}
		if n := count(t, db, `SELECT count(*) FROM notifications WHERE event_id = $1`, id); n != 0 {
			t.Errorf("%s has %d notifications", id, n)
		}
	}
	// The reasons are what POST /v1/events answers for the same events.
	for id, reason := range want {
		var typ, payload string
		if err := db.Pool.QueryRow(ctx, `SELECT event_type, payload::text FROM event_outbox WHERE event_id = $1`, id).Scan(&typ, &payload); err != nil {
			t.Fatal(err)
		}
		rj := relay.Check(rs, typ, []byte(payload))
		if rj == nil || rj.Reason != reason {
			t.Errorf("Check(%s) = %+v, want %q", id, rj, reason)
		}
		var pe *rules.PayloadError
		if err := rs.ValidatePayload(typ, json.RawMessage(payload)); id != "array" && id != "unknown" && (!asPayloadError(err, &pe) || pe.Error() != reason) {
			t.Errorf("%s: the API's check says %v, the relay %q", id, err, reason)
		}
	}
	if n := count(t, db, `SELECT count(*) FROM event_outbox WHERE status = 'PROCESSED' AND event_id IN ('good-1', 'good-2')`); n != 2 {
		t.Fatalf("%d of the good events processed in the same batch, want 2", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE event_id IN ('good-1', 'good-2')`); n == 0 {
		t.Fatal("the good events have no deliveries")
	}
	for reason, n := range map[string]float64{metrics.ReasonPayloadSchema: 2, metrics.ReasonUnknownType: 1, metrics.ReasonPayloadNotObject: 1,
		metrics.ReasonAttemptsExhausted: 0} {
		if got := failedTotal(t, reg, reason); got != n {
			t.Errorf("herald_events_failed_total{reason=%s} = %g, want %g", reason, got, n)
		}
	}
	// Nothing is left to retry.
	if n, err := r.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("second RunOnce = %d, %v; want nothing", n, err)
	}
}

func asPayloadError(err error, pe **rules.PayloadError) bool {
	p, ok := err.(*rules.PayloadError)
	*pe = p
	return ok
}
