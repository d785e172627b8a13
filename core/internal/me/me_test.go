package me_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/api/openapitest"
	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/httpguard"
	"github.com/heraldhq/herald/core/internal/me"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/internal/pushpeer"
)

// world is a database with tenants a and b, each with the users alice and
// bob in its directory (the same ids in both), token keys, and the public
// API over real HTTP with rules where WEBSOCKET is mandatory and EMAIL and
// SMS optional, and PUSH sends Web Push.
type world struct {
	db    *testenv.DB
	url   string
	keys  map[string]store.TokenKey
	vapid pushpeer.VAPIDKeys
	rs    atomic.Pointer[rules.RuleSet]
}

func testRules(t *testing.T, vapid pushpeer.VAPIDKeys) *rules.RuleSet {
	t.Helper()
	ch := func(name, plugin string, cfg map[string]any) channel.Config {
		return channel.Config{Name: name, Providers: []channel.Provider{{Name: plugin, Plugin: plugin, Config: cfg}}}
	}
	rs, err := rules.New(rules.Spec{
		Channels: []channel.Config{
			ch("EMAIL", "email", nil),
			ch("PUSH", "push", map[string]any{"providers": []any{"fcm", "webpush"}, "vapid_subject": "mailto:ops@example.com",
				"vapid_public_key": vapid.Public, "vapid_private_key": vapid.Private}),
			ch("SMS", "sms", nil),
			ch("WEBSOCKET", "websocket", nil),
		},
		Events: []rules.EventSpec{
			{Type: "ORDER_SHIPPED", Audiences: []rules.AudienceSpec{{User: "{{ .payload.user }}"}},
				Mandatory: []string{"WEBSOCKET"}, Optional: []string{"EMAIL", "PUSH", "SMS"}},
			{Type: "PASSWORD_RESET", Description: "security notices", Audiences: []rules.AudienceSpec{{User: "{{ .payload.user }}"}},
				Mandatory: []string{"EMAIL"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	vapid, err := pushpeer.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	w := &world{db: testenv.Postgres(t), keys: map[string]store.TokenKey{}, vapid: vapid}
	w.rs.Store(testRules(t, vapid))
	for _, ten := range []string{"a", "b"} {
		if err := store.EnsureTenant(ctx, w.db.Pool, ten, ""); err != nil {
			t.Fatal(err)
		}
		secret, _ := auth.NewSecret()
		k := store.TokenKey{TenantID: ten, Kid: "k1", Alg: "HS256", Issuer: "https://" + ten + ".example", Key: secret}
		if err := store.AddTokenKey(ctx, w.db.Pool, k); err != nil {
			t.Fatal(err)
		}
		w.keys[ten] = k
		dir := &directory.Directory{Recipients: []directory.Recipient{
			{UserID: "alice", UserType: "CUSTOMER", Active: true},
			{UserID: "bob", UserType: "CUSTOMER", Active: true},
		}}
		if err := store.ImportDirectory(ctx, w.db.Pool, ten, dir); err != nil {
			t.Fatal(err)
		}
	}
	d := config.DefaultDaemon()
	d.Database.URL, d.Database.MaxConns, d.Database.APIMaxConns = w.db.URL, 8, 8
	d.HTTP.RateLimit = httpguard.RateLimits{}
	pools, err := server.OpenPools(ctx, d.Database)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pools.Close)
	pub, err := server.PublicAPI(ctx, d, pools, nil, w.rs.Load, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(pub.Handler)
	t.Cleanup(srv.Close)
	w.url = srv.URL
	openapitest.Watch(t, srv.URL)
	return w
}

func (w *world) token(t *testing.T, tenant, user string) string {
	t.Helper()
	tok, err := auth.Issue(w.keys[tenant], "herald", auth.User{UserID: user, UserType: "CUSTOMER"}, 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type reply struct {
	code   int
	header http.Header
	body   []byte
}

// field is the problem document's field.
func (r reply) field(t *testing.T) string {
	t.Helper()
	var p struct {
		Field string `json:"field"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("not a problem document: %d %s", r.code, r.body)
	}
	return p.Field
}

func (w *world) do(t *testing.T, method, path, tok, body string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, w.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

func (w *world) prefs(t *testing.T, tok string) (me.Preferences, string) {
	t.Helper()
	r := w.do(t, "GET", "/v1/me/preferences", tok, "")
	var p me.Preferences
	if r.code != http.StatusOK || json.Unmarshal(r.body, &p) != nil {
		t.Fatalf("GET preferences: %d %s", r.code, r.body)
	}
	return p, r.header.Get("ETag")
}

// storedPrefs are a user's rows in user_preferences, "event/channel=bool".
func (w *world) storedPrefs(t *testing.T, tenant, user string) []string {
	t.Helper()
	rows, err := w.db.Pool.Query(context.Background(), `SELECT event_type || '/' || channel || '=' || enabled FROM user_preferences
		WHERE tenant_id = $1 AND user_id = $2 ORDER BY 1`, tenant, user)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func TestPreferences(t *testing.T) {
	w := newWorld(t)
	alice := w.token(t, "a", "alice")
	p, tag := w.prefs(t, alice)
	if p.UserID != "alice" || p.UserType != "CUSTOMER" || tag != fmt.Sprintf(`"%d"`, p.Version) || len(p.Preferences.Channels) != 0 {
		t.Fatalf("GET: %+v, ETag %s", p, tag)
	}
	locked := map[string]string{}
	for _, c := range p.Choices.Channels {
		if c.Locked {
			locked[c.Channel] = c.Why
		}
	}
	if diff := cmp.Diff(map[string]string{"WEBSOCKET": "mandatory for every event type that sends it (ORDER_SHIPPED)"}, locked); diff != "" {
		t.Errorf("locked channels (-want +got):\n%s", diff)
	}
	if len(p.Choices.Events) != 2 || p.Choices.Events[1].EventType != "PASSWORD_RESET" || !p.Choices.Events[1].Channels[0].Locked {
		t.Errorf("event choices: %+v", p.Choices.Events)
	}

	// An operator's switch for a locked channel: the user neither sees
	// nor replaces it.
	if _, err := w.db.Pool.Exec(context.Background(), `INSERT INTO user_preferences (tenant_id, user_id, event_type, channel, enabled)
		VALUES ('a', 'alice', 'PASSWORD_RESET', 'EMAIL', true)`); err != nil {
		t.Fatal(err)
	}
	p, tag = w.prefs(t, alice)
	if len(p.Preferences.Channels) != 0 {
		t.Fatalf("the locked switch is shown: %+v", p.Preferences.Channels)
	}

	put := `{"channels": [{"channel": "SMS", "enabled": false}, {"event_type": "ORDER_SHIPPED", "channel": "EMAIL", "enabled": false}],
		"quiet_hours": {"start": "22:00", "end": "07:30"}, "time_zone": "Europe/Rome", "locale": "it"}`
	r := w.do(t, "PUT", "/v1/me/preferences", alice, put, "If-Match", tag)
	if r.code != http.StatusOK {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
	var after me.Preferences
	if err := json.Unmarshal(r.body, &after); err != nil {
		t.Fatal(err)
	}
	if after.Version <= p.Version || r.header.Get("ETag") != fmt.Sprintf(`"%d"`, after.Version) {
		t.Errorf("version %d → %d, ETag %s", p.Version, after.Version, r.header.Get("ETag"))
	}
	want := directory.UserPreferences{Locale: "it", TimeZone: "Europe/Rome", QuietHours: &directory.QuietHours{Start: "22:00", End: "07:30"},
		Channels: []directory.ChannelPreference{{Channel: "SMS", Enabled: false}, {EventType: "ORDER_SHIPPED", Channel: "EMAIL", Enabled: false}}}
	if diff := cmp.Diff(want, after.Preferences); diff != "" {
		t.Errorf("PUT's answer (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/SMS=false", "ORDER_SHIPPED/EMAIL=false", "PASSWORD_RESET/EMAIL=true"}, w.storedPrefs(t, "a", "alice")); diff != "" {
		t.Errorf("stored switches (-want +got):\n%s", diff)
	}
	for _, ec := range after.Choices.Events {
		for _, c := range ec.Channels {
			if ec.EventType == "ORDER_SHIPPED" && (c.Channel == "SMS" || c.Channel == "EMAIL") && c.Enabled {
				t.Errorf("%s %s still on: %+v", ec.EventType, c.Channel, c)
			}
		}
	}
	// The same user id in tenant b, and bob in tenant a, are untouched.
	for _, u := range [][2]string{{"b", "alice"}, {"a", "bob"}} {
		if got := w.storedPrefs(t, u[0], u[1]); len(got) != 0 {
			t.Errorf("%s/%s has switches %v", u[0], u[1], got)
		}
	}
	var zone, locale string
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT time_zone, locale FROM recipients WHERE tenant_id = 'a' AND user_id = 'alice'`).Scan(&zone, &locale); err != nil || zone != "Europe/Rome" || locale != "it" {
		t.Errorf("recipient: zone %q locale %q (%v)", zone, locale, err)
	}

	// A stale If-Match: 412, nothing written; the answer carries the
	// current ETag.
	r = w.do(t, "PUT", "/v1/me/preferences", alice, `{"channels": []}`, "If-Match", tag)
	if r.code != http.StatusPreconditionFailed || r.field(t) != "If-Match" || r.header.Get("ETag") != fmt.Sprintf(`"%d"`, after.Version) {
		t.Fatalf("stale If-Match: %d %s %v", r.code, r.body, r.header)
	}
	if got := w.storedPrefs(t, "a", "alice"); len(got) != 3 {
		t.Errorf("a refused PUT wrote: %v", got)
	}
	// Without If-Match the last writer wins; the locked switch stays.
	r = w.do(t, "PUT", "/v1/me/preferences", alice, `{}`)
	if r.code != http.StatusOK {
		t.Fatalf("PUT {}: %d %s", r.code, r.body)
	}
	if diff := cmp.Diff([]string{"PASSWORD_RESET/EMAIL=true"}, w.storedPrefs(t, "a", "alice")); diff != "" {
		t.Errorf("after PUT {} (-want +got):\n%s", diff)
	}
}

// TestPreferencesHostile: every bad request is a 4xx problem document
// naming the field, and writes nothing.
func TestPreferencesHostile(t *testing.T) {
	w := newWorld(t)
	alice := w.token(t, "a", "alice")
	deep := strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200)
	tests := map[string]struct {
		body   string
		header []string
		code   int
		field  string
	}{
		"unknown field":               {`{"channel": "SMS"}`, nil, 400, "channel"},
		"channels not a list":         {`{"channels": {"SMS": false}}`, nil, 400, "channels"},
		"enabled not a boolean":       {`{"channels": [{"channel": "SMS", "enabled": "no"}]}`, nil, 400, "channels[0].enabled"},
		"enabled missing":             {`{"channels": [{"channel": "SMS"}]}`, nil, 400, "channels[0].enabled"},
		"channel missing":             {`{"channels": [{"enabled": true}]}`, nil, 400, "channels[0].channel"},
		"unknown field in a switch":   {`{"channels": [{"channel": "SMS", "enabled": true, "user_id": "bob"}]}`, nil, 400, "channels[0].user_id"},
		"duplicate switch":            {`{"channels": [{"channel": "SMS", "enabled": true}, {"channel": "SMS", "enabled": false}]}`, nil, 400, "channels[1]"},
		"NUL in a channel":            {`{"channels": [{"channel": "S\u0000MS", "enabled": true}]}`, nil, 400, "channels[0].channel"},
		"control character in locale": {`{"locale": "it\n"}`, nil, 400, "locale"},
		"unknown zone":                {`{"time_zone": "Mars/Olympus"}`, nil, 400, "time_zone"},
		"zone path escape":            {`{"time_zone": "../../etc/passwd"}`, nil, 400, "time_zone"},
		"zone Local":                  {`{"time_zone": "Local"}`, nil, 400, "time_zone"},
		"quiet hours bad clock":       {`{"quiet_hours": {"start": "25:00", "end": "07:00"}}`, nil, 400, "quiet_hours.start"},
		"quiet hours empty window":    {`{"quiet_hours": {"start": "07:00", "end": "07:00"}}`, nil, 400, "quiet_hours.end"},
		"quiet hours missing end":     {`{"quiet_hours": {"start": "22:00"}}`, nil, 400, "quiet_hours.end"},
		"quiet hours a string":        {`{"quiet_hours": "22-07"}`, nil, 400, "quiet_hours"},
		"mandatory channel":           {`{"channels": [{"channel": "WEBSOCKET", "enabled": false}]}`, nil, 422, "channels[0].channel"},
		"mandatory for the event":     {`{"channels": [{"event_type": "PASSWORD_RESET", "channel": "EMAIL", "enabled": false}]}`, nil, 422, "channels[0].channel"},
		"unknown channel":             {`{"channels": [{"channel": "FAX", "enabled": false}]}`, nil, 422, "channels[0].channel"},
		"unknown event type":          {`{"channels": [{"event_type": "NOPE", "channel": "SMS", "enabled": false}]}`, nil, 422, "channels[0].event_type"},
		"second switch bad":           {`{"channels": [{"channel": "SMS", "enabled": false}, {"channel": "WEBSOCKET", "enabled": false}]}`, nil, 422, "channels[1].channel"},
		"not JSON":                    {`channels=SMS`, nil, 400, ""},
		"two values":                  {`{} {}`, nil, 400, ""},
		"an array":                    {`[]`, nil, 400, ""},
		"empty body":                  {``, nil, 400, ""},
		"deeply nested":               {`{"channels": [` + deep + `]}`, nil, 400, ""},
		"too large":                   {`{"locale": "` + strings.Repeat("a", me.MaxBody) + `"}`, nil, 413, ""},
		"If-Match not an ETag":        {`{}`, []string{"If-Match", "yesterday"}, 400, "If-Match"},
		"If-Match unquoted":           {`{}`, []string{"If-Match", "1"}, 400, "If-Match"},
		"If-Match two ETags":          {`{}`, []string{"If-Match", `"1", "2"`}, 400, "If-Match"},
		"If-Match zero":               {`{}`, []string{"If-Match", `"0"`}, 400, "If-Match"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := w.do(t, "PUT", "/v1/me/preferences", alice, tc.body, tc.header...)
			if r.code != tc.code || !strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
				t.Fatalf("%d %s, want %d", r.code, r.body, tc.code)
			}
			if got := r.field(t); got != tc.field {
				t.Errorf("field %q, want %q (%s)", got, tc.field, r.body)
			}
		})
	}
	// Invalid UTF-8 in a string.
	r := w.do(t, "PUT", "/v1/me/preferences", alice, "{\"locale\": \"\xff\xfe\"}")
	if r.code != http.StatusBadRequest {
		t.Errorf("invalid UTF-8: %d %s", r.code, r.body)
	}
	// A query parameter is refused, a wrong method is 405.
	if r := w.do(t, "GET", "/v1/me/preferences?user=bob", alice, ""); r.code != 400 || r.field(t) != "user" {
		t.Errorf("query parameter: %d %s", r.code, r.body)
	}
	for _, q := range []string{"%zz", "%00=1", "x=%ff", "cursor=1"} {
		if r := w.do(t, "GET", "/v1/me/devices?"+q, alice, ""); r.code != http.StatusBadRequest {
			t.Errorf("query %q: %d %s", q, r.code, r.body)
		}
	}
	if r := w.do(t, "POST", "/v1/me/preferences", alice, "{}"); r.code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d %s", r.code, r.body)
	}
	if got := w.storedPrefs(t, "a", "alice"); len(got) != 0 {
		t.Errorf("refused requests wrote %v", got)
	}
	var zone string
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT time_zone FROM recipients WHERE tenant_id = 'a' AND user_id = 'alice'`).Scan(&zone); err != nil || zone != "" {
		t.Errorf("time zone %q (%v)", zone, err)
	}
}

// TestAuthAndDirectory: no token or a bad one is 401; a valid token of a
// user the tenant's directory does not list is 404 on every endpoint that
// reads the directory; another tenant's token does not reach this one.
func TestAuthAndDirectory(t *testing.T) {
	w := newWorld(t)
	for _, path := range []string{"/v1/me/preferences", "/v1/me/devices", "/v1/me/push-config"} {
		if r := w.do(t, "GET", path, "", ""); r.code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d", path, r.code)
		}
		if r := w.do(t, "GET", path, "not.a.token", ""); r.code != http.StatusUnauthorized {
			t.Errorf("GET %s with a bad token: %d", path, r.code)
		}
	}
	carol := w.token(t, "a", "carol")
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/me/preferences", ""},
		{"PUT", "/v1/me/preferences", `{}`},
		{"GET", "/v1/me/devices", ""},
		{"POST", "/v1/me/devices", `{"kind": "fcm", "token": "tok-1"}`},
	} {
		if r := w.do(t, c.method, c.path, carol, c.body); r.code != http.StatusNotFound {
			t.Errorf("%s %s for a user not in the directory: %d %s", c.method, c.path, r.code, r.body)
		}
	}
	if n := w.count(t, `SELECT count(*) FROM recipients WHERE user_id = 'carol'`); n != 0 {
		t.Errorf("a recipient carol was created")
	}

	// A project-scoped token speaks for the same user: the directory has
	// no projects. A project the tenant does not have is refused (401).
	if err := store.EnsureProject(context.Background(), w.db.Pool, "a", "shop", "Shop"); err != nil {
		t.Fatal(err)
	}
	scoped := func(project string) string {
		tok, err := auth.Issue(w.keys["a"], "herald", auth.User{UserID: "alice", UserType: "CUSTOMER", Project: project}, 10*time.Minute, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	if r := w.do(t, "PUT", "/v1/me/preferences", scoped("shop"), `{"locale": "fr"}`); r.code != http.StatusOK {
		t.Fatalf("PUT with a project token: %d %s", r.code, r.body)
	}
	if p, _ := w.prefs(t, w.token(t, "a", "alice")); p.Preferences.Locale != "fr" {
		t.Errorf("the tenant-wide token reads locale %q after the project token's write", p.Preferences.Locale)
	}
	if r := w.do(t, "GET", "/v1/me/preferences", scoped("nope"), ""); r.code != http.StatusUnauthorized {
		t.Errorf("a token for a project the tenant does not have: %d %s", r.code, r.body)
	}
}

func (w *world) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := w.db.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPreferencesRacingWriters: writers racing with the same If-Match:
// exactly one wins, every other gets 412; without If-Match every write
// lands, one after the other, and the version counts them.
func TestPreferencesRacingWriters(t *testing.T) {
	w := newWorld(t)
	alice := w.token(t, "a", "alice")
	p, tag := w.prefs(t, alice)
	const n = 8
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"locale": "l%d"}`, i)
			codes[i] = w.do(t, "PUT", "/v1/me/preferences", alice, body, "If-Match", tag).code
		})
	}
	wg.Wait()
	won := 0
	for _, c := range codes {
		switch c {
		case http.StatusOK:
			won++
		case http.StatusPreconditionFailed:
		default:
			t.Errorf("racing PUT: %d", c)
		}
	}
	if won != 1 {
		t.Fatalf("%d writers won with the same If-Match, want 1 (%v)", won, codes)
	}
	mid, _ := w.prefs(t, alice)
	if mid.Version != p.Version+1 {
		t.Errorf("version %d → %d after one write", p.Version, mid.Version)
	}
	for i := range n {
		wg.Go(func() {
			codes[i] = w.do(t, "PUT", "/v1/me/preferences", alice, fmt.Sprintf(`{"locale": "m%d"}`, i)).code
		})
	}
	wg.Wait()
	for _, c := range codes {
		if c != http.StatusOK {
			t.Errorf("PUT without If-Match: %d", c)
		}
	}
	if end, _ := w.prefs(t, alice); end.Version != mid.Version+n {
		t.Errorf("version %d → %d after %d writes", mid.Version, end.Version, n)
	}
}

