package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/heraldhq/herald/plugins/internal/channeltest"
	"github.com/heraldhq/herald/sdk"
)

const testSecret = "herald-test-secret-0123456789abcdef"

// startPlugin configures a websocket channel on 127.0.0.1:0 and closes it
// when the test ends.
func startPlugin(t *testing.T, extra map[string]any) *WebSocket {
	t.Helper()
	cfg := map[string]any{FieldListen: "127.0.0.1:0", FieldJWTSecret: testSecret}
	for k, v := range extra {
		cfg[k] = v
	}
	w := New().(*WebSocket)
	if err := w.Configure(context.Background(), sdk.ConfigureRequest{ProviderName: "test", Config: cfg}); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func token(t *testing.T, secret string, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func userToken(t *testing.T, tenant, user string) string {
	return token(t, testSecret, jwt.MapClaims{
		"tenant": tenant, "sub": user, "user_type": "staff", "exp": time.Now().Add(time.Hour).Unix(),
	})
}

func wsURL(w *WebSocket) string { return "ws://" + w.Addr() + DefaultPath }

// dialRaw opens a WebSocket with the token in the query string.
func dialRaw(ctx context.Context, w *WebSocket, tok string) (*websocket.Conn, *http.Response, error) {
	return websocket.Dial(ctx, wsURL(w)+"?token="+tok, nil)
}

// dial connects as tenant/user and waits for the "ready" frame, after which
// the session is registered.
func dial(t *testing.T, w *WebSocket, tenant, user string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := dialRaw(ctx, w, userToken(t, tenant, user))
	if err != nil {
		t.Fatalf("dial %s/%s: %v", tenant, user, err)
	}
	conn.SetReadLimit(1 << 20)
	t.Cleanup(func() { _ = conn.CloseNow() })
	got := readFrame(t, conn)
	if diff := cmp.Diff(frame{Type: FrameReady, Tenant: tenant, UserID: user}, got); diff != "" {
		t.Fatalf("first frame (-want +got):\n%s", diff)
	}
	return conn
}

func readFrame(t *testing.T, conn *websocket.Conn) frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := conn.Read(ctx)
	if err != nil {
		t.Fatalf("read frame: %v", err)
	}
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("frame %q: %v", b, err)
	}
	return f
}

func delivery(id, tenant, user string) sdk.Delivery {
	return sdk.Delivery{
		DeliveryID:     id,
		IdempotencyKey: "idem-" + id,
		TenantID:       tenant,
		EventType:      "RESERVATION_REQUESTED",
		NotificationID: "n-" + id,
		Severity:       "info",
		Recipient:      sdk.Recipient{UserID: user},
		Content: sdk.Content{
			Title: "New reservation", Body: "4 people at 20:00",
			Data: json.RawMessage(`{"reservation_id":"r-42"}`),
		},
	}
}

func send(t *testing.T, w *WebSocket, batch ...sdk.Delivery) []sdk.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := w.Send(ctx, batch)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	return res
}

// readUntilClosed reads (and discards) frames in the background and
// delivers the error that ended the connection, or a timeout after 20s.
func readUntilClosed(conn *websocket.Conn) <-chan error {
	end := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for range 100000 {
			if _, _, err := conn.Read(ctx); err != nil {
				end <- err
				return
			}
		}
		end <- errors.New("connection still open after 100000 frames")
	}()
	return end
}

