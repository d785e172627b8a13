package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/api/openapitest"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/httpguard"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/store"
)

// Valid web push keys: an uncompressed P-256 point and 16 bytes.
const (
	testP256dh = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
	testAuth   = "BTBZMqHH6r4Tts7J_aSIgg"
)

// dreq is one request to the directory API with optional headers.
func (w *world) dreq(t *testing.T, method, path, key, body string, hdr ...string) (reply, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, w.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, b}, resp.Header
}

func decodeAs[T any](t *testing.T, r reply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("answer %d %s: %v", r.code, r.body, err)
	}
	return v
}

// directorySnapshot is everything tenant owns in the directory tables.
func (w *world) directorySnapshot(t *testing.T, tenant string) string {
	t.Helper()
	var s string
	err := w.db.Pool.QueryRow(context.Background(), `SELECT
		(SELECT coalesce(string_agg(r::text, ',' ORDER BY user_id), '') FROM recipients r WHERE tenant_id = $1) || '|' ||
		(SELECT coalesce(string_agg(d::text, ',' ORDER BY user_id, token), '') FROM recipient_devices d WHERE tenant_id = $1) || '|' ||
		(SELECT coalesce(string_agg(p::text, ',' ORDER BY user_id, event_type, channel), '') FROM user_preferences p WHERE tenant_id = $1) || '|' ||
		(SELECT coalesce(string_agg(g::text, ',' ORDER BY group_key), '') FROM groups g WHERE tenant_id = $1) || '|' ||
		(SELECT coalesce(string_agg(m::text, ',' ORDER BY group_key, user_id), '') FROM group_members m WHERE tenant_id = $1) || '|' ||
		(SELECT coalesce(string_agg(s::text, ',' ORDER BY group_key, event_type, channel), '') FROM group_settings s WHERE tenant_id = $1)`,
		tenant).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// storedRecipient is a recipient as the API answers it (not embedding
// directory.Recipient, whose UnmarshalJSON would hide version).
type storedRecipient struct {
	UserID     string             `json:"user_id"`
	UserType   string             `json:"user_type"`
	Email      string             `json:"email"`
	Phone      string             `json:"phone"`
	Locale     string             `json:"locale"`
	TimeZone   string             `json:"time_zone"`
	Active     bool               `json:"active"`
	Attributes map[string]string  `json:"attributes"`
	Devices    []directory.Device `json:"devices"`
	Version    int64              `json:"version"`
}

// TestRecipientsAPI: PUT creates (201) then replaces (200), is idempotent
// (the same body keeps the version), GET answers the entry with its
// devices and the ETag, PATCH merges, If-Match guards every write, the
// list pages with a signed cursor and filters, and another tenant sees
// none of it (404, never 403).
func TestRecipientsAPI(t *testing.T) {
	w := newWorld(t)
	a, b := w.keys["a"], w.keys["b"]
	body := `{"user_type":"STAFF","email":"maria@example.com","time_zone":"Europe/Rome","devices":[{"kind":"fcm","token":"tok-1"}]}`
	r, h := w.dreq(t, "PUT", "/v1/recipients/maria", a, body)
	if r.code != 201 || h.Get("ETag") != `"1"` || h.Get("Location") != "/v1/recipients/maria" {
		t.Fatalf("create: %d %s %v", r.code, r.body, h)
	}
	got := decodeAs[storedRecipient](t, r)
	if got.UserID != "maria" || !got.Active || len(got.Devices) != 1 || got.Devices[0].Token != "tok-1" {
		t.Fatalf("created %+v", got)
	}
	// The same body again: 200, same version.
	if r, h := w.dreq(t, "PUT", "/v1/recipients/maria", a, body); r.code != 200 || h.Get("ETag") != `"1"` {
		t.Fatalf("idempotent PUT: %d %s %v", r.code, r.body, h.Get("ETag"))
	}
	// A change with the right If-Match: version 2.
	r, h = w.dreq(t, "PUT", "/v1/recipients/maria", a, `{"user_id":"maria","user_type":"STAFF","phone":"+390600000001"}`, "If-Match", `"1"`)
	if r.code != 200 || h.Get("ETag") != `"2"` {
		t.Fatalf("replace: %d %s", r.code, r.body)
	}
	if got := decodeAs[storedRecipient](t, r); got.Email != "" || got.Phone != "+390600000001" || len(got.Devices) != 1 {
		t.Fatalf("replace replaces the fields and keeps devices: %+v", got)
	}
	// A stale If-Match: 412, nothing written.
	before := w.directorySnapshot(t, "a")
	r, h = w.dreq(t, "PUT", "/v1/recipients/maria", a, `{"user_type":"CUSTOMER"}`, "If-Match", `"1"`)
	if r.code != 412 || h.Get("ETag") != `"2"` || r.problem(t).Field != "If-Match" {
		t.Fatalf("stale If-Match: %d %s", r.code, r.body)
	}
	if r, _ := w.dreq(t, "PUT", "/v1/recipients/nobody", a, `{"user_type":"X"}`, "If-Match", `"1"`); r.code != 412 {
		t.Fatalf("If-Match on a missing recipient: %d %s", r.code, r.body)
	}
	if w.directorySnapshot(t, "a") != before {
		t.Fatal("a refused write changed the directory")
	}
	// PATCH: merge patch; null removes; the result is checked.
	r, h = w.dreq(t, "PATCH", "/v1/recipients/maria", a, `{"locale":"it","phone":null,"attributes":{"slack_user_id":"U1"}}`,
		"Content-Type", "application/merge-patch+json", "If-Match", `"2"`)
	if got := decodeAs[storedRecipient](t, r); r.code != 200 || h.Get("ETag") != `"3"` || got.Locale != "it" || got.Phone != "" ||
		got.Attributes["slack_user_id"] != "U1" || got.UserType != "STAFF" || got.TimeZone != "" {
		t.Fatalf("patch: %d %s", r.code, r.body)
	}
	for patch, field := range map[string]string{
		`{"time_zone":"Europe/Roma"}`:                            "time_zone",
		`{"user_type":null}`:                                     "user_type",
		`{"user_id":"other"}`:                                    "user_id",
		`{"colour":"red"}`:                                       "colour",
		`{"quiet_hours":{"start":"22:00","end":"22:00"}}`:        "quiet_hours.end",
		`{"devices":[{"kind":"webpush","endpoint":"http://x"}]}`: "devices[0].endpoint",
		`[1]`: "",
	} {
		r, _ := w.dreq(t, "PATCH", "/v1/recipients/maria", a, patch)
		if r.code != 400 || r.problem(t).Field != field {
			t.Errorf("patch %s: %d %s, want 400 naming %q", patch, r.code, r.body, field)
		}
	}
	if r, _ := w.dreq(t, "PATCH", "/v1/recipients/nobody", a, `{}`); r.code != 404 {
		t.Fatalf("patch of nobody: %d %s", r.code, r.body)
	}
	// GET.
	r, h = w.dreq(t, "GET", "/v1/recipients/maria", a, "")
	if got := decodeAs[storedRecipient](t, r); r.code != 200 || h.Get("ETag") != `"3"` || got.Version != 3 || got.Locale != "it" {
		t.Fatalf("get: %d %s", r.code, r.body)
	}
	// Tenant b: the same id is not there (404, as for an unknown id), and
	// b's PUT makes b's own recipient.
	for _, id := range []string{"maria", "nobody"} {
		if r, _ := w.dreq(t, "GET", "/v1/recipients/"+id, b, ""); r.code != 404 || r.problem(t).Field != "user_id" {
			t.Fatalf("b GET %s: %d %s", id, r.code, r.body)
		}
	}
	aBefore := w.directorySnapshot(t, "a")
	for _, c := range []struct{ method, path, body string }{
		{"PATCH", "/v1/recipients/maria", `{"locale":"fr"}`},
		{"GET", "/v1/recipients/maria/devices", ""},
		{"POST", "/v1/recipients/maria/devices", `{"kind":"fcm","token":"b-token"}`},
		{"GET", "/v1/recipients/maria/preferences", ""},
		{"PUT", "/v1/recipients/maria/preferences", `{}`},
		{"DELETE", "/v1/recipients/maria/devices/" + fmt.Sprintf("%032x", 1), ""},
	} {
		if r, _ := w.dreq(t, c.method, c.path, b, c.body); r.code != 404 {
			t.Errorf("b %s %s: %d %s, want 404", c.method, c.path, r.code, r.body)
		}
	}
	if r, _ := w.dreq(t, "PUT", "/v1/recipients/maria", b, `{"user_type":"CUSTOMER"}`); r.code != 201 {
		t.Fatalf("b's own maria: %d %s", r.code, r.body)
	}
	if w.directorySnapshot(t, "a") != aBefore {
		t.Fatal("tenant b's requests changed tenant a's directory")
	}
	// The list: pages of 2 over 5 recipients, filters, signed cursors.
	for i := 1; i <= 4; i++ {
		typ := "CUSTOMER"
		if i%2 == 0 {
			typ = "STAFF"
		}
		if r, _ := w.dreq(t, "PUT", fmt.Sprintf("/v1/recipients/u%d", i), a, fmt.Sprintf(`{"user_type":%q,"active":%v}`, typ, i != 4)); r.code != 201 {
			t.Fatalf("seed u%d: %d %s", i, r.code, r.body)
		}
	}
	type page struct {
		Recipients []storedRecipient `json:"recipients"`
		NextCursor string            `json:"next_cursor"`
	}
	var ids []string
	path := "/v1/recipients?limit=2"
	for range 5 {
		r, _ := w.dreq(t, "GET", path, a, "")
		p := decodeAs[page](t, r)
		for _, rec := range p.Recipients {
			ids = append(ids, rec.UserID)
		}
		if p.NextCursor == "" {
			break
		}
		path = "/v1/recipients?limit=2&cursor=" + p.NextCursor
	}
	if strings.Join(ids, ",") != "maria,u1,u2,u3,u4" {
		t.Fatalf("paged list: %v", ids)
	}
	for query, want := range map[string]string{
		"user_type=STAFF":                    "maria,u2,u4",
		"user_type=STAFF&active=true":        "maria,u2",
		"active=false":                       "u4",
		"updated_since=2000-01-01T00:00:00Z": "maria,u1,u2,u3,u4",
		"updated_since=2999-01-01T00:00:00Z": "",
	} {
		r, _ := w.dreq(t, "GET", "/v1/recipients?"+query, a, "")
		var got []string
		for _, rec := range decodeAs[page](t, r).Recipients {
			got = append(got, rec.UserID)
		}
		if strings.Join(got, ",") != want {
			t.Errorf("list %s: %v, want %s", query, got, want)
		}
	}
	// A cursor is bound to its filters and signed.
	r, _ = w.dreq(t, "GET", "/v1/recipients?limit=1&user_type=STAFF", a, "")
	cur := decodeAs[page](t, r).NextCursor
	for query, field := range map[string]string{
		"limit=1&cursor=" + cur:               "cursor",
		"user_type=STAFF&cursor=" + cur + "x": "cursor",
		"active=yes":                          "active",
		"limit=0":                             "limit",
		"limit=501":                           "limit",
		"updated_since=yesterday":             "updated_since",
		"colour=red":                          "colour",
		"user_type=%zz":                       "user_type",
		"group=a%00b":                         "group",
	} {
		if r, _ := w.dreq(t, "GET", "/v1/recipients?"+query, a, ""); r.code != 400 || r.problem(t).Field != field {
			t.Errorf("list ?%s: %d %s, want 400 naming %s", query, r.code, r.body, field)
		}
	}
	// b lists only b's.
	r, _ = w.dreq(t, "GET", "/v1/recipients", b, "")
	if p := decodeAs[page](t, r); len(p.Recipients) != 1 || p.Recipients[0].UserType != "CUSTOMER" {
		t.Fatalf("b's list: %s", r.body)
	}
}

// TestRecipientsAPIRefusesBadInput: every kind of bad body, path and
// header is a 400 (or 413) problem document naming the field, and none
// writes anything.
func TestRecipientsAPIRefusesBadInput(t *testing.T) {
	w := newWorld(t)
	a := w.keys["a"]
	if r, _ := w.dreq(t, "PUT", "/v1/recipients/u1", a, `{"user_type":"STAFF"}`); r.code != 201 {
		t.Fatalf("seed: %d %s", r.code, r.body)
	}
	before := w.directorySnapshot(t, "a")
	deep := strings.Repeat(`{"a":`, 50) + "1" + strings.Repeat("}", 50)
	cases := map[string]struct {
		method, path, body string
		hdr                []string
		code               int
		field              string
	}{
		"unknown field":           {"PUT", "/v1/recipients/u2", `{"user_type":"S","colour":"red"}`, nil, 400, "colour"},
		"wrong type":              {"PUT", "/v1/recipients/u2", `{"user_type":7}`, nil, 400, "user_type"},
		"active as string":        {"PUT", "/v1/recipients/u2", `{"user_type":"S","active":"yes"}`, nil, 400, "active"},
		"missing user_type":       {"PUT", "/v1/recipients/u2", `{}`, nil, 400, "user_type"},
		"unknown zone":            {"PUT", "/v1/recipients/u2", `{"user_type":"S","time_zone":"Mars/Olympus"}`, nil, 400, "time_zone"},
		"bad quiet hours":         {"PUT", "/v1/recipients/u2", `{"user_type":"S","quiet_hours":{"start":"25:00","end":"07:00"}}`, nil, 400, "quiet_hours.start"},
		"empty quiet window":      {"PUT", "/v1/recipients/u2", `{"user_type":"S","quiet_hours":{"start":"07:00","end":"07:00"}}`, nil, 400, "quiet_hours.end"},
		"bad email":               {"PUT", "/v1/recipients/u2", `{"user_type":"S","email":"not an address"}`, nil, 400, "email"},
		"bad phone":               {"PUT", "/v1/recipients/u2", `{"user_type":"S","phone":"0039 06"}`, nil, 400, "phone"},
		"NUL in a value":          {"PUT", "/v1/recipients/u2", `{"user_type":"S\u0000"}`, nil, 400, "user_type"},
		"invalid UTF-8":           {"PUT", "/v1/recipients/u2", "{\"user_type\":\"S\xff\"}", nil, 400, ""},
		"deep nesting":            {"PUT", "/v1/recipients/u2", `{"user_type":"S","attributes":` + deep + `}`, nil, 400, ""},
		"two values":              {"PUT", "/v1/recipients/u2", `{"user_type":"S"} {}`, nil, 400, ""},
		"duplicate key":           {"PUT", "/v1/recipients/u2", `{"user_type":"S","user_type":"T"}`, nil, 400, ""},
		"body id differs":         {"PUT", "/v1/recipients/u2", `{"user_id":"u3","user_type":"S"}`, nil, 400, "user_id"},
		"id over the limit":       {"PUT", "/v1/recipients/" + strings.Repeat("x", 201), `{"user_type":"S"}`, nil, 400, "user_id"},
		"NUL in the path":         {"PUT", "/v1/recipients/u%00", `{"user_type":"S"}`, nil, 400, "user_id"},
		"invalid UTF-8 path":      {"GET", "/v1/recipients/u%ff", "", nil, 400, "user_id"},
		"space-padded id":         {"PUT", "/v1/recipients/%20u2", `{"user_type":"S"}`, nil, 400, "user_id"},
		"bad If-Match":            {"PUT", "/v1/recipients/u1", `{"user_type":"S"}`, []string{"If-Match", "1"}, 400, "If-Match"},
		"If-Match not UTF-8":      {"PUT", "/v1/recipients/u1", `{"user_type":"S"}`, []string{"If-Match", "\"1\xff\""}, 400, "If-Match"},
		"If-Match a list":         {"PATCH", "/v1/recipients/u1", `{}`, []string{"If-Match", `"1", "2"`}, 400, "If-Match"},
		"huge body":               {"PUT", "/v1/recipients/u2", `{"user_type":"` + strings.Repeat("x", 1<<20) + `"}`, nil, 413, ""},
		"bad device kind":         {"POST", "/v1/recipients/u1/devices", `{"kind":"pager","token":"x"}`, nil, 400, "kind"},
		"apns not hex":            {"POST", "/v1/recipients/u1/devices", `{"kind":"apns","token":"zz"}`, nil, 400, "token"},
		"webpush http":            {"POST", "/v1/recipients/u1/devices", `{"kind":"webpush","endpoint":"http://push.example/1","p256dh":"` + testP256dh + `","auth":"` + testAuth + `"}`, nil, 400, "endpoint"},
		"webpush bad point":       {"POST", "/v1/recipients/u1/devices", `{"kind":"webpush","endpoint":"https://push.example/1","p256dh":"BAAA","auth":"` + testAuth + `"}`, nil, 400, "p256dh"},
		"webpush short auth":      {"POST", "/v1/recipients/u1/devices", `{"kind":"webpush","endpoint":"https://push.example/1","p256dh":"` + testP256dh + `","auth":"AAAA"}`, nil, 400, "auth"},
		"fcm with keys":           {"POST", "/v1/recipients/u1/devices", `{"kind":"fcm","token":"t","auth":"` + testAuth + `"}`, nil, 400, "auth"},
		"device missing kind":     {"POST", "/v1/recipients/u1/devices", `{"token":"t"}`, nil, 400, "kind"},
		"device of nobody":        {"POST", "/v1/recipients/nobody/devices", `{"kind":"fcm","token":"t"}`, nil, 404, "user_id"},
		"bad device id":           {"DELETE", "/v1/recipients/u1/devices/xyz", "", nil, 404, "device_id"},
		"prefs unknown zone":      {"PUT", "/v1/recipients/u1/preferences", `{"time_zone":"Europe/Roma"}`, nil, 400, "time_zone"},
		"prefs bad window":        {"PUT", "/v1/recipients/u1/preferences", `{"quiet_hours":{"start":"22:00"}}`, nil, 400, "quiet_hours.end"},
		"prefs duplicate switch":  {"PUT", "/v1/recipients/u1/preferences", `{"channels":[{"channel":"SMS","enabled":true},{"channel":"SMS","enabled":false}]}`, nil, 400, "channels[1]"},
		"prefs switch no enabled": {"PUT", "/v1/recipients/u1/preferences", `{"channels":[{"channel":"SMS"}]}`, nil, 400, "channels[0].enabled"},
		"prefs unknown field":     {"PUT", "/v1/recipients/u1/preferences", `{"channels":[],"sms":false}`, nil, 400, "sms"},
		"prefs of nobody":         {"PUT", "/v1/recipients/nobody/preferences", `{}`, nil, 404, "user_id"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r, _ := w.dreq(t, c.method, c.path, a, c.body, c.hdr...)
			if r.code != c.code {
				t.Fatalf("%s %s: %d %s, want %d", c.method, c.path, r.code, r.body, c.code)
			}
			if p := r.problem(t); p.Field != c.field {
				t.Fatalf("field %q (%s), want %q", p.Field, p.Detail, c.field)
			}
		})
	}
	// A body with several problems lists them all.
	r, _ := w.dreq(t, "PUT", "/v1/recipients/u2", a, `{"user_type":7,"email":"x","time_zone":"Nowhere/None"}`)
	var pl struct {
		Problems []struct{ Field, Message string } `json:"problems"`
	}
	if err := json.Unmarshal(r.body, &pl); err != nil || len(pl.Problems) != 3 {
		t.Fatalf("every problem listed: %s", r.body)
	}
	if after := w.directorySnapshot(t, "a"); after != before {
		t.Fatalf("bad input wrote something:\nbefore %s\nafter  %s", before, after)
	}
}