func TestDevices(t *testing.T) {
	w := newWorld(t)
	alice, bob, otherAlice := w.token(t, "a", "alice"), w.token(t, "a", "bob"), w.token(t, "b", "alice")
	sub := pushpeer.DevSubscription("https://push.example", "alice-browser")
	body := fmt.Sprintf(`{"kind": "webpush", "endpoint": %q, "p256dh": %q, "auth": %q}`, sub.Endpoint, sub.P256dh, sub.Auth)
	r := w.do(t, "POST", "/v1/me/devices", alice, body)
	var d store.StoredDevice
	if r.code != http.StatusCreated || json.Unmarshal(r.body, &d) != nil || d.ID == "" || d.Endpoint != sub.Endpoint || r.header.Get("Location") != "devices/"+d.ID {
		t.Fatalf("POST: %d %s %v", r.code, r.body, r.header)
	}
	// The same subscription again: 200, the same id.
	r = w.do(t, "POST", "/v1/me/devices", alice, body)
	var again store.StoredDevice
	if r.code != http.StatusOK || json.Unmarshal(r.body, &again) != nil || again.ID != d.ID {
		t.Fatalf("POST again: %d %s", r.code, r.body)
	}
	if r := w.do(t, "POST", "/v1/me/devices", bob, `{"kind": "fcm", "token": "bob-phone"}`); r.code != http.StatusCreated {
		t.Fatalf("bob's POST: %d %s", r.code, r.body)
	}
	list := func(tok string) []store.StoredDevice {
		t.Helper()
		r := w.do(t, "GET", "/v1/me/devices", tok, "")
		var out me.Devices
		if r.code != http.StatusOK || json.Unmarshal(r.body, &out) != nil {
			t.Fatalf("GET devices: %d %s", r.code, r.body)
		}
		return out.Items
	}
	if got := list(alice); len(got) != 1 || got[0].ID != d.ID || got[0].Kind != "webpush" || got[0].Auth != sub.Auth {
		t.Fatalf("alice's devices: %+v", got)
	}
	if got := list(otherAlice); len(got) != 0 {
		t.Fatalf("tenant b's alice sees %+v", got)
	}
	// Another user's device, the same user id in another tenant, a
	// malformed id: the same 404, and nothing removed.
	for name, c := range map[string]struct{ tok, id string }{
		"bob":              {bob, d.ID},
		"tenant b's alice": {otherAlice, d.ID},
		"not hex":          {alice, strings.ToUpper(d.ID)},
		"too long":         {alice, d.ID + "0"},
		"NUL":              {alice, d.ID[:31] + "%00"},
		"invalid UTF-8":    {alice, d.ID[:31] + "%ff"},
		"unknown":          {alice, strings.Repeat("0", 32)},
	} {
		r := w.do(t, "DELETE", "/v1/me/devices/"+c.id, c.tok, "")
		if r.code != http.StatusNotFound {
			t.Errorf("%s: DELETE: %d %s, want 404", name, r.code, r.body)
		}
	}
	if n := w.count(t, `SELECT count(*) FROM recipient_devices WHERE tenant_id = 'a' AND user_id = 'alice'`); n != 1 {
		t.Fatalf("alice has %d devices after others' deletes", n)
	}
	if r := w.do(t, "DELETE", "/v1/me/devices/"+d.ID, alice, ""); r.code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.code, r.body)
	}
	if r := w.do(t, "DELETE", "/v1/me/devices/"+d.ID, alice, ""); r.code != http.StatusNotFound {
		t.Fatalf("DELETE again: %d %s", r.code, r.body)
	}
	if got := list(alice); len(got) != 0 {
		t.Fatalf("after DELETE: %+v", got)
	}
	if got := list(bob); len(got) != 1 {
		t.Fatalf("bob's devices: %+v", got)
	}
}

