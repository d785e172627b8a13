package rules_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
)

func exampleRules(t *testing.T) *rules.RuleSet {
	t.Helper()
	rs, err := rulesfile.Load("../../../examples/rules/herald.hcl")
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

var reservationEvent = rules.Event{
	EventID: "evt-1",
	Type:    "RESERVATION_REQUESTED",
	Payload: json.RawMessage(`{"reservation_id": 12345678901, "restaurant_id": 5, "customer_name": "Maria", "pax": 4, "time": "20:30"}`),
}

func TestRender(t *testing.T) {
	t.Parallel()
	rs := exampleRules(t)
	tests := map[string]struct {
		ev      rules.Event
		r       directory.Recipient
		channel string
		want    rules.Rendered
	}{
		"inbox, default locale, data block": {
			ev: reservationEvent, r: directory.Recipient{UserID: "staff2", Locale: "en"},
			want: rules.Rendered{Title: "New reservation", Body: "Maria, 4 people at 20:30", Data: json.RawMessage(`{"reservation_id":"12345678901"}`)},
		},
		"inbox, Italian variant keeps the default data": {
			ev: reservationEvent, r: directory.Recipient{UserID: "staff1", Locale: "it_IT"},
			want: rules.Rendered{Title: "Nuova prenotazione", Body: "Maria, 4 persone alle 20:30", Data: json.RawMessage(`{"reservation_id":"12345678901"}`)},
		},
		"email, unknown locale falls back to the default text": {
			ev: reservationEvent, r: directory.Recipient{UserID: "staff2", Locale: "fr"}, channel: "EMAIL",
			want: rules.Rendered{
				Subject: "New reservation: Maria (4)",
				Title:   "New reservation",
				Body:    "Maria asked for a table for 4 at 20:30.",
				HTML:    "<p><b>Maria</b> asked for a table for 4 at 20:30.</p>",
			},
		},
		"email, Italian subject and body, default html": {
			ev: reservationEvent, r: directory.Recipient{UserID: "staff1", Locale: "it"}, channel: "EMAIL",
			want: rules.Rendered{
				Subject: "Nuova prenotazione: Maria (4)",
				Title:   "Nuova prenotazione",
				Body:    "Maria ha chiesto un tavolo per 4 alle 20:30.",
				HTML:    "<p><b>Maria</b> asked for a table for 4 at 20:30.</p>",
			},
		},
		"push without a template uses the inbox title and body": {
			ev: reservationEvent, r: directory.Recipient{UserID: "staff2"}, channel: "PUSH",
			want: rules.Rendered{Subject: "New reservation", Title: "New reservation", Body: "Maria, 4 people at 20:30"},
		},
		"html escapes payload text": {
			ev: rules.Event{Type: "RESERVATION_REQUESTED", Payload: json.RawMessage(`{"customer_name": "<script>", "pax": 1, "time": "x"}`)},
			r:  directory.Recipient{UserID: "u"}, channel: "EMAIL",
			want: rules.Rendered{
				Subject: "New reservation: <script> (1)",
				Title:   "New reservation",
				Body:    "<script> asked for a table for 1 at x.",
				HTML:    "<p><b>&lt;script&gt;</b> asked for a table for 1 at x.</p>",
			},
		},
		"inbox data defaults to the payload": {
			ev:   rules.Event{Type: "CHAT_MESSAGE_SENT", Payload: json.RawMessage(`{"sender_name":"Bo","text":"hi","recipients":["1"]}`)},
			r:    directory.Recipient{UserID: "1"},
			want: rules.Rendered{Title: "Bo", Body: "hi", Data: json.RawMessage(`{"sender_name":"Bo","text":"hi","recipients":["1"]}`)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := rs.Render(tc.ev, tc.r, tc.channel)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Render mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRenderErrors(t *testing.T) {
	t.Parallel()
	rs := exampleRules(t)
	if _, err := rs.Render(rules.Event{Type: "NOPE"}, directory.Recipient{}, ""); !errors.Is(err, rules.ErrNoRule) {
		t.Errorf("unknown type: got %v, want ErrNoRule", err)
	}
	if _, err := rs.Render(reservationEvent, directory.Recipient{}, "SLACK"); err == nil {
		t.Error("a channel the event does not use: got no error")
	}
}

func TestValidatePayload(t *testing.T) {
	t.Parallel()
	rs := exampleRules(t)
	tests := map[string]struct {
		eventType string
		payload   string
		want      *rules.PayloadError
		noRule    bool
	}{
		"valid":                 {eventType: "RESERVATION_REQUESTED", payload: `{"reservation_id": 1, "restaurant_id": 5, "customer_name": "M", "pax": 2, "time": "20:00"}`},
		"no schema, any object": {eventType: "PARTNER_ASSIGNMENT", payload: `{"anything": true}`},
		"wrong type": {
			eventType: "RESERVATION_REQUESTED",
			payload:   `{"reservation_id": 1, "restaurant_id": 5, "customer_name": "M", "pax": "two", "time": "20:00"}`,
			want:      &rules.PayloadError{Path: "/pax", Msg: "got string, want integer"},
		},
		"below minimum": {
			eventType: "RESERVATION_REQUESTED",
			payload:   `{"reservation_id": 1, "restaurant_id": 5, "customer_name": "M", "pax": 0, "time": "20:00"}`,
			want:      &rules.PayloadError{Path: "/pax", Msg: "minimum: got 0, want 1"},
		},
		"missing field": {
			eventType: "RESERVATION_CONFIRMED",
			payload:   `{"reservation_id": 1, "pax": 2, "time": "20:00"}`,
			want:      &rules.PayloadError{Path: "", Msg: "missing property 'customer_id'"},
		},
		"not JSON": {
			eventType: "RESERVATION_CONFIRMED",
			payload:   `{"reservation_id": `,
			want:      &rules.PayloadError{Msg: "not valid JSON: unexpected EOF"},
		},
		"no rule": {eventType: "UNKNOWN", payload: `{}`, noRule: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := rs.ValidatePayload(tc.eventType, json.RawMessage(tc.payload))
			if tc.noRule {
				if !errors.Is(err, rules.ErrNoRule) {
					t.Fatalf("got %v, want ErrNoRule", err)
				}
				return
			}
			var got *rules.PayloadError
			if err != nil && !errors.As(err, &got) {
				t.Fatalf("got %T %v, want *PayloadError", err, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ValidatePayload mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNoRule(t *testing.T) {
	t.Parallel()
	rs := exampleRules(t)
	ev := rules.Event{Type: "UNKNOWN", Payload: json.RawMessage(`{}`)}
	if _, err := rs.Needs(ev); !errors.Is(err, rules.ErrNoRule) {
		t.Errorf("Needs: got %v, want ErrNoRule", err)
	}
	if _, err := rs.Decide(ev, &directory.Directory{}, reservationEvent.OccurredAt); !errors.Is(err, rules.ErrNoRule) {
		t.Errorf("Decide: got %v, want ErrNoRule", err)
	}
}

func TestNeedsMissingPayloadField(t *testing.T) {
	t.Parallel()
	rs := exampleRules(t)
	_, err := rs.Needs(rules.Event{Type: "RESERVATION_REQUESTED", Payload: json.RawMessage(`{"pax": 2}`)})
	if err == nil {
		t.Fatal("a group key from a missing payload field: got no error")
	}
}

func TestAccessors(t *testing.T) {
	t.Parallel()
	rs := exampleRules(t)
	wantTypes := []string{"CHAT_MESSAGE_SENT", "PARTNER_ASSIGNMENT", "RESERVATION_CONFIRMED", "RESERVATION_REQUESTED", "SYSTEM_ANNOUNCEMENT"}
	if diff := cmp.Diff(wantTypes, rs.EventTypes()); diff != "" {
		t.Errorf("EventTypes (-want +got):\n%s", diff)
	}
	var names []string
	for _, ch := range rs.Channels() {
		names = append(names, ch.Name)
	}
	if diff := cmp.Diff([]string{"EMAIL", "PUSH", "SLACK", "SMS", "WEBSOCKET"}, names); diff != "" {
		t.Errorf("Channels (-want +got):\n%s", diff)
	}
	ws, ok := rs.Channel("WEBSOCKET")
	if !ok || !ws.Resolved.BestEffort || ws.Resolved.Intrusive || ws.Retry.MaxAttempts != 1 {
		t.Errorf("WEBSOCKET = %+v, want best effort, not intrusive, one attempt", ws)
	}
	email, _ := rs.Channel("EMAIL")
	if email.Providers[0].Name != "smtp-primary" || email.Providers[1].Name != "smtp-backup" || !email.Resolved.Intrusive {
		t.Errorf("EMAIL = %+v", email)
	}
	// Changing a returned value does not change the rule set.
	email.Providers[0].Config["host"] = "changed"
	again, _ := rs.Channel("EMAIL")
	if again.Providers[0].Config["host"] != "smtp.example.com" {
		t.Error("Channel returned shared provider config")
	}
	if _, ok := rs.Channel("FAX"); ok {
		t.Error("Channel(FAX) found")
	}
}

func TestRecipientActiveDefaultsToTrue(t *testing.T) {
	t.Parallel()
	var d directory.Directory
	if err := json.Unmarshal([]byte(`{"recipients": [{"user_id": "a"}, {"user_id": "b", "active": false}]}`), &d); err != nil {
		t.Fatal(err)
	}
	got := []bool{d.Recipients[0].Active, d.Recipients[1].Active}
	if diff := cmp.Diff([]bool{true, false}, got); diff != "" {
		t.Errorf("active (-want +got):\n%s", diff)
	}
}