// TestDevicesAndPreferencesAPI: devices are added (201, then 200 for the
// same address, with the same id), listed and removed; preferences are
// read and replaced as one document under If-Match.
func TestDevicesAndPreferencesAPI(t *testing.T) {
	w := newWorld(t)
	a := w.keys["a"]
	if r, _ := w.dreq(t, "PUT", "/v1/recipients/u1", a, `{"user_type":"STAFF","locale":"en"}`); r.code != 201 {
		t.Fatalf("seed: %d %s", r.code, r.body)
	}
	sub := `{"kind":"webpush","endpoint":"https://push.example/s/1","p256dh":"` + testP256dh + `","auth":"` + testAuth + `"}`
	r, h := w.dreq(t, "POST", "/v1/recipients/u1/devices", a, sub)
	dev := decodeAs[store.StoredDevice](t, r)
	if r.code != 201 || len(dev.ID) != 32 || h.Get("Location") != "/v1/recipients/u1/devices/"+dev.ID {
		t.Fatalf("add: %d %s", r.code, r.body)
	}
	if r, _ := w.dreq(t, "POST", "/v1/recipients/u1/devices", a, sub); r.code != 200 || decodeAs[store.StoredDevice](t, r).ID != dev.ID {
		t.Fatalf("add again: %d %s", r.code, r.body)
	}
	if r, _ := w.dreq(t, "POST", "/v1/recipients/u1/devices", a, `{"kind":"apns","token":"`+strings.Repeat("ab", 32)+`"}`); r.code != 201 {
		t.Fatalf("add apns: %d %s", r.code, r.body)
	}
	r, _ = w.dreq(t, "GET", "/v1/recipients/u1/devices", a, "")
	if l := decodeAs[struct{ Devices []store.StoredDevice }](t, r); r.code != 200 || len(l.Devices) != 2 {
		t.Fatalf("list: %d %s", r.code, r.body)
	}
	if r, _ := w.dreq(t, "DELETE", "/v1/recipients/u1/devices/"+dev.ID, a, ""); r.code != 204 {
		t.Fatalf("remove: %d %s", r.code, r.body)
	}
	if r, _ := w.dreq(t, "DELETE", "/v1/recipients/u1/devices/"+dev.ID, a, ""); r.code != 404 {
		t.Fatalf("remove again: %d %s", r.code, r.body)
	}
	// Preferences.
	r, h = w.dreq(t, "GET", "/v1/recipients/u1/preferences", a, "")
	if r.code != 200 || h.Get("ETag") != `"1"` || decodeAs[directory.UserPreferences](t, r).Locale != "en" {
		t.Fatalf("get preferences: %d %s %v", r.code, r.body, h.Get("ETag"))
	}
	prefs := `{"locale":"it","time_zone":"Europe/Rome","quiet_hours":{"start":"22:00","end":"07:00"},
		"channels":[{"channel":"SMS","enabled":false},{"event_type":"RESERVATION_REQUESTED","channel":"SMS","enabled":true}]}`
	r, h = w.dreq(t, "PUT", "/v1/recipients/u1/preferences", a, prefs, "If-Match", `"1"`)
	if p := decodeAs[directory.UserPreferences](t, r); r.code != 200 || h.Get("ETag") != `"2"` || len(p.Channels) != 2 || p.QuietHours == nil {
		t.Fatalf("put preferences: %d %s", r.code, r.body)
	}
	if r, _ := w.dreq(t, "PUT", "/v1/recipients/u1/preferences", a, `{}`, "If-Match", `"1"`); r.code != 412 {
		t.Fatalf("stale preferences: %d %s", r.code, r.body)
	}
	// The recipient's ETag moved with its preferences.
	if _, h := w.dreq(t, "GET", "/v1/recipients/u1", a, ""); h.Get("ETag") != `"2"` {
		t.Fatalf("recipient ETag after preferences: %v", h.Get("ETag"))
	}
	// The relay's read sees it.
	d, err := store.LoadDirectory(context.Background(), w.db.Pool, "a", directory.Needs{UserIDs: []string{"u1"}})
	if err != nil || len(d.Preferences) != 2 || d.Recipients[0].TimeZone != "Europe/Rome" || len(d.Recipients[0].Devices) != 1 {
		t.Fatalf("LoadDirectory: %+v %v", d, err)
	}
}

