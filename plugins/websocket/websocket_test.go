package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/liveproto"
	"github.com/heraldhq/herald/plugins/internal/channeltest"
	"github.com/heraldhq/herald/sdk"
)

// brokerURL is the test broker (the scripts' default).
func brokerURL() string {
	if u := os.Getenv("HERALD_AMQP_URL"); u != "" {
		return u
	}
	return DefaultAMQPURL
}

func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// gateway stands in for one daemon's live gateway: a queue of its own on
// the live exchange, bound to the route keys of the users it holds
// sessions of, recording what arrives.
type gateway struct {
	ch    *amqp.Channel
	queue string
	mu    sync.Mutex
	got   []amqp.Delivery
}

func newGateway(t *testing.T, exchange string, users ...[2]string) *gateway {
	t.Helper()
	conn, err := amqp.Dial(brokerURL())
	if err != nil {
		if testingShort() {
			t.Skipf("RabbitMQ unavailable: %v", err)
		}
		t.Fatalf("RabbitMQ unavailable (scripts/servers.sh up): %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := liveproto.DeclareExchange(ch, exchange); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.ExchangeDelete(exchange, false, false) })
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if err := ch.QueueBind(q.Name, liveproto.RouteKey(u[0], u[1]), exchange, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{ch: ch, queue: q.Name}
	go func() {
		for m := range msgs {
			g.mu.Lock()
			g.got = append(g.got, m)
			g.mu.Unlock()
		}
	}()
	return g
}

func (g *gateway) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.got)
}

func (g *gateway) wait(t *testing.T, n int) []amqp.Delivery {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for g.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("gateway got %d messages, want %d", g.count(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]amqp.Delivery(nil), g.got...)
}

func testingShort() bool { return testing.Short() }

func configured(t *testing.T, exchange string) *WebSocket {
	t.Helper()
	w := New().(*WebSocket)
	_, err := w.Configure(context.Background(), sdk.ConfigureRequest{ProviderName: "test",
		Config: map[string]any{FieldAMQPURL: brokerURL(), FieldExchange: exchange}})
	if err != nil {
		t.Fatalf("Configure: %v", err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func delivery(id, tenant, user string) sdk.Delivery {
	return sdk.Delivery{DeliveryID: id, IdempotencyKey: "idem-" + id, NotificationID: "n-" + id, TenantID: tenant,
		EventType: "RESERVATION_REQUESTED", Severity: "info",
		Recipient: sdk.Recipient{UserID: user},
		Content:   sdk.Content{Title: "New reservation", Body: "Rossi, 4 people", Data: json.RawMessage(`{"pax":4}`)}}
}

// TestSendReachesEveryGatewayOfTheUser: two daemons hold sessions of u1;
// both get the frame, with the user in the headers; a third daemon that
// holds only u2 gets nothing.
func TestSendReachesEveryGatewayOfTheUser(t *testing.T) {
	t.Parallel()
	ex := randomName("herald.live.test-")
	g1, g2 := newGateway(t, ex, [2]string{"t1", "u1"}), newGateway(t, ex, [2]string{"t1", "u1"})
	other := newGateway(t, ex, [2]string{"t1", "u2"})
	w := configured(t, ex)
	resResp, err := w.Send(context.Background(), sdk.SendRequest{Deliveries: []sdk.Delivery{delivery("d1", "t1", "u1")}})
	res := resResp.Results
	if err != nil || len(res) != 1 || res[0].Outcome != sdk.OutcomeSent {
		t.Fatalf("Send: %+v %v", res, err)
	}
	for _, g := range []*gateway{g1, g2} {
		m := g.wait(t, 1)[0]
		var f frame
		if err := json.Unmarshal(m.Body, &f); err != nil || f.Type != FrameNotification || f.DeliveryID != "d1" ||
			f.IdempotencyKey != "idem-d1" || f.Title != "New reservation" || string(f.Data) != `{"pax":4}` {
			t.Fatalf("frame: %s", m.Body)
		}
		if m.Headers[liveproto.HeaderTenant] != "t1" || m.Headers[liveproto.HeaderUser] != "u1" {
			t.Fatalf("headers: %v", m.Headers)
		}
	}
	if other.count() != 0 {
		t.Fatal("a gateway of another user got the frame")
	}
}

// TestUserWithoutSessionsIsOffline: the broker returns what no daemon
// is bound for; mixed in one batch with a routable delivery.
func TestUserWithoutSessionsIsOffline(t *testing.T) {
	t.Parallel()
	ex := randomName("herald.live.test-")
	g := newGateway(t, ex, [2]string{"t1", "online"})
	w := configured(t, ex)
	batch := []sdk.Delivery{delivery("d1", "t1", "offline"), delivery("d2", "t1", "online"), delivery("d3", "t2", "online"),
		{DeliveryID: "d4", TenantID: "t1"}}
	resResp, err := w.Send(context.Background(), sdk.SendRequest{Deliveries: batch})
	res := resResp.Results
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"d1": "skipped " + CodeOffline, "d2": "", "d3": "skipped " + CodeOffline, "d4": "permanent " + CodeNoAddress}
	for _, r := range res {
		code := ""
		switch r.Outcome {
		case sdk.OutcomePermanent:
			code = "permanent " + r.Code
		case sdk.OutcomeSkipped:
			code = "skipped " + r.Reason
		case sdk.OutcomeSent:
		default:
			t.Fatalf("%s: outcome %v", r.DeliveryID, r.Outcome)
		}
		if code != want[r.DeliveryID] {
			t.Errorf("%s: code %q, want %q", r.DeliveryID, code, want[r.DeliveryID])
		}
	}
	if n := len(g.wait(t, 1)); n != 1 {
		t.Fatalf("gateway got %d", n)
	}
}

// TestBrokerDown: Send fails as a whole (the host retries per policy), and
// Health says why; nothing panics.
func TestBrokerDown(t *testing.T) {
	t.Parallel()
	w := New().(*WebSocket)
	defer w.Close()
	if _, err := w.Configure(context.Background(), sdk.ConfigureRequest{Config: map[string]any{FieldAMQPURL: "amqp://guest:guest@127.0.0.1:1/"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Send(context.Background(), sdk.SendRequest{Deliveries: []sdk.Delivery{delivery("d1", "t", "u")}}); err == nil {
		t.Fatal("Send with the broker down succeeded")
	}
	h, err := w.Health(context.Background(), sdk.HealthRequest{})
	if err != nil || h.Healthy {
		t.Fatalf("Health with the broker down: %+v %v", h, err)
	}
}

// TestSendTriesEveryNode: amqp_url lists the nodes of a cluster; a dead
// first node does not stop Send, which publishes through the next one.
func TestSendTriesEveryNode(t *testing.T) {
	t.Parallel()
	ex := randomName("herald.live.test-")
	g := newGateway(t, ex, [2]string{"t1", "u1"})
	w := New().(*WebSocket)
	defer w.Close()
	_, err := w.Configure(context.Background(), sdk.ConfigureRequest{ProviderName: "test",
		Config: map[string]any{FieldAMQPURL: "amqp://guest:guest@127.0.0.1:1/, " + brokerURL(), FieldExchange: ex}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := w.Send(context.Background(), sdk.SendRequest{Deliveries: []sdk.Delivery{delivery("d1", "t1", "u1")}})
	res := resp.Results
	if err != nil || len(res) != 1 || res[0].Outcome != sdk.OutcomeSent {
		t.Fatalf("Send: %+v %v", res, err)
	}
	g.wait(t, 1)
}

func TestSendBeforeConfigure(t *testing.T) {
	t.Parallel()
	channeltest.SendBeforeConfigure(t, New(), delivery("d1", "t1", "u1"), ErrNotConfigured)
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	channeltest.Describe(t, New(), channeltest.Description{ChannelType: "WEBSOCKET", Provider: "websocket", PluginVersion: Version, Class: sdk.BestEffort, MaxBatch: 500})
}

func TestConfigureRefusesBadConfig(t *testing.T) {
	t.Parallel()
	channeltest.RefusesBadConfig(t, New, func() map[string]any { return map[string]any{} }, map[string]channeltest.BadConfig{
		"unknown key (the old listen)": {Edit: func(m map[string]any) { m["listen"] = "127.0.0.1:8090" }, WantField: "listen"},
		"jwt_secret is gone":           {Edit: func(m map[string]any) { m["jwt_secret"] = "x" }, WantField: "jwt_secret"},
		"http url":                     {Edit: func(m map[string]any) { m[FieldAMQPURL] = "http://127.0.0.1:5672/" }, WantField: FieldAMQPURL},
		"no host":                      {Edit: func(m map[string]any) { m[FieldAMQPURL] = "amqp://" }, WantField: FieldAMQPURL},
		"bad second node":              {Edit: func(m map[string]any) { m[FieldAMQPURL] = "amqp://a:5672/,http://b/" }, WantField: FieldAMQPURL},
		"empty exchange":               {Edit: func(m map[string]any) { m[FieldExchange] = "" }, WantField: FieldExchange},
		"tiny timeout":                 {Edit: func(m map[string]any) { m[FieldPublishTimeout] = "1ms" }, WantField: FieldPublishTimeout},
	})
}
