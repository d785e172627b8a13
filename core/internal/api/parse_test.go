package api

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/sdk/producer"
	"github.com/heraldhq/herald/sdk/producer/jsonguard"
)

var tenantWide = store.Principal{Tenant: "t1", KeyID: "k1"}

func TestParseEvent(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"a":`, producer.MaxPayloadDepth+1) + "1" + strings.Repeat("}", producer.MaxPayloadDepth+1)
	tests := map[string]struct {
		body   string
		pr     store.Principal
		status int    // 0: accepted
		field  string // the field the problem names
	}{
		"valid":                    {body: `{"event_id":"e-1","type":"T","payload":{"a":[1,"ü"]}}`},
		"no payload":               {body: `{"event_id":"e-1","type":"T"}`},
		"event_id invalid utf-8":   {body: "{\"event_id\":\"e\xff\",\"type\":\"T\"}", status: 400, field: "event_id"},
		"event_id lone surrogate":  {body: `{"event_id":"e\udc00","type":"T"}`, status: 400, field: "event_id"},
		"event_id nul escape":      {body: `{"event_id":"e\u0000","type":"T"}`, status: 400, field: "event_id"},
		"event_id space":           {body: `{"event_id":"e 1","type":"T"}`, status: 400, field: "event_id"},
		"event_id replacement":     {body: `{"event_id":"e\ufffd","type":"T"}`, status: 400, field: "event_id"},
		"type invalid utf-8":       {body: "{\"event_id\":\"e\",\"type\":\"T\xc3\"}", status: 400, field: "type"},
		"type nul escape":          {body: `{"event_id":"e","type":"T\u0000"}`, status: 400, field: "type"},
		"type control":             {body: `{"event_id":"e","type":"T\u0007"}`, status: 400, field: "type"},
		"project_id invalid utf-8": {body: "{\"event_id\":\"e\",\"type\":\"T\",\"project_id\":\"p\xff\"}", status: 400, field: "project_id"},
		"project_id nul escape":    {body: `{"event_id":"e","type":"T","project_id":"p\u0000"}`, status: 400, field: "project_id"},
		"aggregate_id nul escape":  {body: `{"event_id":"e","type":"T","aggregate_id":"\u0000"}`, status: 400, field: "aggregate_id"},
		"payload nul escape":       {body: `{"event_id":"e","type":"T","payload":{"a":"x\u0000y"}}`, status: 400, field: "payload"},
		"payload nul in key":       {body: `{"event_id":"e","type":"T","payload":{"\u0000":1}}`, status: 400, field: "payload"},
		"payload invalid utf-8":    {body: "{\"event_id\":\"e\",\"type\":\"T\",\"payload\":{\"a\":\"\xff\"}}", status: 400, field: "payload"},
		"payload lone surrogate":   {body: `{"event_id":"e","type":"T","payload":{"a":"\ud800"}}`, status: 400, field: "payload"},
		"payload too deep":         {body: `{"event_id":"e","type":"T","payload":` + deep + `}`, status: 400, field: "payload"},
		"payload too large": {body: `{"event_id":"e","type":"T","payload":{"a":"` + strings.Repeat("x", producer.MaxPayloadBytes) + `"}}`,
			status: 413, field: "payload"},
		"payload huge number":  {body: `{"event_id":"e","type":"T","payload":{"a":1e400}}`, status: 400, field: "payload"},
		"unknown field":        {body: `{"event_id":"e","type":"T","x":1}`, status: 400, field: "x"},
		"other project":        {body: `{"event_id":"e","type":"T","project_id":"p2"}`, pr: store.Principal{Tenant: "t1", Project: "p1"}, status: 403, field: "project_id"},
		"two values":           {body: `{"event_id":"e","type":"T"} {}`, status: 400},
		"invalid key name":     {body: "{\"event_id\":\"e\",\"type\":\"T\",\"\xff\":1}", status: 400},
		"deep outside payload": {body: `{"event_id":"e","type":"T","aggregate_id":` + deep + `}`, status: 400, field: "aggregate_id"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pr := tc.pr
			if pr.Tenant == "" {
				pr = tenantWide
			}
			ev, prob := parseEvent([]byte(tc.body), pr)
			switch {
			case tc.status == 0 && prob != nil:
				t.Fatalf("parseEvent refused the event: %+v", *prob)
			case tc.status == 0:
				assertSafe(t, ev)
			case prob == nil:
				t.Fatalf("parseEvent accepted %+v, want %d naming %q", ev, tc.status, tc.field)
			case prob.status != tc.status || prob.field != tc.field:
				t.Fatalf("parseEvent answered %d naming %q (%s), want %d naming %q", prob.status, prob.field, prob.detail, tc.status, tc.field)
			}
		})
	}
}

// FuzzParseEvent feeds arbitrary bodies to the decoding and checking of
// POST /v1/events: it must never panic, and whatever it accepts must be
// safe to hand to PostgreSQL and within the documented limits.
func FuzzParseEvent(f *testing.F) {
	for _, seed := range []string{
		`{"event_id":"e-1","type":"T","payload":{"a":[1,"ü",{"b":null}]}}`,
		`{"event_id":"e-1","type":"T","project_id":"p1","aggregate_type":"o","aggregate_id":"1","available_at":"2026-01-02T03:04:05Z"}`,
		`{"event_id":"e\u0000","type":"T"}`,
		`{"event_id":"e","type":"T","payload":{"a":"\ud83d\ude00\ud800"}}`,
		"{\"event_id\":\"e\xff\",\"type\":\"T\"}",
		`{"event_id":"e","type":"T","payload":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`,
		`{"event_id":"e","type":"T","payload":{"a":1e400}}`,
		`{"event_id":"e","type":"T","payload":null}`,
		`[]`, `null`, ``, `{"event_id":"\\","type":"\"\u0001"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, prob := parseEvent(body, tenantWide)
		if prob != nil {
			if prob.status < 400 || prob.status > 499 {
				t.Fatalf("status %d for a refused body", prob.status)
			}
			return
		}
		assertSafe(t, ev)
	})
}