// TestGroupsAPI: groups are created, replaced, read and deleted with
// their memberships and settings; members are put, listed by page and
// removed; references to missing groups or recipients are 404 naming
// them; another tenant reaches none of it.
func TestGroupsAPI(t *testing.T) {
	w := newWorld(t)
	a, b := w.keys["a"], w.keys["b"]
	for _, u := range []string{"u1", "u2", "u3"} {
		if r, _ := w.dreq(t, "PUT", "/v1/recipients/"+u, a, `{"user_type":"STAFF"}`); r.code != 201 {
			t.Fatalf("seed: %d %s", r.code, r.body)
		}
	}
	r, h := w.dreq(t, "PUT", "/v1/groups/restaurant:5", a, `{"type":"restaurant","max_recipients":10}`)
	if r.code != 201 || h.Get("ETag") != `"1"` {
		t.Fatalf("create group: %d %s", r.code, r.body)
	}
	if r, h := w.dreq(t, "PUT", "/v1/groups/restaurant:5", a, `{"key":"restaurant:5","type":"restaurant","max_recipients":10}`); r.code != 200 || h.Get("ETag") != `"1"` {
		t.Fatalf("idempotent group PUT: %d %s", r.code, r.body)
	}
	for u, role := range map[string]string{"u1": "MANAGER", "u2": "WAITER", "u3": "CHEF"} {
		if r, _ := w.dreq(t, "PUT", "/v1/groups/restaurant:5/members/"+u, a, `{"role":"`+role+`"}`); r.code != 201 {
			t.Fatalf("member %s: %d %s", u, r.code, r.body)
		}
	}
	if r, _ := w.dreq(t, "PUT", "/v1/groups/restaurant:5/members/u3", a, `{"role":"MANAGER"}`); r.code != 200 {
		t.Fatalf("role change: %d %s", r.code, r.body)
	}
	if r, _ := w.dreq(t, "PUT", "/v1/groups/restaurant:5/members/u3", a, ``); r.code != 200 {
		t.Fatalf("empty body: %d %s", r.code, r.body)
	}
	type mpage struct {
		Members    []store.StoredMember `json:"members"`
		NextCursor string               `json:"next_cursor"`
	}
	r, _ = w.dreq(t, "GET", "/v1/groups/restaurant:5/members?limit=2", a, "")
	p1 := decodeAs[mpage](t, r)
	r, _ = w.dreq(t, "GET", "/v1/groups/restaurant:5/members?limit=2&cursor="+p1.NextCursor, a, "")
	p2 := decodeAs[mpage](t, r)
	if len(p1.Members) != 2 || len(p2.Members) != 1 || p2.NextCursor != "" || p2.Members[0].UserID != "u3" || p2.Members[0].Role != "" {
		t.Fatalf("member pages: %+v %+v", p1, p2)
	}
	// A cursor of one group does not page another.
	if r, _ := w.dreq(t, "GET", "/v1/groups/other/members?cursor="+p1.NextCursor, a, ""); r.code != 400 {
		t.Fatalf("cursor of another group: %d %s", r.code, r.body)
	}
	// The list filter by group.
	r, _ = w.dreq(t, "GET", "/v1/recipients?group=restaurant:5&limit=10", a, "")
	if n := len(decodeAs[struct{ Recipients []storedRecipient }](t, r).Recipients); n != 3 {
		t.Fatalf("recipients of the group: %d", n)
	}
	// Settings.
	settings := `{"channels":[{"channel":"SMS","enabled":true,"roles":["MANAGER"]},{"event_type":"E","channel":"EMAIL","enabled":false}]}`
	r, h = w.dreq(t, "PUT", "/v1/groups/restaurant:5/settings", a, settings, "If-Match", `"1"`)
	if gs := decodeAs[directory.GroupSettings](t, r); r.code != 200 || h.Get("ETag") != `"2"` || len(gs.Channels) != 2 {
		t.Fatalf("settings: %d %s", r.code, r.body)
	}
	if r, h := w.dreq(t, "GET", "/v1/groups/restaurant:5/settings", a, ""); r.code != 200 || h.Get("ETag") != `"2"` {
		t.Fatalf("get settings: %d %s", r.code, r.body)
	}
	if r, _ := w.dreq(t, "PUT", "/v1/groups/restaurant:5/settings", a, `{"channels":[{"channel":"SMS","enabled":true,"roles":[""]}]}`); r.code != 400 || r.problem(t).Field != "channels[0].roles[0]" {
		t.Fatalf("bad roles: %d %s", r.code, r.body)
	}
	// Missing group or recipient.
	for path, field := range map[string]string{
		"/v1/groups/nope/members/u1":         "key",
		"/v1/groups/restaurant:5/members/no": "user_id",
	} {
		if r, _ := w.dreq(t, "PUT", path, a, `{"role":"X"}`); r.code != 404 || r.problem(t).Field != field {
			t.Fatalf("PUT %s: %d %s", path, r.code, r.body)
		}
	}
	for body, field := range map[string]string{
		`{"type":"restaurant","max_recipients":-1}`:   "max_recipients",
		`{"type":"restaurant","max_recipients":"10"}`: "max_recipients",
		`{"type":"restaurant","key":"restaurant:6"}`:  "key",
		`{"kind":"restaurant"}`:                       "kind",
	} {
		if r, _ := w.dreq(t, "PUT", "/v1/groups/restaurant:5", a, body); r.code != 400 || r.problem(t).Field != field {
			t.Errorf("PUT group %s: %d %s, want 400 naming %s", body, r.code, r.body, field)
		}
	}
	if r, _ := w.dreq(t, "PUT", "/v1/groups/restaurant:5/members/u1", a, `{"role":"MANAGER","level":3}`); r.code != 400 || r.problem(t).Field != "level" {
		t.Fatalf("member unknown field: %d %s", r.code, r.body)
	}
	// Tenant b reaches none of a's group.
	aBefore := w.directorySnapshot(t, "a")
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/groups/restaurant:5", ""},
		{"DELETE", "/v1/groups/restaurant:5", ""},
		{"GET", "/v1/groups/restaurant:5/settings", ""},
		{"PUT", "/v1/groups/restaurant:5/settings", `{}`},
		{"GET", "/v1/groups/restaurant:5/members", ""},
		{"PUT", "/v1/groups/restaurant:5/members/u1", `{"role":"X"}`},
		{"DELETE", "/v1/groups/restaurant:5/members/u1", ""},
	} {
		if r, _ := w.dreq(t, c.method, c.path, b, c.body); r.code != 404 {
			t.Errorf("b %s %s: %d %s, want 404", c.method, c.path, r.code, r.body)
		}
	}
	if w.directorySnapshot(t, "a") != aBefore {
		t.Fatal("b changed a's directory")
	}
	// Remove a member, then delete the group with what hangs on it.
	if r, _ := w.dreq(t, "DELETE", "/v1/groups/restaurant:5/members/u2", a, ""); r.code != 204 {
		t.Fatalf("remove member: %d %s", r.code, r.body)
	}
	if r, _ := w.dreq(t, "DELETE", "/v1/groups/restaurant:5/members/u2", a, ""); r.code != 404 {
		t.Fatalf("remove member again: %d %s", r.code, r.body)
	}
	if r, _ := w.dreq(t, "DELETE", "/v1/groups/restaurant:5", a, "", "If-Match", `"1"`); r.code != 412 {
		t.Fatalf("delete with a stale If-Match: %d %s", r.code, r.body)
	}
	if r, _ := w.dreq(t, "DELETE", "/v1/groups/restaurant:5", a, "", "If-Match", `"2"`); r.code != 204 {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}
	var left int
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM group_members WHERE tenant_id = 'a')
		+ (SELECT count(*) FROM group_settings WHERE tenant_id = 'a') + (SELECT count(*) FROM groups WHERE tenant_id = 'a')`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("after delete: %d rows left, %v", left, err)
	}
	if r, _ := w.dreq(t, "GET", "/v1/groups/restaurant:5", a, ""); r.code != 404 {
		t.Fatalf("get deleted: %d %s", r.code, r.body)
	}
}

// TestBatchAPI: a JSON-lines batch is written all or nothing (mode=all),
// or its good entries (mode=partial); every refused entry is listed with
// its line and field; the entry limit and the body limit are 413.
func TestBatchAPI(t *testing.T) {
	w := newWorld(t)
	a := w.keys["a"]
	nd := []string{"Content-Type", "application/x-ndjson"}
	good := `{"recipient":{"user_id":"u1","user_type":"STAFF","devices":[{"kind":"fcm","token":"t1"}]}}
{"recipient":{"user_id":"u2","user_type":"STAFF"}}
{"group":{"key":"restaurant:5","type":"restaurant"}}
{"member":{"group":"restaurant:5","user_id":"u1","role":"MANAGER"}}
{"preference":{"user_id":"u2","channel":"SMS","enabled":false}}
`
	bad := good + `{"recipient":{"user_id":"u3","user_type":"STAFF","time_zone":"Europe/Roma"}}
{"member":{"group":"restaurant:9","user_id":"u2"}}
`
	before := w.directorySnapshot(t, "a")
	r, _ := w.dreq(t, "POST", "/v1/recipients:batch", a, bad, nd...)
	var res struct {
		Title    string `json:"title"`
		Entries  int    `json:"entries"`
		Written  int    `json:"written"`
		Refused  int    `json:"refused"`
		Problems []struct {
			Line  int    `json:"line"`
			Field string `json:"field"`
		} `json:"problems"`
	}
	if err := json.Unmarshal(r.body, &res); err != nil || r.code != 422 || res.Entries != 7 || res.Refused != 2 || res.Written != 0 ||
		len(res.Problems) != 2 || res.Problems[0].Line != 6 || res.Problems[0].Field != "time_zone" || res.Problems[1].Line != 7 || res.Problems[1].Field != "group" {
		t.Fatalf("mode=all with bad entries: %d %s", r.code, r.body)
	}
	if w.directorySnapshot(t, "a") != before {
		t.Fatal("a refused mode=all batch wrote something")
	}
	r, _ = w.dreq(t, "POST", "/v1/recipients:batch?mode=partial", a, bad, nd...)
	if err := json.Unmarshal(r.body, &res); err != nil || r.code != 200 || res.Written != 5 || res.Refused != 2 {
		t.Fatalf("mode=partial: %d %s", r.code, r.body)
	}
	d, err := store.LoadDirectory(context.Background(), w.db.Pool, "a", directory.Needs{GroupKeys: []string{"restaurant:5"}, UserIDs: []string{"u2", "u3"}})
	if err != nil || len(d.Recipients) != 2 || len(d.Members) != 1 || len(d.Preferences) != 1 {
		t.Fatalf("after the partial batch: %+v %v", d, err)
	}
	// The same good batch again, mode=all: written, idempotent.
	if r, _ := w.dreq(t, "POST", "/v1/recipients:batch?mode=all", a, good, nd...); r.code != 200 {
		t.Fatalf("mode=all good: %d %s", r.code, r.body)
	}
	// Members may refer to what the tenant's directory already has.
	if r, _ := w.dreq(t, "POST", "/v1/recipients:batch", a, `{"member":{"group":"restaurant:5","user_id":"u2","role":"WAITER"}}`, nd...); r.code != 200 {
		t.Fatalf("reference to stored entries: %d %s", r.code, r.body)
	}
	// Limits and bad input.
	many := strings.Repeat(`{"recipient":{"user_id":"x","user_type":"S"}}`+"\n", 5001)
	for name, c := range map[string]struct {
		query, body string
		code        int
		field       string
	}{
		"too many entries": {"", many, 413, ""},
		"too many bytes":   {"", strings.Repeat(" ", 16<<20+1), 413, ""},
		"bad mode":         {"?mode=some", good, 400, "mode"},
		"unknown param":    {"?dry=1", good, 400, "dry"},
		"empty":            {"", "", 400, ""},
		"not JSON lines":   {"", `[{"recipient":{}}]`, 422, ""},
	} {
		r, _ := w.dreq(t, "POST", "/v1/recipients:batch"+c.query, a, c.body, nd...)
		if r.code != c.code || r.problem(t).Field != c.field {
			t.Errorf("%s: %d %.300s, want %d naming %q", name, r.code, r.body, c.code, c.field)
		}
	}
	// Hostile lines are refused one by one, naming their line.
	hostile := `{"recipient":{"user_id":"h1","user_type":"S"}}` + "\n" +
		`{"recipient":` + strings.Repeat(`{"a":`, 40) + "1" + strings.Repeat("}", 40) + "}\n" +
		"{\"recipient\":{\"user_id\":\"h\xff\",\"user_type\":\"S\"}}\n" +
		`{"recipient":{"user_id":"h\u0000","user_type":"S"}}` + "\n"
	r, _ = w.dreq(t, "POST", "/v1/recipients:batch?mode=partial", a, hostile, nd...)
	if err := json.Unmarshal(r.body, &res); err != nil || r.code != 200 || res.Written != 1 || res.Refused != 3 ||
		len(res.Problems) != 3 || res.Problems[0].Line != 2 || res.Problems[1].Line != 3 || res.Problems[2].Line != 4 || res.Problems[2].Field != "user_id" {
		t.Fatalf("hostile lines: %d %s", r.code, r.body)
	}
	// Another tenant's entries are not references.
	if r, _ := w.dreq(t, "POST", "/v1/recipients:batch", w.keys["b"], `{"member":{"group":"restaurant:5","user_id":"u2"}}`, nd...); r.code != 422 {
		t.Fatalf("b referring to a's entries: %d %s", r.code, r.body)
	}
}

// TestDirectoryRacingWriters: of two writers that read the same version
// and write with If-Match, exactly one wins and the other gets 412, for
// recipients, preferences and groups, however often it is tried.
func TestDirectoryRacingWriters(t *testing.T) {
	w := newWorld(t)
	a := w.keys["a"]
	if r, _ := w.dreq(t, "PUT", "/v1/recipients/u1", a, `{"user_type":"STAFF"}`); r.code != 201 {
		t.Fatalf("seed: %d %s", r.code, r.body)
	}
	if r, _ := w.dreq(t, "PUT", "/v1/groups/g1", a, `{"type":"team"}`); r.code != 201 {
		t.Fatalf("seed: %d %s", r.code, r.body)
	}
	race := func(name, method, path, getPath string, bodies [2]string) {
		for round := range 10 {
			_, h := w.dreq(t, "GET", getPath, a, "")
			etag := h.Get("ETag")
			var codes [2]int
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, _ := w.dreq(t, method, path, a, fmt.Sprintf(bodies[i], round), "If-Match", etag)
					codes[i] = r.code
				}()
			}
			wg.Wait()
			ok, lost := 0, 0
			for _, c := range codes {
				switch c {
				case 200:
					ok++
				case 412:
					lost++
				}
			}
			if ok != 1 || lost != 1 {
				t.Fatalf("%s round %d: %v, want one 200 and one 412", name, round, codes)
			}
		}
	}
	race("recipient", "PUT", "/v1/recipients/u1", "/v1/recipients/u1",
		[2]string{`{"user_type":"STAFF","locale":"it-%d"}`, `{"user_type":"STAFF","locale":"en-%d"}`})
	race("patch", "PATCH", "/v1/recipients/u1", "/v1/recipients/u1",
		[2]string{`{"attributes":{"a":"%d"}}`, `{"attributes":{"b":"%d"}}`})
	race("preferences", "PUT", "/v1/recipients/u1/preferences", "/v1/recipients/u1/preferences",
		[2]string{`{"channels":[{"channel":"SMS","enabled":true,"event_type":"E%d"}]}`, `{"channels":[{"channel":"EMAIL","enabled":true,"event_type":"E%d"}]}`})
	race("group", "PUT", "/v1/groups/g1", "/v1/groups/g1",
		[2]string{`{"type":"team","max_recipients":1%d}`, `{"type":"team","max_recipients":2%d}`})
	race("group settings", "PUT", "/v1/groups/g1/settings", "/v1/groups/g1/settings",
		[2]string{`{"channels":[{"channel":"SMS","enabled":true,"event_type":"E%d"}]}`, `{"channels":[{"channel":"EMAIL","enabled":true,"event_type":"E%d"}]}`})
}

// TestDirectoryNeedsATenantWideKey: a key limited to a project may not
// change the tenant's directory.
func TestDirectoryNeedsATenantWideKey(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	if err := store.EnsureProject(ctx, w.db.Pool, "a", "shop", ""); err != nil {
		t.Fatal(err)
	}
	k, err := store.CreateProjectAPIKey(ctx, w.db.Pool, "a", "shop", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := w.dreq(t, "PUT", "/v1/recipients/u1", k, `{"user_type":"S"}`); r.code != 403 {
		t.Fatalf("project key: %d %s", r.code, r.body)
	}
	if r, _ := w.dreq(t, "GET", "/v1/recipients", "", ""); r.code != 401 {
		t.Fatalf("no key: %d %s", r.code, r.body)
	}
}

// TestBatchLimitsAreConfigurable: http.directory_batch bounds a batch's
// entries and bytes (413 beyond, nothing written).
func TestBatchLimitsAreConfigurable(t *testing.T) {
	w := newWorld(t)
	d := config.DefaultDaemon()
	d.HTTP.RateLimit = httpguard.RateLimits{}
	d.HTTP.DirectoryBatch = httpguard.DirectoryBatch{MaxEntries: 2, MaxBytes: 2048}
	pub, err := server.PublicAPI(context.Background(), d, w.pools, nil, func() *rules.RuleSet { return nil }, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(pub.Handler)
	t.Cleanup(srv.Close)
	openapitest.Watch(t, srv.URL)
	w.url = srv.URL
	line := `{"recipient":{"user_id":"u%d","user_type":"S"}}` + "\n"
	nd := []string{"Content-Type", "application/x-ndjson"}
	if r, _ := w.dreq(t, "POST", "/v1/recipients:batch", w.keys["a"], fmt.Sprintf(line, 1)+fmt.Sprintf(line, 2), nd...); r.code != 200 {
		t.Fatalf("two entries: %d %s", r.code, r.body)
	}
	body := fmt.Sprintf(line, 3) + fmt.Sprintf(line, 4) + fmt.Sprintf(line, 5)
	if r, _ := w.dreq(t, "POST", "/v1/recipients:batch", w.keys["a"], body, nd...); r.code != 413 {
		t.Fatalf("three entries: %d %s", r.code, r.body)
	}
	if r, _ := w.dreq(t, "POST", "/v1/recipients:batch", w.keys["a"], `{"recipient":{"user_id":"u6","user_type":"`+strings.Repeat("S", 2100)+`"}}`, nd...); r.code != 413 {
		t.Fatalf("over max_bytes: %d %s", r.code, r.body)
	}
	var n int
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM recipients WHERE tenant_id = 'a'`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("recipients: %d %v, want the first batch's 2", n, err)
	}
}
