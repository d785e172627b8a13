package inbox_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// snapshot is what a refused request must leave as it was: the user's
// notifications' states, the actions taken and the counters.
func (w *world) snapshot(t *testing.T) string {
	t.Helper()
	var s string
	err := w.db.Pool.QueryRow(context.Background(), `SELECT
		(SELECT coalesce(string_agg(notification_id::text || coalesce(read_at::text, '-') || coalesce(archived_at::text, '-'), ',' ORDER BY notification_id), '') FROM notifications)
		|| '|' || (SELECT count(*) FROM notification_actions)::text
		|| '|' || (SELECT coalesce(string_agg(tenant_id || user_id || project_id || unread::text, ',' ORDER BY tenant_id, user_id, project_id), '') FROM notification_counters)`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestHostileActionBodiesAre400NamingTheField: what PostgreSQL's jsonb
// refuses (NUL, invalid UTF-8, lone surrogates) and what the event
// payload's limits refuse (depth) is a 400 naming data, never a 500 "safe
// to retry"; every malformed body names its field; nothing changes.
func TestHostileActionBodiesAre400NamingTheField(t *testing.T) {
	w := newWorld(t)
	ids := w.seed(t, note{tenant: "a", user: "m1", share: "s1"}, note{tenant: "a", user: "m2", share: "s1"})
	tok := w.token(t, "a", "m1", "")
	before := w.snapshot(t)
	deep := strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100)
	cases := []struct{ name, body, field string }{
		{"NUL escape in data", `{"type":"CONFIRMED","data":{"x":"a\u0000b"}}`, "data"},
		{"NUL escape in a data key", `{"type":"CONFIRMED","data":{"a\u0000":1}}`, "data"},
		// A raw control byte in a string is not JSON at all: the body is
		// at fault, as for POST /v1/events.
		{"raw NUL in data", "{\"type\":\"CONFIRMED\",\"data\":{\"x\":\"a\x00b\"}}", ""},
		{"invalid UTF-8 in data", "{\"type\":\"CONFIRMED\",\"data\":{\"x\":\"\xff\xfe\"}}", "data"},
		{"lone high surrogate in data", `{"type":"CONFIRMED","data":{"x":"\ud800"}}`, "data"},
		{"lone low surrogate in data", `{"type":"CONFIRMED","data":{"x":"\udc00x"}}`, "data"},
		{"data nested 100 deep", `{"type":"CONFIRMED","data":` + deep + `}`, "data"},
		{"data an array", `{"type":"CONFIRMED","data":[1]}`, "data"},
		{"data a string", `{"type":"CONFIRMED","data":"x"}`, "data"},
		{"type a number", `{"type":1}`, "type"},
		{"type unknown", `{"type":"WIN"}`, "type"},
		{"type missing", `{"data":{}}`, "type"},
		{"type with NUL", `{"type":"CONF\u0000IRMED"}`, "type"},
		{"unknown field", `{"type":"CONFIRMED","extra":1}`, "extra"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := w.do(t, "POST", "/v1/inbox/"+ids[0]+"/actions", tok, c.body)
			if r.code != http.StatusBadRequest {
				t.Fatalf("%d %s", r.code, r.body)
			}
			if f := r.field(t); f != c.field {
				t.Fatalf("field %q, want %q: %s", f, c.field, r.body)
			}
		})
	}
	if after := w.snapshot(t); after != before {
		t.Fatalf("a refused action changed the database:\n%s\n%s", before, after)
	}
	// The limit is the event payload's: data MaxPayloadDepth deep is taken.
	ok := `{"type":"CONFIRMED","data":` + strings.Repeat(`{"a":`, 32) + "1" + strings.Repeat("}", 32) + `}`
	if r := w.do(t, "POST", "/v1/inbox/"+ids[0]+"/actions", tok, ok); r.code != http.StatusOK {
		t.Fatalf("data 32 deep: %d %s", r.code, r.body)
	}
}