// eventually polls cond every 10ms until it holds or the deadline passes.
func eventually(t *testing.T, deadline time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %v waiting for %s", deadline, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var ignoreReason = cmpopts.IgnoreFields(sdk.Result{}, "Reason")

func TestSendReachesEverySessionOfTheUser(t *testing.T) {
	t.Parallel()
	w := startPlugin(t, nil)
	a1 := dial(t, w, "t1", "u1")
	a2 := dial(t, w, "t1", "u1")
	otherTenant := dial(t, w, "t2", "u1")
	otherUser := dial(t, w, "t1", "u2")

	got := send(t, w,
		delivery("d1", "t1", "u1"),
		delivery("d2", "t1", "u3"),
		sdk.Delivery{DeliveryID: "d3", TenantID: "t1"},
	)
	want := []sdk.Result{
		sdk.Sent("d1", "sessions=2"),
		sdk.Permanent("d2", "", CodeOffline),
		sdk.Permanent("d3", "", CodeNoAddress),
	}
	if diff := cmp.Diff(want, got, ignoreReason); diff != "" {
		t.Fatalf("results (-want +got):\n%s", diff)
	}
	wantFrame := frame{
		Type: FrameNotification, DeliveryID: "d1", NotificationID: "n-d1", IdempotencyKey: "idem-d1",
		EventType: "RESERVATION_REQUESTED", Title: "New reservation", Body: "4 people at 20:00",
		Data: json.RawMessage(`{"reservation_id":"r-42"}`), Severity: "info",
	}
	for i, c := range []*websocket.Conn{a1, a2} {
		if diff := cmp.Diff(wantFrame, readFrame(t, c)); diff != "" {
			t.Errorf("session %d frame (-want +got):\n%s", i+1, diff)
		}
	}

	// The same user id in another tenant, and another user of the tenant,
	// got nothing: the first frame they see is the one sent to them next.
	got = send(t, w, delivery("d4", "t2", "u1"), delivery("d5", "t1", "u2"))
	if diff := cmp.Diff([]sdk.Result{sdk.Sent("d4", "sessions=1"), sdk.Sent("d5", "sessions=1")}, got, ignoreReason); diff != "" {
		t.Fatalf("results (-want +got):\n%s", diff)
	}
	if f := readFrame(t, otherTenant); f.DeliveryID != "d4" {
		t.Errorf("tenant t2's u1 first got %q, want d4 (tenant isolation)", f.DeliveryID)
	}
	if f := readFrame(t, otherUser); f.DeliveryID != "d5" {
		t.Errorf("t1/u2 first got %q, want d5", f.DeliveryID)
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	w := startPlugin(t, map[string]any{FieldJWTIssuer: "herald", FieldJWTAudience: "herald-ws"})
	valid := jwt.MapClaims{"tenant": "t1", "sub": "u1", "iss": "herald", "aud": "herald-ws", "exp": time.Now().Add(time.Hour).Unix()}
	with := func(k string, v any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for ck, cv := range valid {
			c[ck] = cv
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	hs384, err := jwt.NewWithClaims(jwt.SigningMethodHS384, valid).SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		query, header string
		wantStatus    int
	}{
		"token in query":      {query: token(t, testSecret, valid), wantStatus: http.StatusSwitchingProtocols},
		"token in header":     {header: "Bearer " + token(t, testSecret, valid), wantStatus: http.StatusSwitchingProtocols},
		"no token":            {wantStatus: http.StatusUnauthorized},
		"wrong secret":        {query: token(t, "another-secret-0123456789abcdef-xyz", valid), wantStatus: http.StatusUnauthorized},
		"expired":             {query: token(t, testSecret, with("exp", time.Now().Add(-time.Minute).Unix())), wantStatus: http.StatusUnauthorized},
		"no expiry":           {query: token(t, testSecret, with("exp", nil)), wantStatus: http.StatusUnauthorized},
		"no tenant":           {query: token(t, testSecret, with("tenant", nil)), wantStatus: http.StatusUnauthorized},
		"no subject":          {query: token(t, testSecret, with("sub", nil)), wantStatus: http.StatusUnauthorized},
		"wrong issuer":        {query: token(t, testSecret, with("iss", "someone")), wantStatus: http.StatusUnauthorized},
		"wrong audience":      {query: token(t, testSecret, with("aud", "api")), wantStatus: http.StatusUnauthorized},
		"other algorithm":     {query: hs384, wantStatus: http.StatusUnauthorized},
		"garbage":             {query: "not.a.jwt", wantStatus: http.StatusUnauthorized},
		"basic auth header":   {header: "Basic dTE6cGFzcw==", wantStatus: http.StatusUnauthorized},
		"bearer without body": {header: "Bearer", wantStatus: http.StatusUnauthorized},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			u := wsURL(w)
			if tc.query != "" {
				u += "?token=" + tc.query
			}
			opts := &websocket.DialOptions{HTTPHeader: http.Header{}}
			if tc.header != "" {
				opts.HTTPHeader.Set("Authorization", tc.header)
			}
			conn, resp, err := websocket.Dial(ctx, u, opts)
			if conn != nil {
				defer conn.CloseNow()
			}
			if resp == nil {
				t.Fatalf("dial: no HTTP response: %v", err)
			}
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("status = %d (%v), want %d", resp.StatusCode, err, tc.wantStatus)
			}
			if tc.wantStatus == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
		})
	}
}

