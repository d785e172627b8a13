package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/heraldhq/herald/sdk/producer"
)

// TestPostEventRefusesHostileInput posts strings PostgreSQL would refuse or
// rewrite to the real API: each is a 400 (413 for size) naming the field,
// never a 500 "safe to retry" that a producer would retry forever.
func TestPostEventRefusesHostileInput(t *testing.T) {
	w := newWorld(t)
	deep := strings.Repeat(`{"a":`, producer.MaxPayloadDepth+1) + "1" + strings.Repeat("}", producer.MaxPayloadDepth+1)
	tests := map[string]struct {
		body   string
		status int
		field  string
	}{
		"payload nul escape":       {body: `{"event_id":"e1","type":"T","payload":{"a":"x\u0000"}}`, status: 400, field: "payload"},
		"payload invalid utf-8":    {body: "{\"event_id\":\"e1\",\"type\":\"T\",\"payload\":{\"a\":\"\xff\"}}", status: 400, field: "payload"},
		"payload lone surrogate":   {body: `{"event_id":"e1","type":"T","payload":{"a":"\udc00"}}`, status: 400, field: "payload"},
		"event_id nul escape":      {body: `{"event_id":"e\u0000","type":"T"}`, status: 400, field: "event_id"},
		"event_id invalid utf-8":   {body: "{\"event_id\":\"e\xff\",\"type\":\"T\"}", status: 400, field: "event_id"},
		"event_id with a space":    {body: `{"event_id":"e 1","type":"T"}`, status: 400, field: "event_id"},
		"type nul escape":          {body: `{"event_id":"e1","type":"T\u0000"}`, status: 400, field: "type"},
		"type invalid utf-8":       {body: "{\"event_id\":\"e1\",\"type\":\"T\xfe\"}", status: 400, field: "type"},
		"project_id nul escape":    {body: `{"event_id":"e1","type":"T","project_id":"p\u0000"}`, status: 400, field: "project_id"},
		"project_id invalid utf-8": {body: "{\"event_id\":\"e1\",\"type\":\"T\",\"project_id\":\"p\xff\"}", status: 400, field: "project_id"},
		"payload too deep":         {body: `{"event_id":"e1","type":"T","payload":` + deep + `}`, status: 400, field: "payload"},
		"payload too large": {body: `{"event_id":"e1","type":"T","payload":{"a":"` + strings.Repeat("x", producer.MaxPayloadBytes) + `"}}`,
			status: http.StatusRequestEntityTooLarge, field: "payload"},
		// Within the limit as sent, 50 times over it as stored: jsonb
		// writes each 1e308 out in 309 digits. The database refuses it
		// (migration 0023), and the API says so as a 413, not a 500.
		"payload too large as stored": {body: `{"event_id":"e1","type":"T","payload":{"a":[` + strings.TrimSuffix(strings.Repeat("1e308,", 40_000), ",") + `]}}`,
			status: http.StatusRequestEntityTooLarge, field: "payload"},
		"body too large": {body: `{"event_id":"e1","type":"T","payload":{"a":"` + strings.Repeat("x", 1<<20) + `"}}`,
			status: http.StatusRequestEntityTooLarge},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := w.do(t, "POST", "/v1/events", w.keys["a"], tc.body)
			if r.code != tc.status {
				t.Fatalf("%d %s, want %d", r.code, r.body, tc.status)
			}
			if p := r.problem(t); p.Field != tc.field {
				t.Fatalf("the problem names %q (%s), want %q", p.Field, p.Detail, tc.field)
			}
		})
	}
	var n int
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM event_outbox`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d events written (%v), want none", n, err)
	}
	// A path that PostgreSQL could not compare is a 404, not a 500.
	if r := w.do(t, "GET", "/v1/events/e%00", w.keys["a"], ""); r.code != http.StatusNotFound {
		t.Fatalf("GET with a NUL event_id: %d %s", r.code, r.body)
	}
	if r := w.do(t, "POST", "/v1/apikeys/k%FF/revoke", w.keys["a"], ""); r.code != http.StatusNotFound {
		t.Fatalf("revoke with an invalid key_id: %d %s", r.code, r.body)
	}
}

// TestAPIKeyBodiesRefuseHostileInput checks the key management bodies.
func TestAPIKeyBodiesRefuseHostileInput(t *testing.T) {
	w := newWorld(t)
	for name, body := range map[string]string{
		"nul escape":    `{"name":"ci\u0000"}`,
		"invalid utf-8": "{\"name\":\"ci\xff\"}",
		"control":       `{"name":"ci\u001b[31m"}`,
	} {
		t.Run(name, func(t *testing.T) {
			r := w.do(t, "POST", "/v1/apikeys", w.keys["a"], body)
			if r.code != http.StatusBadRequest || r.problem(t).Field != "name" {
				t.Fatalf("%d %s, want 400 naming name", r.code, r.body)
			}
		})
	}
	if r := w.do(t, "POST", "/v1/apikeys", w.keys["a"], `{"project_id":"p\u0000"}`); r.code != http.StatusBadRequest || r.problem(t).Field != "project_id" {
		t.Fatalf("%d %s, want 400 naming project_id", r.code, r.body)
	}
}

// TestReusedEventIDWithOtherContentIsAConflict: posting the same event again
// answers 200 with the original; the same event_id with another type or
// payload is a 409 saying so.
func TestReusedEventIDWithOtherContentIsAConflict(t *testing.T) {
	w := newWorld(t)
	post := func(body string) reply { return w.do(t, "POST", "/v1/events", w.keys["a"], body) }
	first := `{"event_id":"e1","type":"T","payload":{"b":[1,2],"a":"x"}}`
	if r := post(first); r.code != http.StatusCreated {
		t.Fatalf("first post: %d %s", r.code, r.body)
	}
	for name, body := range map[string]string{
		"same body":                 first,
		"same payload, other order": `{"event_id":"e1","type":"T","payload":{ "a":"x", "b":[1, 2] }}`,
	} {
		r := post(body)
		if r.code != http.StatusOK || !strings.Contains(string(r.body), `"event_id":"e1"`) {
			t.Fatalf("%s: %d %s, want 200 with the original event", name, r.code, r.body)
		}
	}
	for name, body := range map[string]string{
		"other payload": `{"event_id":"e1","type":"T","payload":{"b":[1,2],"a":"y"}}`,
		"no payload":    `{"event_id":"e1","type":"T"}`,
		"other type":    `{"event_id":"e1","type":"U","payload":{"b":[1,2],"a":"x"}}`,
	} {
		r := post(body)
		if r.code != http.StatusConflict {
			t.Fatalf("%s: %d %s, want 409", name, r.code, r.body)
		}
		if p := r.problem(t); p.Field != "event_id" || !strings.Contains(p.Detail, "payload") {
			t.Fatalf("%s: the problem says %+v", name, p)
		}
	}
	// An event written before payload_sha256 existed compares by type only.
	if _, err := w.db.Pool.Exec(context.Background(), `UPDATE event_outbox SET payload_sha256 = NULL`); err != nil {
		t.Fatal(err)
	}
	if r := post(`{"event_id":"e1","type":"T","payload":{"other":true}}`); r.code != http.StatusOK {
		t.Fatalf("an old event with another payload: %d %s, want 200", r.code, r.body)
	}
	if r := post(`{"event_id":"e1","type":"U"}`); r.code != http.StatusConflict {
		t.Fatalf("an old event with another type: %d %s, want 409", r.code, r.body)
	}
}

// TestHostileBodiesAgainstTheDocument sends bodies and parameters the
// OpenAPI document refuses (wrong types, unknown fields, bad formats):
// each is a 400 problem document naming the field, and the validating
// transport (newWorld's openapitest.Watch) checks the exchange too.
func TestHostileBodiesAgainstTheDocument(t *testing.T) {
	w := newWorld(t)
	tests := map[string]struct {
		method, path, body string
		field              string
	}{
		"event_id a number":       {"POST", "/v1/events", `{"event_id":5,"type":"T"}`, "event_id"},
		"type an object":          {"POST", "/v1/events", `{"event_id":"e1","type":{"a":1}}`, "type"},
		"payload an array":        {"POST", "/v1/events", `{"event_id":"e1","type":"T","payload":[1]}`, "payload"},
		"unknown event field":     {"POST", "/v1/events", `{"event_id":"e1","type":"T","priority":1}`, "priority"},
		"available_at not a time": {"POST", "/v1/events", `{"event_id":"e1","type":"T","available_at":"tomorrow"}`, "available_at"},
		"event body an array":     {"POST", "/v1/events", `[]`, ""},
		"key name a number":       {"POST", "/v1/apikeys", `{"name":7}`, "name"},
		"unknown key field":       {"POST", "/v1/apikeys", `{"name":"ci","admin":true}`, "admin"},
		"expires_at not a time":   {"POST", "/v1/apikeys", `{"name":"ci","expires_at":"never"}`, "expires_at"},
		"grace a number":          {"POST", "/v1/apikeys/k1/rotate", `{"grace":5}`, "grace"},
		"after negative":          {"GET", "/v1/actions?after=-1", ``, "after"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := w.do(t, tc.method, tc.path, w.keys["a"], tc.body)
			if r.code != http.StatusBadRequest {
				t.Fatalf("%d %s, want 400", r.code, r.body)
			}
			if p := r.problem(t); p.Field != tc.field {
				t.Fatalf("the problem names %q (%s), want %q", p.Field, p.Detail, tc.field)
			}
		})
	}
}
