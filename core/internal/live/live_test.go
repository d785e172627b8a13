package live_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/core/internal/api/openapitest"
	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/live"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/internal/liveproto"
	"github.com/jackc/pgx/v5"
)

// cluster is two daemons' live gateways on one database and broker vhost,
// each behind a real HTTP server.
type cluster struct {
	db      *testenv.DB
	amqpURL string
	keys    map[string]store.TokenKey // tenant -> HS256 key
	urls    []string
	gws     []*live.Server
}

func newCluster(t *testing.T, n int, cfg live.Config) *cluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := &cluster{db: testenv.Postgres(t), amqpURL: testenv.RabbitMQ(t).URL, keys: map[string]store.TokenKey{}}
	for _, ten := range []string{"a", "b"} {
		if err := store.EnsureTenant(ctx, c.db.Pool, ten, ""); err != nil {
			t.Fatal(err)
		}
		secret, _ := auth.NewSecret()
		k := store.TokenKey{TenantID: ten, Kid: "k1", Alg: "HS256", Issuer: "https://" + ten + ".example", Key: secret}
		if err := store.AddTokenKey(ctx, c.db.Pool, k); err != nil {
			t.Fatal(err)
		}
		c.keys[ten] = k
	}
	api, err := store.NewPoolWith(ctx, c.db.URL, store.PoolOptions{MaxConns: 4, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	for range n {
		conn := broker.Dial(c.amqpURL, broker.Topology{Exchange: "herald.deliveries"}, hclog.NewNullLogger())
		t.Cleanup(conn.Close)
		gw := live.New(cfg, api, auth.NewVerifier(api, auth.Config{Audience: "herald"}), conn, hclog.NewNullLogger())
		done := make(chan struct{})
		go func() { _ = gw.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		if err := gw.Ready(rctx); err != nil {
			t.Fatalf("live gateway not consuming: %v", err)
		}
		rcancel()
		srv := httptest.NewServer(gw.Handler())
		t.Cleanup(srv.Close)
		openapitest.Watch(t, srv.URL)
		c.gws, c.urls = append(c.gws, gw), append(c.urls, srv.URL)
	}
	return c
}

func (c *cluster) token(t *testing.T, tenant, user string) string {
	t.Helper()
	tok, err := auth.Issue(c.keys[tenant], "herald", auth.User{UserID: user, UserType: "STAFF"}, 5*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// ticket asks daemon i for a ticket with token.
func (c *cluster) ticket(t *testing.T, i int, token string) (live.Ticket, int) {
	t.Helper()
	req, _ := http.NewRequest("POST", c.urls[i]+"/v1/live/tickets", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tk live.Ticket
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &tk)
	return tk, resp.StatusCode
}

// browser is a WebSocket client recording frames.
type browser struct {
	conn   *websocket.Conn
	mu     sync.Mutex
	frames []map[string]any
	closed chan struct{}
}

// open connects user to daemon i with a fresh ticket and waits for ready.
func (c *cluster) open(t *testing.T, i int, tenant, user string) *browser {
	t.Helper()
	tk, code := c.ticket(t, i, c.token(t, tenant, user))
	if code != http.StatusCreated {
		t.Fatalf("ticket: %d", code)
	}
	return dial(t, c.urls[i], tk.Ticket)
}

func dial(t *testing.T, base, ticket string) *browser {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/v1/live?ticket="+ticket, nil)
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		t.Fatalf("dial: %v (HTTP %d)", err, code)
	}
	b := &browser{conn: conn, closed: make(chan struct{})}
	_, msg, err := conn.Read(ctx)
	if err != nil || !strings.Contains(string(msg), `"ready"`) {
		t.Fatalf("ready frame: %s %v", msg, err)
	}
	go func() {
		defer close(b.closed)
		for {
			_, msg, err := conn.Read(context.Background())
			if err != nil {
				return
			}
			var f map[string]any
			_ = json.Unmarshal(msg, &f)
			b.mu.Lock()
			b.frames = append(b.frames, f)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = conn.CloseNow() })
	return b
}

func (b *browser) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.frames)
}

// publisher publishes like the WEBSOCKET plugin: mandatory, with confirms,
// reporting whether the broker returned the message (offline).
type publisher struct {
	ch   *amqp.Channel
	rets chan amqp.Return
}

func newPublisher(t *testing.T, url string) *publisher {
	t.Helper()
	ch := testenv.AMQPChannel(t, url)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return &publisher{ch: ch, rets: ch.NotifyReturn(make(chan amqp.Return, 16))}
}

// send publishes a frame for the user and reports whether it was routed.
func (p *publisher) send(t *testing.T, tenant, user, body string) bool {
	t.Helper()
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(context.Background(), liveproto.DefaultExchange,
		liveproto.RouteKey(tenant, user), true, false, liveproto.Message(tenant, user, []byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(context.Background()); err != nil || !ok {
		t.Fatalf("confirm: %v %v", ok, err)
	}
	select {
	case <-p.rets:
		return false
	default:
		return true
	}
}

func TestTicketsAreOneTimeAndTokensChecked(t *testing.T) {
	c := newCluster(t, 1, live.Config{})
	tk, code := c.ticket(t, 0, c.token(t, "a", "alice"))
	if code != http.StatusCreated || len(tk.Ticket) != 64 || !strings.HasPrefix(tk.URL, "/v1/live?ticket=") {
		t.Fatalf("ticket: %d %+v", code, tk)
	}
	dial(t, c.urls[0], tk.Ticket)
	// Replayed: refused.
	resp, err := http.Get(c.urls[0] + "/v1/live?ticket=" + tk.Ticket)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("replayed ticket: %d", resp.StatusCode)
	}
	for name, tok := range map[string]string{
		"none":             "",
		"garbage":          "x.y.z",
		"b's key naming a": mustIssue(t, store.TokenKey{TenantID: "a", Kid: "k1", Alg: "HS256", Issuer: "https://a.example", Key: c.keys["b"].Key}),
	} {
		if _, code := c.ticket(t, 0, tok); code != http.StatusUnauthorized {
			t.Errorf("token %s: %d", name, code)
		}
	}
	for name, q := range map[string]string{"no ticket": "", "unknown": "?ticket=00", "long": "?ticket=" + strings.Repeat("a", 200)} {
		resp, err := http.Get(c.urls[0] + "/v1/live" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %d", name, resp.StatusCode)
		}
	}
}

func mustIssue(t *testing.T, k store.TokenKey) string {
	t.Helper()
	s, err := auth.Issue(k, "herald", auth.User{UserID: "alice"}, time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestExpiredTicketIsRefused(t *testing.T) {
	c := newCluster(t, 1, live.Config{TicketTTL: time.Millisecond})
	tk, code := c.ticket(t, 0, c.token(t, "a", "alice"))
	if code != http.StatusCreated {
		t.Fatal(code)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		resp, err := http.Get(c.urls[0] + "/v1/live?ticket=" + tk.Ticket)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusUnauthorized
	}, "an expired ticket is refused")
}

// TestUpdatesReachTheUserOnAnyDaemon: alice's sessions sit on daemon 1 and
// daemon 0 holds none of hers; a message for her reaches both of her
// sessions, none of another tenant's alice, and comes back once she has
// closed them all.
func TestUpdatesReachTheUserOnAnyDaemon(t *testing.T) {
	c := newCluster(t, 2, live.Config{})
	s1 := c.open(t, 1, "a", "alice")
	s2 := c.open(t, 1, "a", "alice")
	otherAlice := c.open(t, 0, "b", "alice")
	bob := c.open(t, 0, "a", "bob")
	p := newPublisher(t, c.amqpURL)
	if !p.send(t, "a", "alice", `{"type":"notification","title":"hi"}`) {
		t.Fatal("a message for a connected user came back")
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return s1.count() == 1 && s2.count() == 1 },
		"both of alice's sessions get the frame")
	if otherAlice.count() != 0 || bob.count() != 0 {
		t.Fatal("another user's session got alice's frame")
	}
	if p.send(t, "a", "carol", `{"type":"notification"}`) {
		t.Fatal("a message for a user with no session was routed")
	}
	_ = s1.conn.Close(websocket.StatusNormalClosure, "")
	_ = s2.conn.Close(websocket.StatusNormalClosure, "")
	testenv.Eventually(t, 10*time.Second, func() bool { return !p.send(t, "a", "alice", `{"type":"x"}`) },
		"with alice's sessions closed, her messages come back (offline)")
	// The binding goes when the last session's handler releases it, just
	// before the hub drops the session: wait for that too.
	testenv.Eventually(t, 10*time.Second, func() bool { return c.gws[1].Sessions() == 0 },
		"daemon 1 holds no sessions once alice closed hers")
}

func TestForeignOriginIsRefused(t *testing.T) {
	c := newCluster(t, 1, live.Config{})
	tk, _ := c.ticket(t, 0, c.token(t, "a", "alice"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(c.urls[0], "http")+"/v1/live?ticket="+tk.Ticket,
		&websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://evil.example"}}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("foreign origin: %v %v", err, resp)
	}
	// A plain GET (no upgrade) with a good ticket is a 426 problem document
	// (checked against the OpenAPI document by the cluster's Watch).
	tk, _ = c.ticket(t, 0, c.token(t, "a", "alice"))
	resp, err = http.Get(c.urls[0] + "/v1/live?ticket=" + tk.Ticket)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("GET /v1/live without an upgrade: %s %s %s", resp.Status, resp.Header.Get("Content-Type"), body)
	}
}

// TestProjectSessionsGetTheirProjectOnly: a session opened with a token
// limited to project p1 gets only the frames about the user's p1
// notifications (an inbox frame keeps its p1 ids and loses the unread
// count, which counts every project); frames about p2, about another
// user's notification, or naming no notification at all reach only the
// user's sessions of p2 or of every project.
func TestProjectSessionsGetTheirProjectOnly(t *testing.T) {
	c := newCluster(t, 1, live.Config{})
	ctx := context.Background()
	ids := map[string]string{}
	for _, n := range []struct{ name, user, project string }{{"n1", "alice", "p1"}, {"n2", "alice", "p2"}, {"bob1", "bob", "p1"}} {
		if err := store.EnsureProject(ctx, c.db.Pool, "a", n.project, ""); err != nil {
			t.Fatal(err)
		}
		id := uuid.Must(uuid.NewV7()).String()
		nn := store.NewNotification{ID: id, TenantID: "a", ProjectID: n.project, EventID: "ev-" + n.name, UserID: n.user,
			EventType: "RESERVATION", Title: "title", Severity: "info", CreatedAt: time.Now()}
		if err := pgx.BeginFunc(ctx, c.db.Pool, func(tx pgx.Tx) error {
			_, _, err := store.InsertFanout(ctx, tx, []store.NewNotification{nn}, nil)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		ids[n.name] = id
	}
	open := func(project string) *browser {
		tok, err := auth.Issue(c.keys["a"], "herald", auth.User{UserID: "alice", UserType: "STAFF", Project: project}, 5*time.Minute, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		tk, code := c.ticket(t, 0, tok)
		if code != http.StatusCreated {
			t.Fatalf("ticket for project %q: %d", project, code)
		}
		return dial(t, c.urls[0], tk.Ticket)
	}
	p1, p2, every := open("p1"), open("p2"), open("")
	p := newPublisher(t, c.amqpURL)
	frames := []string{
		`{"type":"notification","notification_id":"` + ids["n2"] + `","title":"p2 only"}`,
		`{"type":"notification","notification_id":"` + ids["bob1"] + `","title":"bob's"}`,
		`{"type":"notification","title":"no id"}`,
		`{"type":"notification","notification_id":"` + strings.ToUpper(ids["n1"]) + `","title":"not canonical"}`,
		`{"type":"inbox","notification_ids":["` + ids["n2"] + `","nonsense"],"unread":7}`,
		`not json`,
		`{"type":"inbox","notification_ids":["` + ids["n1"] + `","` + ids["n2"] + `"],"unread":7}`,
		`{"type":"notification","notification_id":"` + ids["n1"] + `","title":"p1 last"}`,
	}
	for _, f := range frames {
		if !p.send(t, "a", "alice", f) {
			t.Fatal("a frame for a connected user came back")
		}
	}
	// One queue, one consumer: once p1 has the last frame, every earlier
	// one was decided.
	testenv.Eventually(t, 10*time.Second, func() bool { return p1.count() >= 2 }, "p1's session gets its frames")
	testenv.Eventually(t, 10*time.Second, func() bool { return every.count() == len(frames) }, "the unscoped session gets every frame")
	testenv.Eventually(t, 10*time.Second, func() bool { return p2.count() >= 3 }, "p2's session gets its frames")
	get := func(b *browser) string {
		b.mu.Lock()
		defer b.mu.Unlock()
		out, _ := json.Marshal(b.frames)
		return string(out)
	}
	want1 := `[{"notification_ids":["` + ids["n1"] + `"],"type":"inbox"},{"notification_id":"` + ids["n1"] + `","title":"p1 last","type":"notification"}]`
	if got := get(p1); got != want1 {
		t.Fatalf("p1's session got\n%s\nwant\n%s", got, want1)
	}
	want2 := `[{"notification_id":"` + ids["n2"] + `","title":"p2 only","type":"notification"},{"notification_ids":["` + ids["n2"] + `"],"type":"inbox"},` +
		`{"notification_ids":["` + ids["n2"] + `"],"type":"inbox"}]`
	if got := get(p2); got != want2 {
		t.Fatalf("p2's session got\n%s\nwant\n%s", got, want2)
	}
}