func TestSlowConsumerIsDroppedWithoutBlockingOthers(t *testing.T) {
	t.Parallel()
	w := startPlugin(t, map[string]any{FieldSendBuffer: 2, FieldWriteTimeout: "30s"})
	fast := dial(t, w, "t1", "u1")
	slow := dial(t, w, "t1", "u1") // never reads again

	// The fast session reads everything in the background and reports
	// each delivery id; the loop below waits for it, as a healthy browser
	// keeps up with the notifications it is sent.
	fastGot := make(chan string, 16)
	fastErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for {
			_, b, err := fast.Read(ctx)
			if err != nil {
				fastErr <- err
				return
			}
			var f frame
			if err := json.Unmarshal(b, &f); err != nil {
				fastErr <- err
				return
			}
			fastGot <- f.DeliveryID
		}
	}()
	awaitFast := func(id string) {
		t.Helper()
		select {
		case got := <-fastGot:
			if got != id {
				t.Fatalf("fast session got %q, want %q", got, id)
			}
		case err := <-fastErr:
			t.Fatalf("fast session read: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatalf("fast session did not receive %q", id)
		}
	}

	big := strings.Repeat("x", 64<<10)
	sent, slowest := 0, time.Duration(0)
	dropped := false
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < 5000 && time.Now().Before(deadline); i++ {
		d := delivery("d"+strconv.Itoa(i), "t1", "u1")
		d.Content.Body = big
		start := time.Now()
		res := send(t, w, d)
		slowest = max(slowest, time.Since(start))
		sent++
		awaitFast(d.DeliveryID)
		if res[0].ProviderMessageID == "sessions=1" {
			dropped = true
			break
		}
		if diff := cmp.Diff(sdk.Sent(d.DeliveryID, "sessions=2"), res[0]); diff != "" {
			t.Fatalf("send %d (-want +got):\n%s", i, diff)
		}
	}
	if !dropped {
		t.Fatalf("slow session never dropped after %d sends", sent)
	}
	if slowest > 2*time.Second {
		t.Errorf("slowest Send took %v; a slow browser must not block Send", slowest)
	}
	key := sessionKey("t1", "u1")
	eventually(t, 15*time.Second, "the slow session to be unregistered", func() bool {
		srv, err := w.server()
		return err == nil && srv.hub.countFor(key) == 1
	})

	if res := send(t, w, delivery("after", "t1", "u1")); res[0].ProviderMessageID != "sessions=1" {
		t.Fatalf("result after the drop = %+v, want sessions=1", res[0])
	}
	awaitFast("after")

	// The slow browser finds its connection closed once it reads again.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var readErr error
	for range 10000 {
		if _, _, readErr = slow.Read(ctx); readErr != nil {
			break
		}
	}
	if readErr == nil || errors.Is(readErr, context.DeadlineExceeded) {
		t.Errorf("slow session read ended with %v, want the connection closed", readErr)
	}
}

func TestUnresponsiveSessionIsDroppedByPing(t *testing.T) {
	t.Parallel()
	w := startPlugin(t, map[string]any{FieldPingInterval: "1s"})
	alive := dial(t, w, "t1", "alive")
	// The alive browser keeps reading, so it answers pings.
	aliveFrames := make(chan frame, 4)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for {
			_, b, err := alive.Read(ctx)
			if err != nil {
				close(aliveFrames)
				return
			}
			var f frame
			if json.Unmarshal(b, &f) == nil {
				aliveFrames <- f
			}
		}
	}()
	_ = dial(t, w, "t1", "mute") // never reads again, so never answers pings

	srv, err := w.server()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the mute session to be dropped", func() bool {
		return srv.hub.countFor(sessionKey("t1", "mute")) == 0
	})
	if n := srv.hub.countFor(sessionKey("t1", "alive")); n != 1 {
		t.Errorf("alive sessions = %d after the ping round, want 1", n)
	}
	res := send(t, w, delivery("d1", "t1", "mute"), delivery("d2", "t1", "alive"))
	want := []sdk.Result{sdk.Permanent("d1", "", CodeOffline), sdk.Sent("d2", "sessions=1")}
	if diff := cmp.Diff(want, res, ignoreReason); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	select {
	case f := <-aliveFrames:
		if f.DeliveryID != "d2" {
			t.Errorf("alive session got %+v, want d2", f)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("alive session did not receive d2")
	}
}

func TestCloseEndsSessions(t *testing.T) {
	t.Parallel()
	w := startPlugin(t, nil)
	c1 := dial(t, w, "t1", "u1")
	c2 := dial(t, w, "t1", "u2")
	h, err := w.Health(context.Background())
	if err != nil || !h.Healthy || !strings.Contains(h.Message, "2 open sessions") {
		t.Fatalf("Health = %+v, %v; want healthy with 2 open sessions", h, err)
	}
	addr := w.Addr()
	// Browsers read all the time; so do these, to answer the close handshake.
	ends := []<-chan error{readUntilClosed(c1), readUntilClosed(c2)}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, end := range ends {
		if err := <-end; websocket.CloseStatus(err) != websocket.StatusGoingAway {
			t.Errorf("session %d ended with %v, want going away", i+1, err)
		}
	}
	if _, err := w.Send(context.Background(), []sdk.Delivery{delivery("d1", "t1", "u1")}); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("Send after Close: %v, want ErrNotConfigured", err)
	}
	if h, _ := w.Health(context.Background()); h.Healthy {
		t.Errorf("Health after Close = %+v, want unhealthy", h)
	}
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		_ = conn.Close()
		t.Errorf("server still accepts connections on %s after Close", addr)
	}
}