// assertSafe fails unless ev is what parseEvent promises to accept.
func assertSafe(t *testing.T, ev producer.Event) {
	t.Helper()
	for field, v := range map[string]string{"tenant_id": ev.TenantID, "project_id": ev.ProjectID, "event_id": ev.EventID,
		"type": ev.Type, "aggregate_type": ev.AggregateType, "aggregate_id": ev.AggregateID} {
		if !utf8.ValidString(v) || strings.ContainsRune(v, 0) || len(v) > producer.MaxIDLength {
			t.Fatalf("accepted %s %q", field, v)
		}
	}
	for i := 0; i < len(ev.EventID); i++ {
		if ev.EventID[i] <= ' ' || ev.EventID[i] > '~' {
			t.Fatalf("accepted event_id %q", ev.EventID)
		}
	}
	if ev.EventID == "" || ev.Type == "" || ev.ProjectID == "" {
		t.Fatalf("accepted an event without an id, type or project: %+v", ev)
	}
	if len(ev.Payload) == 0 {
		return
	}
	if len(ev.Payload) > producer.MaxPayloadBytes {
		t.Fatalf("accepted a payload of %d bytes", len(ev.Payload))
	}
	if err := jsonguard.Check(ev.Payload, producer.MaxPayloadDepth); err != nil {
		t.Fatalf("accepted payload %q: %v", ev.Payload, err)
	}
	if !utf8.Valid(ev.Payload) {
		t.Fatalf("accepted payload %q", ev.Payload)
	}
	var obj map[string]any
	if err := json.Unmarshal(ev.Payload, &obj); err != nil || obj == nil {
		t.Fatalf("accepted payload %q that is not a JSON object: %v", ev.Payload, err)
	}
	walk(t, obj, 1)
}

// walk checks every decoded key and string of v, which sits at depth.
func walk(t *testing.T, v any, depth int) {
	t.Helper()
	switch v.(type) {
	case map[string]any, []any:
		if depth > producer.MaxPayloadDepth {
			t.Fatalf("accepted a payload nested %d deep", depth)
		}
	}
	check := func(s string) {
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			t.Fatalf("accepted payload string %q", s)
		}
	}
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			check(k)
			walk(t, e, depth+1)
		}
	case []any:
		for _, e := range v {
			walk(t, e, depth+1)
		}
	case string:
		check(v)
	}
}
