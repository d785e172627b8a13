package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestWebhookSettingsAPI walks PUT/GET/DELETE /v1/settings/webhook, the
// rotation and the replay as tenants a and b: the secret is shown once,
// never read back, each tenant sees only its own webhook, and every bad
// body is a problem document naming its field.
func TestWebhookSettingsAPI(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	field := func(r reply) string {
		var p struct {
			Field string `json:"field"`
		}
		_ = json.Unmarshal(r.body, &p)
		return p.Field
	}
	if r := w.do(t, "GET", "/v1/settings/webhook", w.keys["a"], ""); r.code != http.StatusNotFound {
		t.Fatalf("GET before any PUT: %d %s", r.code, r.body)
	}
	bad := map[string]struct{ body, field string }{
		"no url":           {`{"kinds": ["delivery.sent"]}`, "url"},
		"url not a string": {`{"url": 7, "kinds": ["delivery.sent"]}`, "url"},
		"http public":      {`{"url": "http://hooks.example.com/h", "kinds": ["delivery.sent"]}`, "url"},
		"loopback":         {`{"url": "http://127.0.0.1:9/h", "kinds": ["delivery.sent"]}`, "url"},
		"private address":  {`{"url": "https://10.0.0.7/h", "kinds": ["delivery.sent"]}`, "url"},
		"metadata address": {`{"url": "https://169.254.169.254/latest", "kinds": ["delivery.sent"]}`, "url"},
		"nul in url":       {`{"url": "https://hooks.example.com/\u0000", "kinds": ["delivery.sent"]}`, "url"},
		"huge url":         {`{"url": "https://hooks.example.com/` + strings.Repeat("a", 3000) + `", "kinds": ["delivery.sent"]}`, "url"},
		"no kinds":         {`{"url": "https://hooks.example.com/h"}`, "kinds"},
		"empty kinds":      {`{"url": "https://hooks.example.com/h", "kinds": []}`, "kinds"},
		"unknown kind":     {`{"url": "https://hooks.example.com/h", "kinds": ["delivery.sent", "delivery.lost"]}`, "kinds"},
		"kinds not a list": {`{"url": "https://hooks.example.com/h", "kinds": "delivery.sent"}`, "kinds"},
		"unknown field":    {`{"url": "https://hooks.example.com/h", "kinds": ["delivery.sent"], "secret": "mine"}`, "secret"},
		"enabled a string": {`{"url": "https://hooks.example.com/h", "kinds": ["delivery.sent"], "enabled": "yes"}`, "enabled"},
	}
	for name, tc := range bad {
		r := w.do(t, "PUT", "/v1/settings/webhook", w.keys["a"], tc.body)
		if r.code != http.StatusBadRequest || field(r) != tc.field {
			t.Errorf("%s: %d %s; want 400 naming %s", name, r.code, r.body, tc.field)
		}
	}

	r := w.do(t, "PUT", "/v1/settings/webhook", w.keys["a"], `{"url": "https://hooks.a.example/herald", "kinds": ["delivery.sent", "notification.read"]}`)
	var made struct {
		URL    string   `json:"url"`
		Kinds  []string `json:"kinds"`
		Secret string   `json:"secret"`
	}
	if err := json.Unmarshal(r.body, &made); r.code != http.StatusCreated || err != nil || !strings.HasPrefix(made.Secret, "whsec_") || len(made.Kinds) != 2 {
		t.Fatalf("PUT new webhook: %d %s", r.code, r.body)
	}
	r = w.do(t, "PUT", "/v1/settings/webhook", w.keys["a"], `{"url": "https://hooks.a.example/v2", "kinds": ["delivery.failed"]}`)
	if r.code != http.StatusOK || strings.Contains(string(r.body), "whsec_") {
		t.Fatalf("PUT change: %d %s (the secret must not be shown again)", r.code, r.body)
	}
	if r := w.do(t, "GET", "/v1/settings/webhook", w.keys["a"], ""); r.code != http.StatusOK ||
		!strings.Contains(string(r.body), "hooks.a.example/v2") || strings.Contains(string(r.body), "whsec_") {
		t.Fatalf("GET: %d %s", r.code, r.body)
	}
	var secret string
	if err := w.db.Pool.QueryRow(ctx, `SELECT secret FROM tenant_webhooks WHERE tenant_id = 'a'`).Scan(&secret); err != nil || secret != made.Secret {
		t.Fatalf("the change replaced the secret: %q, %v", secret, err)
	}
	// Tenant b sees none, and its PUT leaves a's alone.
	if r := w.do(t, "GET", "/v1/settings/webhook", w.keys["b"], ""); r.code != http.StatusNotFound {
		t.Fatalf("b reads a's webhook: %d %s", r.code, r.body)
	}
	if r := w.do(t, "DELETE", "/v1/settings/webhook", w.keys["b"], ""); r.code != http.StatusNotFound {
		t.Fatalf("b deletes a webhook it does not have: %d %s", r.code, r.body)
	}
	if r := w.do(t, "POST", "/v1/settings/webhook/rotate", w.keys["b"], ""); r.code != http.StatusNotFound {
		t.Fatalf("b rotates: %d %s", r.code, r.body)
	}

	// Rotation: a new secret, the old one kept for the overlap.
	for _, body := range []string{`{"overlap": "forever"}`, `{"overlap": "-1h"}`, `{"overlap": "400h"}`, `{"overlap": 5}`} {
		if r := w.do(t, "POST", "/v1/settings/webhook/rotate", w.keys["a"], body); r.code != http.StatusBadRequest || field(r) != "overlap" {
			t.Errorf("rotate %s: %d %s; want 400 naming overlap", body, r.code, r.body)
		}
	}
	r = w.do(t, "POST", "/v1/settings/webhook/rotate", w.keys["a"], `{"overlap": "1h"}`)
	var rot struct {
		Secret string    `json:"secret"`
		Until  time.Time `json:"previous_secret_until"`
	}
	if err := json.Unmarshal(r.body, &rot); r.code != http.StatusOK || err != nil || rot.Secret == made.Secret || !strings.HasPrefix(rot.Secret, "whsec_") ||
		time.Until(rot.Until) < 50*time.Minute {
		t.Fatalf("rotate: %d %s", r.code, r.body)
	}
	var cur, prev string
	if err := w.db.Pool.QueryRow(ctx, `SELECT secret, previous_secret FROM tenant_webhooks WHERE tenant_id = 'a'`).Scan(&cur, &prev); err != nil ||
		cur != rot.Secret || prev != made.Secret {
		t.Fatalf("after rotation: secret %q previous %q, %v", cur, prev, err)
	}

	// Replay: from is checked, and only a's own events are owed again.
	for body, want := range map[string]int{
		`{}`:                                 http.StatusBadRequest,
		`{"from": "yesterday"}`:              http.StatusBadRequest,
		`{"from": "2999-01-01T00:00:00Z"}`:   http.StatusBadRequest,
		`{"from": "2000-01-01T00:00:00Z"}`:   http.StatusBadRequest, // older than the replay window
		`{"from": ["2026-01-01T00:00:00Z"]}`: http.StatusBadRequest,
	} {
		if r := w.do(t, "POST", "/v1/webhooks/replay", w.keys["a"], body); r.code != want || field(r) != "from" {
			t.Errorf("replay %s: %d %s; want %d naming from", body, r.code, r.body, want)
		}
	}
	for _, ten := range []string{"a", "b"} {
		if _, err := w.db.Pool.Exec(ctx, `INSERT INTO notifications (tenant_id, event_id, user_id, event_type) VALUES ($1, 'e1', 'u', 'T');
			`, ten); err != nil {
			t.Fatal(err)
		}
		if _, err := w.db.Pool.Exec(ctx, `INSERT INTO deliveries (tenant_id, notification_id, event_id, event_type, user_id, user_type, channel, status)
			SELECT tenant_id, notification_id, event_id, event_type, user_id, 'STAFF', 'EMAIL', 'FAILED' FROM notifications WHERE tenant_id = $1`, ten); err != nil {
			t.Fatal(err)
		}
	}
	from := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	if r := w.do(t, "POST", "/v1/webhooks/replay", w.keys["b"], `{"from": "`+from+`"}`); r.code != http.StatusConflict {
		t.Fatalf("replay without a webhook: %d %s", r.code, r.body)
	}
	if _, err := w.db.Pool.Exec(ctx, `UPDATE status_events SET webhook_due_at = NULL`); err != nil {
		t.Fatal(err)
	}
	r = w.do(t, "POST", "/v1/webhooks/replay", w.keys["a"], `{"from": "`+from+`"}`)
	if r.code != http.StatusAccepted || !strings.Contains(string(r.body), `"replayed":1`) {
		t.Fatalf("replay: %d %s", r.code, r.body)
	}
	var owed string
	if err := w.db.Pool.QueryRow(ctx, `SELECT string_agg(tenant_id || ':' || kind, ',') FROM status_events WHERE webhook_due_at IS NOT NULL`).Scan(&owed); err != nil ||
		owed != "a:delivery.failed" {
		t.Fatalf("owed after a's replay: %q, %v", owed, err)
	}

	if r := w.do(t, "DELETE", "/v1/settings/webhook", w.keys["a"], ""); r.code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.code, r.body)
	}
	if r := w.do(t, "GET", "/v1/settings/webhook", w.keys["a"], ""); r.code != http.StatusNotFound {
		t.Fatalf("GET after DELETE: %d %s", r.code, r.body)
	}
	var n int
	if err := w.db.Pool.QueryRow(ctx, `SELECT count(*) FROM status_events WHERE webhook_due_at IS NOT NULL`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("owed after DELETE: %d, %v", n, err)
	}
}