func TestReconfigureMovesSessionsToTheNewServer(t *testing.T) {
	t.Parallel()
	w := startPlugin(t, nil)
	oldEnd := readUntilClosed(dial(t, w, "t1", "u1"))
	cfg := map[string]any{FieldListen: "127.0.0.1:0", FieldJWTSecret: testSecret, FieldSendBuffer: 8}
	if err := w.Configure(context.Background(), sdk.ConfigureRequest{Config: cfg}); err != nil {
		t.Fatalf("second Configure: %v", err)
	}
	if err := <-oldEnd; websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Errorf("old session ended with %v, want going away", err)
	}
	fresh := dial(t, w, "t1", "u1")
	if res := send(t, w, delivery("d1", "t1", "u1")); res[0].ProviderMessageID != "sessions=1" {
		t.Fatalf("result = %+v, want sessions=1", res[0])
	}
	if f := readFrame(t, fresh); f.DeliveryID != "d1" {
		t.Errorf("new session got %q, want d1", f.DeliveryID)
	}
}

func TestMaxSessionsPerUser(t *testing.T) {
	t.Parallel()
	w := startPlugin(t, map[string]any{FieldMaxSessionsPerUser: 1})
	_ = dial(t, w, "t1", "u1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, resp, err := dialRaw(ctx, w, userToken(t, "t1", "u1"))
	if conn != nil {
		defer conn.CloseNow()
	}
	if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("second session: resp %v, err %v; want 429", resp, err)
	}
	_ = dial(t, w, "t1", "u2") // other users are not affected
}

func TestSendBeforeConfigure(t *testing.T) {
	t.Parallel()
	channeltest.SendBeforeConfigure(t, New(), delivery("d1", "t1", "u1"), ErrNotConfigured)
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	channeltest.Describe(t, New(), channeltest.Description{ChannelType: "WEBSOCKET", Provider: "websocket", PluginVersion: "0.1.0", Class: sdk.BestEffort, MaxBatch: 500})
}

func TestConfigureRefusesBadConfig(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Close() })
	tests := map[string]struct {
		edit      func(map[string]any)
		wantField string
	}{
		"unknown key":       {edit: func(m map[string]any) { m["port"] = 8090 }, wantField: "port"},
		"missing secret":    {edit: func(m map[string]any) { delete(m, FieldJWTSecret) }, wantField: FieldJWTSecret},
		"short secret":      {edit: func(m map[string]any) { m[FieldJWTSecret] = "short" }, wantField: FieldJWTSecret},
		"listen no port":    {edit: func(m map[string]any) { m[FieldListen] = "127.0.0.1" }, wantField: FieldListen},
		"listen in use":     {edit: func(m map[string]any) { m[FieldListen] = busy.Addr().String() }, wantField: FieldListen},
		"relative path":     {edit: func(m map[string]any) { m[FieldPath] = "ws" }, wantField: FieldPath},
		"zero send buffer":  {edit: func(m map[string]any) { m[FieldSendBuffer] = 0 }, wantField: FieldSendBuffer},
		"tiny ping":         {edit: func(m map[string]any) { m[FieldPingInterval] = "10ms" }, wantField: FieldPingInterval},
		"origins not list":  {edit: func(m map[string]any) { m[FieldAllowedOrigins] = 3 }, wantField: FieldAllowedOrigins},
		"max sessions zero": {edit: func(m map[string]any) { m[FieldMaxSessionsPerUser] = 0 }, wantField: FieldMaxSessionsPerUser},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := map[string]any{FieldListen: "127.0.0.1:0", FieldJWTSecret: testSecret}
			tc.edit(cfg)
			w := New().(*WebSocket)
			defer w.Close()
			err := w.Configure(context.Background(), sdk.ConfigureRequest{Config: cfg})
			var ce *sdk.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Configure error = %v, want *sdk.ConfigError", err)
			}
			if diff := cmp.Diff(tc.wantField, ce.Field); diff != "" {
				t.Errorf("ConfigError.Field (-want +got):\n%s", diff)
			}
		})
	}
}
