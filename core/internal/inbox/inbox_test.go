package inbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/core/internal/api/openapitest"
	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/httpguard"
	"github.com/heraldhq/herald/core/internal/inbox"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// world is a database with tenants a and b, their token keys and API
// keys, and the public API over real HTTP.
type world struct {
	db     *testenv.DB
	pools  *server.Pools
	pub    *server.Public
	url    string
	keys   map[string]store.TokenKey
	apikey map[string]string
	seq    int
	// aud is the deployment's own token audience (auth.audience empty).
	aud string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{db: testenv.Postgres(t), keys: map[string]store.TokenKey{}, apikey: map[string]string{}}
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
		key, err := store.CreateAPIKey(ctx, w.db.Pool, ten, "", "")
		if err != nil {
			t.Fatal(err)
		}
		w.apikey[ten] = key
	}
	d := config.DefaultDaemon()
	d.Database.URL, d.Database.MaxConns, d.Database.APIMaxConns = w.db.URL, 8, 8
	d.Database.APIURL, d.Database.AdminURL = w.db.APIURL, w.db.AdminURL
	d.HTTP.RateLimit = httpguard.RateLimits{}
	var err error
	if w.pools, err = server.OpenPools(ctx, d.Database); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.pools.Close)
	if w.aud, err = store.DeploymentAudience(ctx, w.db.Pool); err != nil {
		t.Fatal(err)
	}
	if w.pub, err = server.PublicAPI(ctx, d, w.pools, nil, func() *rules.RuleSet { return nil }, hclog.NewNullLogger()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.pub.Handler)
	t.Cleanup(srv.Close)
	w.url = srv.URL
	openapitest.Watch(t, srv.URL)
	return w
}