// TestMalformedQueriesAre400NamingTheParameter: a malformed percent-escape
// is refused naming the parameter (it used to be dropped and the request
// answered as if the parameter were absent), an endpoint that takes no
// parameters refuses unknown ones as the list does, and nothing changes.
func TestMalformedQueriesAre400NamingTheParameter(t *testing.T) {
	w := newWorld(t)
	ids := w.seed(t, note{tenant: "a", user: "u1"}, note{tenant: "a", user: "u1"})
	tok := w.token(t, "a", "u1", "")
	_, admin, err := store.CreateAdmin(context.Background(), w.db.Pool, "ops")
	if err != nil {
		t.Fatal(err)
	}
	before := w.snapshot(t)
	cases := []struct{ method, path, cred, field string }{
		{"GET", "/v1/inbox?severity=%zz", tok, "severity"},
		{"GET", "/v1/inbox?q=%", tok, "q"},
		{"GET", "/v1/inbox?q=a%2", tok, "q"},
		{"GET", "/v1/inbox?%zz=1", tok, "query"},
		{"GET", "/v1/inbox?status=read;limit=1", tok, "status"},
		{"GET", "/v1/inbox/bell?limit=%zz", tok, "limit"},
		{"GET", "/v1/inbox/bell?nope=1", tok, "nope"},
		{"GET", "/v1/inbox/unread-count?x=%zz", tok, "x"},
		{"POST", "/v1/inbox/read-all?status=unread", tok, "status"},
		{"POST", "/v1/inbox/read-all?project=%zz", tok, "project"},
		{"POST", "/v1/inbox/" + ids[0] + "/read?x=1", tok, "x"},
		{"POST", "/v1/inbox/" + ids[0] + "/archive?%", tok, "query"},
		{"GET", "/v1/actions?after=%zz", w.apikey["a"], "after"},
		{"GET", "/v1/actions?after=1&limit=%", w.apikey["a"], "limit"},
		{"GET", "/v1/admin/notifications?severity=%zz", admin, "severity"},
		{"GET", "/v1/admin/notifications?tenant=a%", admin, "tenant"},
		{"GET", "/v1/admin/stats?from=%zz", admin, "from"},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			r := w.do(t, c.method, c.path, c.cred, "")
			if r.code != http.StatusBadRequest {
				t.Fatalf("%d %s", r.code, r.body)
			}
			if f := r.field(t); f != c.field {
				t.Fatalf("field %q, want %q: %s", f, c.field, r.body)
			}
		})
	}
	if after := w.snapshot(t); after != before {
		t.Fatalf("a refused request changed the database:\n%s\n%s", before, after)
	}
	// Well-formed escapes still work.
	if p := w.page(t, tok, "severity=%69nfo&q=%74itle"); len(p.Items) != 2 {
		t.Fatalf("escaped list: %+v", p.Items)
	}
}

// TestWrongMethodsAre405WithAllow: a path served for other methods answers
// 405 naming them in Allow (a problem document), not 404, and PUT
// /v1/inbox is not redirected.
func TestWrongMethodsAre405WithAllow(t *testing.T) {
	w := newWorld(t)
	ids := w.seed(t, note{tenant: "a", user: "u1"})
	tok := w.token(t, "a", "u1", "")
	before := w.snapshot(t)
	cases := []struct{ method, path, cred, allow string }{
		{"PUT", "/v1/inbox", tok, "GET, HEAD"},
		{"POST", "/v1/inbox", tok, "GET, HEAD"},
		{"DELETE", "/v1/inbox/" + ids[0], tok, "GET, HEAD"},
		{"POST", "/v1/inbox/unread-count", tok, "GET, HEAD"},
		{"PUT", "/v1/inbox/bell", tok, "GET, HEAD"},
		{"GET", "/v1/inbox/" + ids[0] + "/read", tok, "POST"},
		{"DELETE", "/v1/inbox/" + ids[0] + "/actions", tok, "POST"},
		{"POST", "/v1/actions", w.apikey["a"], "GET, HEAD"},
		{"DELETE", "/v1/events", w.apikey["a"], "POST"},
		{"GET", "/v1/live/tickets", tok, "POST"},
		{"POST", "/v1/live", tok, "GET, HEAD"},
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, w.url+c.path, nil)
			req.Header.Set("Authorization", "Bearer "+c.cred)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != c.allow ||
				resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("%d Allow %q %s", resp.StatusCode, resp.Header.Get("Allow"), resp.Header.Get("Content-Type"))
			}
		})
	}
	if r := w.do(t, "GET", "/v1/inbox/nothing/here/at/all", tok, ""); r.code != http.StatusNotFound {
		t.Fatalf("unknown path: %d", r.code)
	}
	if after := w.snapshot(t); after != before {
		t.Fatalf("a refused request changed the database:\n%s\n%s", before, after)
	}
}

