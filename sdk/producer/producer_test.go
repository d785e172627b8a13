package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/heraldhq/herald/sdk/producer"
	"github.com/jackc/pgx/v5"
)

// noDB fails the test if Enqueue touches the database.
type noDB struct{ t *testing.T }

func (d noDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	d.t.Fatalf("the database was queried: %s", sql)
	return nil
}

func TestValidateRefusesHostileStrings(t *testing.T) {
	t.Parallel()
	valid := producer.Event{TenantID: "t1", ProjectID: "default", EventID: "evt-1", Type: "ORDER_PLACED",
		AggregateType: "order", AggregateID: "o-1", Payload: json.RawMessage(`{"a":{"b":[1,"x"]}}`)}
	deep := strings.Repeat(`{"a":`, producer.MaxPayloadDepth) + "1" + strings.Repeat("}", producer.MaxPayloadDepth)
	tests := map[string]struct {
		edit  func(e *producer.Event)
		field string // "" when the event is valid
	}{
		"valid":                       {edit: func(e *producer.Event) {}},
		"empty payload":               {edit: func(e *producer.Event) { e.Payload = nil }},
		"unicode type":                {edit: func(e *producer.Event) { e.Type = "Bestellung_eingegangen_ü" }},
		"payload at depth limit":      {edit: func(e *producer.Event) { e.Payload = json.RawMessage(deep) }},
		"event_id invalid utf-8":      {edit: func(e *producer.Event) { e.EventID = "evt-\xff" }, field: "event_id"},
		"event_id nul":                {edit: func(e *producer.Event) { e.EventID = "evt\x00" }, field: "event_id"},
		"event_id space":              {edit: func(e *producer.Event) { e.EventID = "evt 1" }, field: "event_id"},
		"event_id non-ascii":          {edit: func(e *producer.Event) { e.EventID = "évt" }, field: "event_id"},
		"event_id replacement char":   {edit: func(e *producer.Event) { e.EventID = "evt-\ufffd" }, field: "event_id"},
		"event_id too long":           {edit: func(e *producer.Event) { e.EventID = strings.Repeat("e", producer.MaxIDLength+1) }, field: "event_id"},
		"event_id missing":            {edit: func(e *producer.Event) { e.EventID = "" }, field: "event_id"},
		"type invalid utf-8":          {edit: func(e *producer.Event) { e.Type = "T\xc3" }, field: "type"},
		"type nul":                    {edit: func(e *producer.Event) { e.Type = "T\x00" }, field: "type"},
		"type control":                {edit: func(e *producer.Event) { e.Type = "T\u0085" }, field: "type"},
		"type too long":               {edit: func(e *producer.Event) { e.Type = strings.Repeat("T", producer.MaxIDLength+1) }, field: "type"},
		"aggregate_id nul":            {edit: func(e *producer.Event) { e.AggregateID = "a\x00" }, field: "aggregate_id"},
		"aggregate_type invalid":      {edit: func(e *producer.Event) { e.AggregateType = "\xfe" }, field: "aggregate_type"},
		"project_id invalid utf-8":    {edit: func(e *producer.Event) { e.ProjectID = "p\xff" }, field: "project_id"},
		"project_id nul":              {edit: func(e *producer.Event) { e.ProjectID = "p\x00" }, field: "project_id"},
		"tenant_id nul":               {edit: func(e *producer.Event) { e.TenantID = "t\x00" }, field: "tenant_id"},
		"payload nul escape":          {edit: func(e *producer.Event) { e.Payload = json.RawMessage(`{"a":"\u0000"}`) }, field: "payload"},
		"payload nul escape in key":   {edit: func(e *producer.Event) { e.Payload = json.RawMessage(`{"\u0000":1}`) }, field: "payload"},
		"payload invalid utf-8":       {edit: func(e *producer.Event) { e.Payload = json.RawMessage("{\"a\":\"\xff\"}") }, field: "payload"},
		"payload lone surrogate":      {edit: func(e *producer.Event) { e.Payload = json.RawMessage(`{"a":"\ud800"}`) }, field: "payload"},
		"payload too deep":            {edit: func(e *producer.Event) { e.Payload = json.RawMessage(`{"a":` + deep + `}`) }, field: "payload"},
		"payload too large":           {edit: func(e *producer.Event) { e.Payload = bigPayload(producer.MaxPayloadBytes + 1) }, field: "payload"},
		"payload number out of range": {edit: func(e *producer.Event) { e.Payload = json.RawMessage(`{"a":1e400}`) }, field: "payload"},
		"payload not an object":       {edit: func(e *producer.Event) { e.Payload = json.RawMessage(`[1]`) }, field: "payload"},
		"payload null":                {edit: func(e *producer.Event) { e.Payload = json.RawMessage(`null`) }, field: "payload"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ev := valid
			tc.edit(&ev)
			err := ev.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var fe *producer.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("Validate() = %v, want a *FieldError on %s", err, tc.field)
			}
			// Enqueue refuses the same event before it reaches the database.
			err = producer.Enqueue(context.Background(), noDB{t}, ev)
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("Enqueue() = %v, want a *FieldError on %s", err, tc.field)
			}
		})
	}
}

// bigPayload is a JSON object of exactly n bytes.
func bigPayload(n int) json.RawMessage {
	return json.RawMessage(`{"a":"` + strings.Repeat("x", n-8) + `"}`)
}