func (w *world) token(t *testing.T, tenant, user, project string) string {
	t.Helper()
	tok, err := auth.Issue(w.keys[tenant], w.aud, auth.User{UserID: user, UserType: "STAFF", Project: project}, 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// note is one notification to seed.
type note struct {
	tenant, user, project, severity, eventType, title, body string
	share                                                   string
}

// seed writes notifications through the relay's own InsertFanout (which
// bumps the counters), one event per share key or note, a second apart.
func (w *world) seed(t *testing.T, notes ...note) []string {
	t.Helper()
	var ids []string
	for _, n := range notes {
		w.seq++
		id := uuid.Must(uuid.NewV7()).String()
		ev := fmt.Sprintf("ev-%d", w.seq)
		if n.share != "" {
			ev = "ev-" + n.share
		}
		nn := store.NewNotification{ID: id, TenantID: n.tenant, ProjectID: n.project, EventID: ev, UserID: n.user,
			EventType: cmp(n.eventType, "RESERVATION"), Title: cmp(n.title, "title"), Body: n.body, Severity: cmp(n.severity, "info"),
			ShareKey: n.share, CreatedAt: time.Now()}
		err := pgx.BeginFunc(context.Background(), w.db.Pool, func(tx pgx.Tx) error {
			_, _, err := store.InsertFanout(context.Background(), tx, []store.NewNotification{nn}, nil)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		time.Sleep(2 * time.Millisecond) // distinct created_at, newest last
	}
	return ids
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

type reply struct {
	code int
	body []byte
}

func (r reply) field(t *testing.T) string {
	t.Helper()
	var p struct {
		Field string `json:"field"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("not a problem document: %s", r.body)
	}
	return p.Field
}

func (w *world) do(t *testing.T, method, path, tok, body string) reply {
	t.Helper()
	req, _ := http.NewRequest(method, w.url+path, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, b}
}

func (w *world) unread(t *testing.T, tok string) int64 {
	t.Helper()
	r := w.do(t, "GET", "/v1/inbox/unread-count", tok, "")
	var c inbox.Count
	if err := json.Unmarshal(r.body, &c); err != nil || r.code != 200 {
		t.Fatalf("unread-count: %d %s", r.code, r.body)
	}
	return c.Unread
}

func (w *world) page(t *testing.T, tok, query string) inbox.Page {
	t.Helper()
	r := w.do(t, "GET", "/v1/inbox?"+query, tok, "")
	var p inbox.Page
	if err := json.Unmarshal(r.body, &p); err != nil || r.code != 200 {
		t.Fatalf("list %s: %d %s", query, r.code, r.body)
	}
	return p
}

// actual counts a user's unread rows, the truth the counter must match.
func (w *world) actual(t *testing.T, tenant, user string) int64 {
	t.Helper()
	var n int64
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM notifications
		WHERE tenant_id = $1 AND user_id = $2 AND read_at IS NULL AND archived_at IS NULL`, tenant, user).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestInboxReadUnreadArchive(t *testing.T) {
	w := newWorld(t)
	ids := w.seed(t,
		note{tenant: "a", user: "alice", severity: "info", title: "Table for 4", body: "Rossi at 20:30"},
		note{tenant: "a", user: "alice", severity: "critical", eventType: "OUTAGE", title: "Kitchen down", body: "Oven"},
		note{tenant: "a", user: "alice", severity: "warning", title: "Late delivery", body: "50% off_sale"},
		note{tenant: "a", user: "bob", title: "bob's"},
		note{tenant: "b", user: "alice", title: "the other alice's"},
	)
	alice := w.token(t, "a", "alice", "")
	if n := w.unread(t, alice); n != 3 {
		t.Fatalf("unread-count %d, want 3", n)
	}
	// Bell: the count and the latest unread, newest first.
	r := w.do(t, "GET", "/v1/inbox/bell?limit=2", alice, "")
	var bell inbox.Bell
	if err := json.Unmarshal(r.body, &bell); err != nil || bell.Unread != 3 || len(bell.Items) != 2 || bell.Items[0].NotificationID != ids[2] {
		t.Fatalf("bell: %d %s", r.code, r.body)
	}
	steps := []struct {
		op     string
		id     string
		unread int64
		status string
	}{
		{"read", ids[0], 2, "read"},
		{"read", ids[0], 2, "read"}, // again: no change
		{"unread", ids[0], 3, "unread"},
		{"unread", ids[0], 3, "unread"},
		{"archive", ids[1], 2, "archived"}, // archiving an unread one lowers the count
		{"read", ids[1], 2, "archived"},    // reading an archived one does not
		{"unarchive", ids[1], 2, "read"},   // it was read meanwhile
		{"archive", ids[2], 1, "archived"},
		{"unarchive", ids[2], 2, "unread"},
	}
	for i, s := range steps {
		r := w.do(t, "POST", "/v1/inbox/"+s.id+"/"+s.op, alice, "")
		var ch inbox.Changed
		if err := json.Unmarshal(r.body, &ch); err != nil || r.code != 200 {
			t.Fatalf("step %d %s: %d %s", i, s.op, r.code, r.body)
		}
		if ch.Unread != s.unread || ch.Notification.Status != s.status {
			t.Fatalf("step %d %s: unread %d status %s, want %d %s", i, s.op, ch.Unread, ch.Notification.Status, s.unread, s.status)
		}
		if got := w.actual(t, "a", "alice"); got != ch.Unread {
			t.Fatalf("step %d: counter %d, rows %d", i, ch.Unread, got)
		}
	}
	// Filters.
	for q, want := range map[string]int{
		"":                          3,
		"status=unread":             2,
		"status=read":               1,
		"status=archived":           0,
		"status=all":                3,
		"severity=critical":         1,
		"event_type=OUTAGE":         1,
		"q=rossi":                   1,
		"q=50%25":                   1, // % is literal
		"q=off_sale":                1,
		"q=Late%5Fdelivery":         0, // _ is literal too
		"project=default":           3,
		"project=other":             0,
		"from=2000-01-01T00:00:00Z": 3,
		"to=2000-01-01T00:00:00Z":   0,
	} {
		if got := len(w.page(t, alice, q).Items); got != want {
			t.Errorf("list ?%s: %d items, want %d", q, got, want)
		}
	}
	// Read all.
	r = w.do(t, "POST", "/v1/inbox/read-all", alice, "")
	var ch inbox.Changed
	if err := json.Unmarshal(r.body, &ch); err != nil || ch.Unread != 0 || w.actual(t, "a", "alice") != 0 {
		t.Fatalf("read-all: %d %s", r.code, r.body)
	}
	// Bob and the other tenant's alice are untouched.
	if n := w.unread(t, w.token(t, "a", "bob", "")); n != 1 {
		t.Fatalf("bob's count %d", n)
	}
	if n := w.unread(t, w.token(t, "b", "alice", "")); n != 1 {
		t.Fatalf("tenant b's alice: count %d", n)
	}
}

func TestInboxHidesOtherUsersAndTenants(t *testing.T) {
	w := newWorld(t)
	ids := w.seed(t, note{tenant: "a", user: "alice"}, note{tenant: "a", user: "bob"}, note{tenant: "b", user: "alice"})
	aliceB := w.token(t, "b", "alice", "")
	bob := w.token(t, "a", "bob", "")
	before := w.actual(t, "a", "alice")
	for _, tok := range []string{aliceB, bob} {
		for _, path := range []string{"", "/read", "/unread", "/archive", "/unarchive", "/actions"} {
			method := "POST"
			if path == "" {
				method = "GET"
			}
			r := w.do(t, method, "/v1/inbox/"+ids[0]+path, tok, `{"type":"CONFIRMED"}`)
			if r.code != 404 {
				t.Errorf("%s %s with another user's token: %d %s", method, path, r.code, r.body)
			}
		}
	}
	for _, id := range []string{"not-a-uuid", uuid.NewString(), "%00", strings.Repeat("a", 500)} {
		if r := w.do(t, "GET", "/v1/inbox/"+url.PathEscape(id), bob, ""); r.code != 404 {
			t.Errorf("id %q: %d", id, r.code)
		}
	}
	if w.actual(t, "a", "alice") != before || w.unread(t, w.token(t, "a", "alice", "")) != before {
		t.Fatal("other users' requests changed alice's inbox")
	}
	// Tokens.
	expired, _ := auth.Issue(w.keys["a"], w.aud, auth.User{UserID: "alice"}, time.Minute, time.Now().Add(-time.Hour))
	wrongKey := w.keys["a"]
	wrongKey.Key = []byte("another secret, not the tenant's 0123456789")
	forged, _ := auth.Issue(wrongKey, w.aud, auth.User{UserID: "alice"}, time.Minute, time.Now())
	for name, tok := range map[string]string{"none": "", "expired": expired, "forged": forged, "api key": w.apikey["a"]} {
		if r := w.do(t, "GET", "/v1/inbox", tok, ""); r.code != 401 {
			t.Errorf("%s token: %d", name, r.code)
		}
	}
	// Bad parameters name the field.
	alice := w.token(t, "a", "alice", "")
	for q, field := range map[string]string{
		"status=gone": "status", "limit=0": "limit", "limit=101": "limit", "severity=a%20b": "severity",
		"from=yesterday": "from", "colour=red": "colour", "cursor=abc": "cursor", "q=%ff": "q",
		"status=read&status=unread": "status", "q=" + strings.Repeat("x", 201): "q",
	} {
		r := w.do(t, "GET", "/v1/inbox?"+q, alice, "")
		if r.code != 400 || r.field(t) != field {
			t.Errorf("?%s: %d %s, want 400 naming %s", q[:min(len(q), 30)], r.code, r.body, field)
		}
	}
}

func TestInboxCursorWalksEveryPage(t *testing.T) {
	w := newWorld(t)
	var notes []note
	for i := range 23 {
		notes = append(notes, note{tenant: "a", user: "alice", title: fmt.Sprintf("n%d", i)})
	}
	ids := w.seed(t, notes...)
	alice := w.token(t, "a", "alice", "")
	var got []string
	q := "limit=5"
	for range 10 {
		p := w.page(t, alice, q)
		for _, n := range p.Items {
			got = append(got, n.NotificationID)
		}
		if p.NextCursor == "" {
			break
		}
		// The cursor is bound to this user and these filters.
		if r := w.do(t, "GET", "/v1/inbox?limit=5&cursor="+url.QueryEscape(p.NextCursor), w.token(t, "a", "bob", ""), ""); r.code != 400 {
			t.Fatalf("another user's cursor: %d", r.code)
		}
		if r := w.do(t, "GET", "/v1/inbox?status=all&limit=5&cursor="+url.QueryEscape(p.NextCursor), alice, ""); r.code != 400 {
			t.Fatalf("cursor with other filters: %d", r.code)
		}
		q = "limit=5&cursor=" + url.QueryEscape(p.NextCursor)
	}
	if len(got) != 23 || got[0] != ids[22] || got[22] != ids[0] {
		t.Fatalf("pages: %d ids", len(got))
	}
}

func TestSharedReadAndFirstToAct(t *testing.T) {
	w := newWorld(t)
	managers := []string{"m1", "m2", "m3", "m4", "m5"}
	var notes []note
	for _, m := range managers {
		notes = append(notes, note{tenant: "a", user: m, share: "reservation-9", eventType: "RESERVATION_REQUESTED"})
	}
	ids := w.seed(t, notes...)
	plain := w.seed(t, note{tenant: "a", user: "m1", title: "not shared"})
	toks := map[string]string{}
	for _, m := range managers {
		toks[m] = w.token(t, "a", m, "")
	}
	// One read marks it read for every sharer, and each counter drops once.
	if r := w.do(t, "POST", "/v1/inbox/"+ids[0]+"/read", toks["m1"], ""); r.code != 200 {
		t.Fatalf("read: %d %s", r.code, r.body)
	}
	for i, m := range managers {
		if n := w.unread(t, toks[m]); n != map[bool]int64{true: 1, false: 0}[m == "m1"] {
			t.Fatalf("%s: unread %d after a sharer read it", m, n)
		}
		var got inbox.Notification
		r := w.do(t, "GET", "/v1/inbox/"+ids[i], toks[m], "")
		if err := json.Unmarshal(r.body, &got); err != nil || got.Status != "read" || !got.Shared || !got.Actionable {
			t.Fatalf("%s's view: %s", m, r.body)
		}
	}
	// Every manager acts at once: exactly one wins, the others get 409
	// naming the winner.
	var wg sync.WaitGroup
	codes := make([]int, len(managers))
	bodies := make([][]byte, len(managers))
	for i, m := range managers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := w.do(t, "POST", "/v1/inbox/"+ids[i]+"/actions", toks[m], `{"type":"CONFIRMED","data":{"table":7}}`)
			codes[i], bodies[i] = r.code, r.body
		}()
	}
	wg.Wait()
	winner := ""
	for i, c := range codes {
		switch c {
		case 200:
			if winner != "" {
				t.Fatalf("two winners: %s and %s", winner, managers[i])
			}
			winner = managers[i]
		case 409:
			if !strings.Contains(string(bodies[i]), `"handled_by"`) {
				t.Fatalf("409 without the winner: %s", bodies[i])
			}
		default:
			t.Fatalf("%s: %d %s", managers[i], c, bodies[i])
		}
	}
	if winner == "" {
		t.Fatal("nobody won")
	}
	for i, m := range managers {
		var got inbox.Notification
		r := w.do(t, "GET", "/v1/inbox/"+ids[i], toks[m], "")
		if err := json.Unmarshal(r.body, &got); err != nil || got.HandledBy == nil || got.HandledBy.UserID != winner ||
			got.HandledBy.Type != "CONFIRMED" || got.Actionable || string(got.HandledBy.Data) != `{"table":7}` {
			t.Fatalf("%s sees %s", m, r.body)
		}
	}
	// The business service's feed holds the winning action, once.
	r := w.do(t, "GET", "/v1/actions?after=0", w.apikey["a"], "")
	var feed struct {
		Items     []inbox.Action `json:"items"`
		NextAfter int64          `json:"next_after"`
	}
	if err := json.Unmarshal(r.body, &feed); err != nil || r.code != 200 || len(feed.Items) != 1 || feed.Items[0].UserID != winner ||
		feed.Items[0].EventType != "RESERVATION_REQUESTED" || feed.Items[0].ActionID == "" {
		t.Fatalf("feed: %d %s", r.code, r.body)
	}
	if r := w.do(t, "GET", fmt.Sprintf("/v1/actions?after=%d", feed.NextAfter), w.apikey["a"], ""); !strings.Contains(string(r.body), `"items":[]`) {
		t.Fatalf("feed after the last: %s", r.body)
	}
	if r := w.do(t, "GET", "/v1/actions", w.apikey["b"], ""); !strings.Contains(string(r.body), `"items":[]`) {
		t.Fatalf("tenant b's feed: %s", r.body)
	}
	// Not actionable, bad types and data: named, and nothing changes.
	for body, want := range map[string]struct {
		code  int
		field string
	}{
		`{"type":"CONFIRMED"}`:            {422, "id"},
		`{"type":"APPROVED"}`:             {400, "type"},
		`{"type":"CONFIRMED","data":[1]}`: {400, "data"},
		`{"type":7}`:                      {400, "type"},
		`{"type":"CONFIRMED","x":1}`:      {400, "x"},
	} {
		r := w.do(t, "POST", "/v1/inbox/"+plain[0]+"/actions", toks["m1"], body)
		if r.code != want.code || r.field(t) != want.field {
			t.Errorf("%s: %d %s", body, r.code, r.body)
		}
	}
	if n := w.unread(t, toks["m1"]); n != 1 {
		t.Fatalf("m1's count changed under refused actions: %d", n)
	}
}

// TestCountersStayExactUnderConcurrency hammers the same rows of two users
// (with shared ones between them) with every state change and reads at
// once, then checks every counter against the rows.
func TestCountersStayExactUnderConcurrency(t *testing.T) {
	w := newWorld(t)
	var notes []note
	for i := range 30 {
		notes = append(notes, note{tenant: "a", user: "alice"}, note{tenant: "a", user: "bob"})
		if i%3 == 0 {
			key := fmt.Sprintf("s%d", i)
			notes = append(notes, note{tenant: "a", user: "alice", share: key}, note{tenant: "a", user: "bob", share: key})
		}
	}
	ids := w.seed(t, notes...)
	owner := map[string]string{}
	for i, n := range notes {
		owner[ids[i]] = n.user
	}
	toks := map[string]string{"alice": w.token(t, "a", "alice", ""), "bob": w.token(t, "a", "bob", "")}
	ops := []string{"read", "unread", "archive", "unarchive", "read-all", "count", "bell"}
	var wg sync.WaitGroup
	errs := make(chan string, 1000)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 40 {
				id := ids[rng.IntN(len(ids))]
				tok := toks[owner[id]]
				var r reply
				switch op := ops[rng.IntN(len(ops))]; op {
				case "read-all":
					r = w.do(t, "POST", "/v1/inbox/read-all", tok, "")
				case "count":
					r = w.do(t, "GET", "/v1/inbox/unread-count", tok, "")
				case "bell":
					r = w.do(t, "GET", "/v1/inbox/bell", tok, "")
				default:
					r = w.do(t, "POST", "/v1/inbox/"+id+"/"+op, tok, "")
				}
				if r.code != 200 {
					errs <- fmt.Sprintf("%d %s", r.code, r.body)
				}
				if strings.Contains(string(r.body), `"unread":-`) {
					errs <- "negative count: " + string(r.body)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	for _, u := range []string{"alice", "bob"} {
		if got, want := w.unread(t, toks[u]), w.actual(t, "a", u); got != want {
			t.Errorf("%s: counter %d, rows %d", u, got, want)
		}
	}
	var drift []store.Drift
	err := pgx.BeginFunc(context.Background(), w.db.Pool, func(tx pgx.Tx) error {
		var err error
		drift, err = store.RepairCounters(context.Background(), tx, "a")
		return err
	})
	if err != nil || len(drift) != 0 {
		t.Fatalf("repair after the storm found drift: %+v %v", drift, err)
	}
}

func TestCountersRepairFixesDrift(t *testing.T) {
	w := newWorld(t)
	w.seed(t, note{tenant: "a", user: "alice"}, note{tenant: "a", user: "alice"}, note{tenant: "b", user: "carol"})
	ctx := context.Background()
	if _, err := w.db.Pool.Exec(ctx, `UPDATE notification_counters SET unread = 9 WHERE user_id = 'alice';
		DELETE FROM notification_counters WHERE user_id = 'carol'`); err != nil {
		t.Fatal(err)
	}
	var drift []store.Drift
	err := pgx.BeginFunc(ctx, w.db.Pool, func(tx pgx.Tx) error {
		var err error
		drift, err = store.RepairCounters(ctx, tx, "")
		return err
	})
	if err != nil || len(drift) != 2 || drift[0].Was != 9 || drift[0].Is != 2 || drift[1].Was != 0 || drift[1].Is != 1 {
		t.Fatalf("repair: %+v %v", drift, err)
	}
	if n := w.unread(t, w.token(t, "a", "alice", "")); n != 2 {
		t.Fatalf("alice after repair: %d", n)
	}
}

func TestProjectTokenSeesItsProjectOnly(t *testing.T) {
	w := newWorld(t)
	if err := store.EnsureProject(context.Background(), w.db.Pool, "a", "shop", ""); err != nil {
		t.Fatal(err)
	}
	ids := w.seed(t, note{tenant: "a", user: "alice", project: "shop"}, note{tenant: "a", user: "alice", project: "default"})
	shop := w.token(t, "a", "alice", "shop")
	if n := w.unread(t, shop); n != 1 {
		t.Fatalf("shop count %d", n)
	}
	if p := w.page(t, shop, ""); len(p.Items) != 1 || p.Items[0].NotificationID != ids[0] {
		t.Fatalf("shop list: %+v", p.Items)
	}
	if r := w.do(t, "POST", "/v1/inbox/"+ids[1]+"/read", shop, ""); r.code != 404 {
		t.Fatalf("reading another project's notification: %d", r.code)
	}
	if r := w.do(t, "POST", "/v1/inbox/read-all", shop, ""); r.code != 200 {
		t.Fatal(r.code)
	}
	if n := w.unread(t, w.token(t, "a", "alice", "")); n != 1 {
		t.Fatalf("read-all of shop touched default: count %d", n)
	}
}

// TestActionsArePublished runs the action publisher against a real broker:
// the winning action arrives on herald.actions, persistent, with its id,
// and its row is marked published.
func TestActionsArePublished(t *testing.T) {
	w := newWorld(t)
	b := testenv.RabbitMQ(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn := broker.Dial(b.URL, broker.Topology{Exchange: "herald.deliveries"}, hclog.NewNullLogger())
	defer conn.Close()
	pub := inbox.NewPublisher(w.pools.Worker, conn, hclog.NewNullLogger())
	done := make(chan struct{})
	go func() { _ = pub.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	ch := testenv.AMQPChannel(t, b.URL)
	if err := ch.ExchangeDeclare(inbox.ActionsExchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q, _ := ch.QueueDeclare("", false, true, true, false, nil)
	if err := ch.QueueBind(q.Name, "*.*.RESERVATION_REQUESTED.*", inbox.ActionsExchange, false, nil); err != nil {
		t.Fatal(err)
	}
	msgs, _ := ch.Consume(q.Name, "", true, true, false, false, nil)

	ids := w.seed(t, note{tenant: "a", user: "m1", share: "k", eventType: "RESERVATION_REQUESTED"},
		note{tenant: "a", user: "m2", share: "k", eventType: "RESERVATION_REQUESTED"})
	r := w.do(t, "POST", "/v1/inbox/"+ids[1]+"/actions", w.token(t, "a", "m2", ""), `{"type":"REJECTED"}`)
	if r.code != 200 {
		t.Fatalf("act: %d %s", r.code, r.body)
	}
	pub.Kick()
	select {
	case m := <-msgs:
		var a inbox.Action
		if err := json.Unmarshal(m.Body, &a); err != nil || a.UserID != "m2" || a.Type != "REJECTED" || m.MessageId != a.ActionID ||
			m.DeliveryMode != amqp.Persistent || m.Headers["herald-tenant"] != "a" {
			t.Fatalf("message: %+v %s", m, m.Body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no action message within 30s")
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		var n int
		_ = w.db.Pool.QueryRow(ctx, `SELECT count(*) FROM notification_actions WHERE published_at IS NOT NULL`).Scan(&n)
		return n == 1
	}, "the action row is marked published")
}

// TestNackedActionsGoOutOnANewChannel makes the broker nack the action
// publisher's messages for real (a bound queue at its max length with
// overflow reject-publish) and shows the publisher keeps the rows
// unpublished, reopens its channel (as a quorum queue that lost its leader
// needs), and publishes them once the queue takes messages again.
func TestNackedActionsGoOutOnANewChannel(t *testing.T) {
	w := newWorld(t)
	b := testenv.RabbitMQ(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	ch := testenv.AMQPChannel(t, b.URL)
	if err := ch.ExchangeDeclare(inbox.ActionsExchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	full, err := ch.QueueDeclare("", false, true, true, false, amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(full.Name, "a.*.NACK_TEST.*", inbox.ActionsExchange, false, nil); err != nil {
		t.Fatal(err)
	}

	logs := &testenv.LogBuffer{}
	conn := broker.Dial(b.URL, broker.Topology{Exchange: "herald.deliveries"}, hclog.NewNullLogger())
	defer conn.Close()
	pub := inbox.NewPublisher(w.pools.Worker, conn, hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}))
	pub.Poll = 100 * time.Millisecond
	done := make(chan struct{})
	go func() { _ = pub.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	ids := w.seed(t, note{tenant: "a", user: "m1", share: "k", eventType: "NACK_TEST"},
		note{tenant: "a", user: "m2", share: "k", eventType: "NACK_TEST"})
	if r := w.do(t, "POST", "/v1/inbox/"+ids[0]+"/actions", w.token(t, "a", "m1", ""), `{"type":"CONFIRMED"}`); r.code != 200 {
		t.Fatalf("act: %d %s", r.code, r.body)
	}
	pub.Kick()
	testenv.Eventually(t, 30*time.Second, func() bool {
		return strings.Count(logs.String(), "broker nacked action messages") >= 2
	}, "the publisher saw the nacks and reopened its channel (twice)")
	var published int
	if err := w.db.Pool.QueryRow(ctx, `SELECT count(*) FROM notification_actions WHERE published_at IS NOT NULL`).Scan(&published); err != nil || published != 0 {
		t.Fatalf("a nacked action was marked published: %d %v", published, err)
	}

	// The queue takes messages again: the same action goes out, once.
	if _, err := ch.QueueDelete(full.Name, false, false, false); err != nil {
		t.Fatal(err)
	}
	q, _ := ch.QueueDeclare("", false, true, true, false, nil)
	if err := ch.QueueBind(q.Name, "a.*.NACK_TEST.*", inbox.ActionsExchange, false, nil); err != nil {
		t.Fatal(err)
	}
	msgs, _ := ch.Consume(q.Name, "", true, true, false, false, nil)
	select {
	case m := <-msgs:
		var a inbox.Action
		if err := json.Unmarshal(m.Body, &a); err != nil || a.UserID != "m1" || a.Type != "CONFIRMED" {
			t.Fatalf("message: %+v %s", m, m.Body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the nacked action was not published within 30s of the queue taking messages again")
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		_ = w.db.Pool.QueryRow(ctx, `SELECT count(*) FROM notification_actions WHERE published_at IS NOT NULL`).Scan(&published)
		return published == 1
	}, "the action row is marked published")
}

// TestActionsExchangeScopesTenants runs the action publisher against a real
// broker with a consumer account whose RabbitMQ topic permissions on
// herald.actions are limited to tenant a (^a\.): it binds a.# and receives
// a's action only; a binding of # (every tenant) and of tenant a.x's word
// are refused; b's and a.x's actions (a.x would match "a.#" if dots were
// written as they are) never reach its queue, although they were published.
func TestActionsExchangeScopesTenants(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := store.EnsureTenant(ctx, w.db.Pool, "a.x", ""); err != nil {
		t.Fatal(err)
	}
	secret, _ := auth.NewSecret()
	k := store.TokenKey{TenantID: "a.x", Kid: "k1", Alg: "HS256", Issuer: "https://ax.example", Key: secret}
	if err := store.AddTokenKey(ctx, w.db.Pool, k); err != nil {
		t.Fatal(err)
	}
	w.keys["a.x"] = k

	b := testenv.RabbitMQ(t)
	gch := testenv.AMQPChannel(t, b.URL)
	if err := gch.ExchangeDeclare(inbox.ActionsExchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	all, _ := gch.QueueDeclare("", false, true, true, false, nil)
	if err := gch.QueueBind(all.Name, "#", inbox.ActionsExchange, false, nil); err != nil {
		t.Fatal(err)
	}

	// The consumer account of tenant a: every ordinary permission on the
	// vhost, and topic permissions on herald.actions for a's keys only
	// (rabbitmqctl set_topic_permissions -p VHOST USER herald.actions
	// '^a\.' '^a\.'; eval unescapes once more, hence four backslashes).
	user, pass := testenv.RandomName("herald-acme-"), testenv.RandomName("pw-")
	if out, err := testenv.Rabbitmqctl("eval", fmt.Sprintf(`ok = rabbit_auth_backend_internal:add_user(<<"%[1]s">>, <<"%[2]s">>, <<"herald-test">>),
		ok = rabbit_auth_backend_internal:set_permissions(<<"%[1]s">>, <<"%[3]s">>, <<".*">>, <<".*">>, <<".*">>, <<"herald-test">>),
		ok = rabbit_auth_backend_internal:set_topic_permissions(<<"%[1]s">>, <<"%[3]s">>, <<"herald.actions">>, <<"^a\\\\.">>, <<"^a\\\\.">>, <<"herald-test">>).`,
		user, pass, b.VHost)); err != nil {
		t.Fatalf("add the tenant's broker user: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = testenv.Rabbitmqctl("delete_user", user) })
	u, _ := url.Parse(b.URL)
	u.User = url.UserPassword(user, pass)
	acme, err := amqp.Dial(u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer acme.Close()
	for _, key := range []string{"#", "*.#", "b.#", inbox.RoutingWord("a.x") + ".#"} {
		ch, _ := acme.Channel()
		q, err := ch.QueueDeclare("", false, true, true, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q.Name, key, inbox.ActionsExchange, false, nil); err == nil {
			t.Fatalf("tenant a's account bound %q on herald.actions", key)
		} else if !strings.Contains(err.Error(), "ACCESS_REFUSED") && !strings.Contains(err.Error(), "access to topic") {
			t.Fatalf("binding %q: %v", key, err)
		}
	}
	ach, _ := acme.Channel()
	mine, err := ach.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ach.QueueBind(mine.Name, "a.#", inbox.ActionsExchange, false, nil); err != nil {
		t.Fatalf("tenant a's account may bind a.#: %v", err)
	}

	conn := broker.Dial(b.URL, broker.Topology{Exchange: "herald.deliveries"}, hclog.NewNullLogger())
	defer conn.Close()
	pub := inbox.NewPublisher(w.pools.Worker, conn, hclog.NewNullLogger())
	done := make(chan struct{})
	go func() { _ = pub.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for _, ten := range []string{"b", "a.x", "a"} {
		ids := w.seed(t, note{tenant: ten, user: "m1", share: "k", eventType: "ORDER"}, note{tenant: ten, user: "m2", share: "k", eventType: "ORDER"})
		if r := w.do(t, "POST", "/v1/inbox/"+ids[0]+"/actions", w.token(t, ten, "m1", ""), `{"type":"CONFIRMED"}`); r.code != 200 {
			t.Fatalf("act as %s: %d %s", ten, r.code, r.body)
		}
	}
	pub.Kick()

	// Every tenant's action was published (the guest's # queue has them
	// all, each under its tenant's key), so whatever tenant a's queue holds
	// now is everything it will get.
	seen := map[string]string{}
	msgs, _ := gch.Consume(all.Name, "", true, true, false, false, nil)
	for len(seen) < 3 {
		select {
		case m := <-msgs:
			var a inbox.Action
			if err := json.Unmarshal(m.Body, &a); err != nil {
				t.Fatal(err)
			}
			seen[a.TenantID] = m.RoutingKey
		case <-time.After(30 * time.Second):
			t.Fatalf("not every action was published within 30s: %v", seen)
		}
	}
	want := map[string]string{"a": "a.default.ORDER.CONFIRMED", "b": "b.default.ORDER.CONFIRMED", "a.x": "a%2Ex.default.ORDER.CONFIRMED"}
	for ten, key := range want {
		if seen[ten] != key {
			t.Fatalf("tenant %s's action went out as %q, want %q", ten, seen[ten], key)
		}
	}
	var got []string
	for {
		m, ok, err := ach.Get(mine.Name, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		var a inbox.Action
		if err := json.Unmarshal(m.Body, &a); err != nil {
			t.Fatal(err)
		}
		got = append(got, a.TenantID)
	}
	if len(got) != 1 || got[0] != "a" {
		t.Fatalf("tenant a's queue received the actions of %v, want [a]", got)
	}
}

// TestActionSeqsCountTheTenantsOwn: the seq a tenant sees on its actions
// (and pages the feed by) counts its own actions only, 1, 2, ...: tenant
// b's actions between two of a's leave no gap in a's numbers, so neither
// learns the other's volume. Concurrent actions of one tenant (one from a
// project-limited token) get distinct numbers without gaps.
func TestActionSeqsCountTheTenantsOwn(t *testing.T) {
	w := newWorld(t)
	if err := store.EnsureProject(context.Background(), w.db.Pool, "a", "shop", ""); err != nil {
		t.Fatal(err)
	}
	act := func(ten, share, project string) {
		t.Helper()
		ids := w.seed(t, note{tenant: ten, user: "m1", share: share, project: project}, note{tenant: ten, user: "m2", share: share, project: project})
		if r := w.do(t, "POST", "/v1/inbox/"+ids[0]+"/actions", w.token(t, ten, "m1", project), `{"type":"CONFIRMED"}`); r.code != 200 {
			t.Fatalf("act as %s: %d %s", ten, r.code, r.body)
		}
	}
	for i, ten := range []string{"b", "a", "b", "b", "a", "b"} {
		act(ten, fmt.Sprintf("k%d", i), "")
	}
	// Eight of a's at once, two of them from a token of project shop.
	notes := make([][]string, 8)
	for i := range notes {
		project := ""
		if i%4 == 0 {
			project = "shop"
		}
		notes[i] = append(w.seed(t, note{tenant: "a", user: "m1", share: fmt.Sprintf("c%d", i), project: project},
			note{tenant: "a", user: "m2", share: fmt.Sprintf("c%d", i), project: project}), project)
	}
	var wg sync.WaitGroup
	codes := make([]int, len(notes))
	for i, n := range notes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = w.do(t, "POST", "/v1/inbox/"+n[0]+"/actions", w.token(t, "a", "m1", n[2]), `{"type":"REJECTED"}`).code
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Fatalf("concurrent action %d: %d", i, c)
		}
	}
	feed := func(ten string, after int64) ([]int64, int64) {
		t.Helper()
		r := w.do(t, "GET", fmt.Sprintf("/v1/actions?after=%d&limit=5", after), w.apikey[ten], "")
		var f struct {
			Items     []inbox.Action `json:"items"`
			NextAfter int64          `json:"next_after"`
		}
		if err := json.Unmarshal(r.body, &f); err != nil || r.code != 200 {
			t.Fatalf("feed of %s: %d %s", ten, r.code, r.body)
		}
		var seqs []int64
		for _, a := range f.Items {
			seqs = append(seqs, a.Seq)
		}
		return seqs, f.NextAfter
	}
	for ten, want := range map[string]int64{"a": 10, "b": 4} {
		var all []int64
		after := int64(0)
		for {
			seqs, next := feed(ten, after)
			if len(seqs) == 0 {
				break
			}
			all, after = append(all, seqs...), next
		}
		if int64(len(all)) != want {
			t.Fatalf("tenant %s's feed: %v, want 1..%d", ten, all, want)
		}
		for i, s := range all {
			if s != int64(i+1) {
				t.Fatalf("tenant %s's feed numbers its actions %v, want 1..%d", ten, all, want)
			}
		}
	}
}
