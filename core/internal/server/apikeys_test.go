package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
)

type keyList struct {
	Keys []store.APIKey `json:"keys"`
}

type newKey struct {
	store.APIKey
	Key string `json:"key"`
}

func TestAPIKeysListCreateRotateRevoke(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	works := func(key string) bool {
		return w.do(t, "GET", "/v1/events/none", key, "").code == 404
	}
	// List: the tenant's own keys, without secrets.
	r := w.do(t, "GET", "/v1/apikeys", w.keys["a"], "")
	var l keyList
	if err := json.Unmarshal(r.body, &l); err != nil || r.code != 200 || len(l.Keys) != 1 || l.Keys[0].TenantID != "a" {
		t.Fatalf("list: %d %s", r.code, r.body)
	}
	if strings.Contains(string(r.body), w.keys["a"]) || strings.Contains(string(r.body), `"key"`) {
		t.Fatalf("the list shows a key: %s", r.body)
	}
	// Create, with an expiry.
	r = w.do(t, "POST", "/v1/apikeys", w.keys["a"], `{"name":"ci","expires_at":"`+time.Now().Add(time.Hour).Format(time.RFC3339)+`"}`)
	var nk newKey
	if err := json.Unmarshal(r.body, &nk); err != nil || r.code != 201 || !strings.HasPrefix(nk.Key, "hk_") || nk.ExpiresAt == nil {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	if !works(nk.Key) {
		t.Fatal("the new key does not authenticate")
	}
	// Expired: refused like a revoked key.
	if _, err := w.db.Pool.Exec(ctx, `UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE key_id = $1`, nk.KeyID); err != nil {
		t.Fatal(err)
	}
	if r := w.do(t, "GET", "/v1/events/none", nk.Key, ""); r.code != 401 {
		t.Fatalf("expired key: %d", r.code)
	}
	// Rotate with a grace period: both work, the old one has an expiry.
	r = w.do(t, "POST", "/v1/apikeys/"+store.APIKeyID(w.keys["a"])+"/rotate", w.keys["a"], `{"grace":"1h"}`)
	var rot newKey
	if err := json.Unmarshal(r.body, &rot); err != nil || r.code != 201 || rot.Key == w.keys["a"] {
		t.Fatalf("rotate: %d %s", r.code, r.body)
	}
	if !works(rot.Key) || !works(w.keys["a"]) {
		t.Fatal("during the grace period both keys must work")
	}
	// Rotate again with no grace: the old one stops at once.
	r = w.do(t, "POST", "/v1/apikeys/"+rot.KeyID+"/rotate", rot.Key, "")
	var rot2 newKey
	if err := json.Unmarshal(r.body, &rot2); err != nil || r.code != 201 {
		t.Fatalf("rotate without grace: %d %s", r.code, r.body)
	}
	if works(rot.Key) || !works(rot2.Key) {
		t.Fatal("rotation without grace: the old key still works or the new one does not")
	}
	// Revoke.
	if r := w.do(t, "POST", "/v1/apikeys/"+store.APIKeyID(w.keys["a"])+"/revoke", rot2.Key, ""); r.code != 200 {
		t.Fatalf("revoke: %d %s", r.code, r.body)
	}
	if works(w.keys["a"]) {
		t.Fatal("a revoked key still works")
	}
	// Another tenant's key ids are 404, and that key is untouched.
	for _, path := range []string{"/revoke", "/rotate"} {
		if r := w.do(t, "POST", "/v1/apikeys/"+rot2.KeyID+path, w.keys["b"], ""); r.code != 404 {
			t.Fatalf("b %s of a's key: %d %s", path, r.code, r.body)
		}
	}
	if !works(rot2.Key) {
		t.Fatal("b's request changed a's key")
	}
	r = w.do(t, "GET", "/v1/apikeys", w.keys["b"], "")
	if err := json.Unmarshal(r.body, &l); err != nil || len(l.Keys) != 1 || l.Keys[0].TenantID != "b" {
		t.Fatalf("b's list: %s", r.body)
	}
	// Bad input names the field and changes nothing.
	for body, field := range map[string]string{
		`{"grace":"forever"}`: "grace",
		`{"grace":"-1h"}`:     "grace",
		`{"graze":"1h"}`:      "graze",
	} {
		r := w.do(t, "POST", "/v1/apikeys/"+rot2.KeyID+"/rotate", rot2.Key, body)
		if r.code != 400 || r.problem(t).Field != field {
			t.Errorf("rotate %s: %d %s", body, r.code, r.body)
		}
	}
	for body, field := range map[string]string{
		`{"expires_at":"2001-01-01T00:00:00Z"}`: "expires_at",
		`{"project_id":"no such"}`:              "project_id",
		`{"name":7}`:                            "name",
	} {
		r := w.do(t, "POST", "/v1/apikeys", rot2.Key, body)
		if r.code != 400 || r.problem(t).Field != field {
			t.Errorf("create %s: %d %s", body, r.code, r.body)
		}
	}
	if !works(rot2.Key) {
		t.Fatal("bad requests changed the key")
	}
}

func TestProjectKeysCannotManageKeys(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	if err := store.EnsureProject(ctx, w.db.Pool, "a", "shop", ""); err != nil {
		t.Fatal(err)
	}
	k, err := store.CreateProjectAPIKey(ctx, w.db.Pool, "a", "shop", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path string }{{"GET", "/v1/apikeys"}, {"POST", "/v1/apikeys"},
		{"POST", "/v1/apikeys/" + store.APIKeyID(w.keys["a"]) + "/revoke"}} {
		if r := w.do(t, c.method, c.path, k, "{}"); r.code != 403 {
			t.Errorf("%s %s with a project key: %d", c.method, c.path, r.code)
		}
	}
}

func TestKeyStrength(t *testing.T) {
	t.Parallel()
	for key, strong := range map[string]bool{
		"hk_demo_quickstart_key_0001":                             false,
		"hk_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa":       false,
		"hk_correcthorsebatterystaple":                            false,
		"hk_3f9a0c1d7e5b2a8c4f6e0d9b1a7c3e5f2b8d4a6c0e9f1b3d":     true,
		"hk_Qm9vZ2xlLWlzLW5vdC1hLXJhbmRvbS1rZXktYnV0LWl0LWxvb2tz": true,
	} {
		if got := store.KeyStrength(key) >= store.MinKeyBits; got != strong {
			t.Errorf("%s: %.0f bits, strong %v, want %v", key, store.KeyStrength(key), got, strong)
		}
	}
}