// TestTokenRefusalsReadAlike: every refused token gets one 401 whose text
// says nothing of which tenant, key, algorithm, issuer or project exists;
// NUL in kid (no credential needed) or sub is a 401, not a 500; and a token
// naming a project the tenant does not have is refused.
func TestTokenRefusalsReadAlike(t *testing.T) {
	w := newWorld(t)
	w.seed(t, note{tenant: "a", user: "u1"})
	k := w.keys["a"]
	now := time.Now()
	claims := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"tenant": "a", "sub": "u1", "iss": k.Issuer, "aud": w.aud, "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}
		if edit != nil {
			edit(c)
		}
		return c
	}
	sign := func(kid string, c jwt.MapClaims, key []byte) string {
		tk := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
		tk.Header["kid"] = kid
		s, err := tk.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	other := []byte(strings.Repeat("x", 32))
	otherAud, err := store.DeploymentAudience(context.Background(), testenv.Postgres(t).Pool)
	if err != nil || otherAud == w.aud || !strings.HasPrefix(otherAud, "herald:") {
		t.Fatalf("another deployment's audience %q (ours %q): %v", otherAud, w.aud, err)
	}
	if r := w.do(t, "GET", "/v1/inbox/unread-count", sign("k1", claims(nil), k.Key), ""); r.code != http.StatusOK {
		t.Fatalf("the good token: %d %s", r.code, r.body)
	}
	before := w.snapshot(t)
	refused := map[string]string{
		"unknown tenant":     sign("k1", claims(func(c jwt.MapClaims) { c["tenant"] = "zz" }), k.Key),
		"other tenant's kid": sign("k1", claims(func(c jwt.MapClaims) { c["tenant"] = "b" }), k.Key),
		"unknown kid":        sign("k9", claims(nil), k.Key),
		"wrong secret":       sign("k1", claims(nil), other),
		"wrong issuer":       sign("k1", claims(func(c jwt.MapClaims) { c["iss"] = "https://b.example" }), k.Key),
		"wrong algorithm": func() string {
			tk := jwt.NewWithClaims(jwt.SigningMethodHS384, claims(nil))
			tk.Header["kid"] = "k1"
			s, _ := tk.SignedString(k.Key)
			return s
		}(),
		"unknown project":       sign("k1", claims(func(c jwt.MapClaims) { c["project"] = "nope" }), k.Key),
		"expired":               sign("k1", claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Minute).Unix() }), k.Key),
		"NUL in kid, no secret": sign("k\x001", claims(nil), other),
		"NUL in kid":            sign("k1\x00", claims(nil), k.Key),
		"NUL in sub":            sign("k1", claims(func(c jwt.MapClaims) { c["sub"] = "u\x001" }), k.Key),
		"control char in sub":   sign("k1", claims(func(c jwt.MapClaims) { c["sub"] = "u\n1" }), k.Key),
		"NUL in user_type":      sign("k1", claims(func(c jwt.MapClaims) { c["user_type"] = "S\x00" }), k.Key),
		"NUL in tenant":         sign("k1", claims(func(c jwt.MapClaims) { c["tenant"] = "a\x00" }), k.Key),
		"garbage":               "not.a.token",
		// Another deployment's own audience (its database's id), and the
		// audience every deployment once shared: the same key and issuer
		// sign them, and they are refused like the rest.
		"another deployment's audience": sign("k1", claims(func(c jwt.MapClaims) { c["aud"] = otherAud }), k.Key),
		"the old shared audience":       sign("k1", claims(func(c jwt.MapClaims) { c["aud"] = "herald" }), k.Key),
		"two audiences, neither ours":   sign("k1", claims(func(c jwt.MapClaims) { c["aud"] = []string{otherAud, w.aud + "x"} }), k.Key),
	}
	var first string
	for name, tok := range refused {
		for _, path := range []string{"/v1/inbox/unread-count", "/v1/inbox/read-all"} {
			method := map[bool]string{true: "GET", false: "POST"}[strings.HasSuffix(path, "count")]
			r := w.do(t, method, path, tok, "")
			if r.code != http.StatusUnauthorized {
				t.Errorf("%s %s: %d %s", name, path, r.code, r.body)
				continue
			}
			var p struct{ Detail string }
			_ = json.Unmarshal(r.body, &p)
			if first == "" {
				first = p.Detail
			}
			if p.Detail != first {
				t.Errorf("%s: detail %q differs from %q", name, p.Detail, first)
			}
		}
	}
	if after := w.snapshot(t); after != before {
		t.Fatalf("a refused request changed the database:\n%s\n%s", before, after)
	}
}