func TestDevicesHostile(t *testing.T) {
	w := newWorld(t)
	alice := w.token(t, "a", "alice")
	sub := pushpeer.DevSubscription("https://push.example", "x")
	wp := func(endpoint, p256dh, auth string) string {
		return fmt.Sprintf(`{"kind": "webpush", "endpoint": %q, "p256dh": %q, "auth": %q}`, endpoint, p256dh, auth)
	}
	tests := map[string]struct {
		body  string
		field string
	}{
		"unknown kind":          {`{"kind": "sms", "token": "x"}`, "kind"},
		"kind missing":          {`{"token": "x"}`, "kind"},
		"kind a number":         {`{"kind": 1, "token": "x"}`, "kind"},
		"unknown field":         {`{"kind": "fcm", "token": "x", "user_id": "bob"}`, "user_id"},
		"fcm without token":     {`{"kind": "fcm"}`, "token"},
		"token with a space":    {`{"kind": "fcm", "token": "a b"}`, "token"},
		"token with NUL":        {`{"kind": "fcm", "token": "a\u0000b"}`, "token"},
		"apns not hex":          {`{"kind": "apns", "token": "` + strings.Repeat("z", 64) + `"}`, "token"},
		"apns too short":        {`{"kind": "apns", "token": "abcd"}`, "token"},
		"fcm with an endpoint":  {`{"kind": "fcm", "token": "x", "endpoint": "https://a.example"}`, "endpoint"},
		"webpush over http":     {wp("http://push.example/x", sub.P256dh, sub.Auth), "endpoint"},
		"webpush no endpoint":   {wp("", sub.P256dh, sub.Auth), "endpoint"},
		"webpush with userinfo": {wp("https://u:p@push.example/x", sub.P256dh, sub.Auth), "endpoint"},
		"p256dh not a point":    {wp(sub.Endpoint, "BAAA", sub.Auth), "p256dh"},
		"p256dh not base64url":  {wp(sub.Endpoint, "!!!!", sub.Auth), "p256dh"},
		"auth too short":        {wp(sub.Endpoint, sub.P256dh, "AAAA"), "auth"},
		"auth missing":          {wp(sub.Endpoint, sub.P256dh, ""), "auth"},
		"webpush with a token":  {`{"kind": "webpush", "token": "x", "endpoint": "` + sub.Endpoint + `", "p256dh": "` + sub.P256dh + `", "auth": "` + sub.Auth + `"}`, "token"},
		"not an object":         {`"fcm"`, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := w.do(t, "POST", "/v1/me/devices", alice, tc.body)
			if r.code != http.StatusBadRequest {
				t.Fatalf("%d %s, want 400", r.code, r.body)
			}
			if got := r.field(t); got != tc.field {
				t.Errorf("field %q, want %q (%s)", got, tc.field, r.body)
			}
		})
	}
	if r := w.do(t, "POST", "/v1/me/devices", alice, "{\"kind\": \"fcm\", \"token\": \"\xff\"}"); r.code != http.StatusBadRequest {
		t.Errorf("invalid UTF-8: %d %s", r.code, r.body)
	}
	if n := w.count(t, `SELECT count(*) FROM recipient_devices`); n != 0 {
		t.Fatalf("refused devices stored: %d", n)
	}
	// At most MaxDevices per user; registering one of them again is fine.
	for i := range me.MaxDevices {
		if r := w.do(t, "POST", "/v1/me/devices", alice, fmt.Sprintf(`{"kind": "fcm", "token": "phone-%d"}`, i)); r.code != http.StatusCreated {
			t.Fatalf("device %d: %d %s", i, r.code, r.body)
		}
	}
	if r := w.do(t, "POST", "/v1/me/devices", alice, `{"kind": "fcm", "token": "one-too-many"}`); r.code != http.StatusConflict {
		t.Fatalf("device %d: %d %s, want 409", me.MaxDevices+1, r.code, r.body)
	}
	if r := w.do(t, "POST", "/v1/me/devices", alice, `{"kind": "fcm", "token": "phone-0"}`); r.code != http.StatusOK {
		t.Fatalf("a registered device again at the limit: %d %s", r.code, r.body)
	}
}

func TestPushConfig(t *testing.T) {
	w := newWorld(t)
	alice := w.token(t, "a", "alice")
	r := w.do(t, "GET", "/v1/me/push-config", alice, "")
	var pc me.PushConfig
	if r.code != http.StatusOK || json.Unmarshal(r.body, &pc) != nil || pc.WebPush == nil {
		t.Fatalf("push-config: %d %s", r.code, r.body)
	}
	if diff := cmp.Diff(&me.WebPushConfig{VAPIDPublicKey: w.vapid.Public, Channels: []string{"PUSH"}}, pc.WebPush); diff != "" {
		t.Errorf("push-config (-want +got):\n%s", diff)
	}
	if strings.Contains(string(r.body), w.vapid.Private) || strings.Contains(string(r.body), "private") {
		t.Fatalf("push-config shows the private key: %s", r.body)
	}
	// Rules without a Web Push provider: web_push is null.
	w.rs.Store(testRulesWithout(t))
	r = w.do(t, "GET", "/v1/me/push-config", alice, "")
	if r.code != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"web_push":null}` {
		t.Fatalf("push-config without web push: %d %s", r.code, r.body)
	}
}

// testRulesWithout are rules whose push provider sends FCM only.
func testRulesWithout(t *testing.T) *rules.RuleSet {
	t.Helper()
	rs, err := rules.New(rules.Spec{
		Channels: []channel.Config{{Name: "PUSH", Providers: []channel.Provider{{Plugin: "push",
			Config: map[string]any{"providers": []any{"fcm"}, "vapid_public_key": "unused"}}}}},
		Events: []rules.EventSpec{{Type: "A", Audiences: []rules.AudienceSpec{{User: "u"}}, Optional: []string{"PUSH"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestPreferencesGroupNote: a setting of the user's group that has an
// optional channel off is named in the choice's note (and the switch stays
// the user's to change); another tenant's group of the same key is not.
func TestPreferencesGroupNote(t *testing.T) {
	w := newWorld(t)
	for _, ten := range []string{"a", "b"} {
		enabled := ten == "b"
		dir := &directory.Directory{
			Groups:   []directory.Group{{Key: "shop:1", Type: "shop"}},
			Members:  []directory.Member{{Group: "shop:1", UserID: "alice", Role: "BUYER"}},
			Settings: []directory.GroupSetting{{Group: "shop:1", Channel: "SMS", Enabled: enabled}},
		}
		if err := store.ImportDirectory(context.Background(), w.db.Pool, ten, dir); err != nil {
			t.Fatal(err)
		}
	}
	note := func(tenant string) string {
		p, _ := w.prefs(t, w.token(t, tenant, "alice"))
		for _, c := range p.Choices.Channels {
			if c.Channel == "SMS" {
				if c.Locked {
					t.Errorf("SMS locked: %+v", c)
				}
				return c.Note
			}
		}
		t.Fatalf("no SMS choice: %+v", p.Choices.Channels)
		return ""
	}
	if got := note("a"); !strings.HasPrefix(got, "switched off by group shop:1's setting") {
		t.Errorf("tenant a's note: %q", got)
	}
	if got := note("b"); got != "" {
		t.Errorf("tenant b's note: %q (its group enables SMS)", got)
	}
}
