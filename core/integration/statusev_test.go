package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/statusev"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/core/internal/webhook"
	"github.com/heraldhq/herald/sdk/producer"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The tests in this file run a real herald serve with the sink plugin
// (EMAIL answering permanent failures, the other channels sent), two
// tenants, a RabbitMQ consumer per tenant on the status exchange and a
// loopback webhook receiver per tenant that verifies every signature.

const otherTenant = "globex"

// statusWorld is env with a second tenant, status_events settings for
// loopback receivers, and what each tenant receives.
type statusWorld struct {
	*env
	keys     map[string]string // tenant → API key
	broker   map[string]*statusQueue
	hooks    map[string]*receiver
	tokenKey map[string]store.TokenKey
}

func newStatusWorld(t *testing.T, webhookTimeout string) *statusWorld {
	t.Helper()
	e := newEnv(t, "sent")
	// EMAIL fails for good; WEBSOCKET and PUSH are sent.
	e.writeRules(strings.Replace(fmt.Sprintf(sinkRules, e.record, "sent"), `outcome = "sent"`, `outcome = "permanent"`, 1))
	ctx := context.Background()
	if err := store.EnsureTenant(ctx, e.db.Pool, otherTenant, "Globex"); err != nil {
		t.Fatal(err)
	}
	otherKey, err := store.CreateAPIKey(ctx, e.db.Pool, otherTenant, "test", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.ImportDirectory(ctx, e.db.Pool, otherTenant, &staff); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(e.cfgPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, `
status_events {
  poll_interval           = "200ms"
  webhook_timeout         = %q
  webhook_backoff_initial = "200ms"
  webhook_backoff_max     = "1s"
  webhook_allow_loopback  = true
}
`, webhookTimeout)
	f.Close()
	w := &statusWorld{env: e, keys: map[string]string{e.tenant: e.apiKey, otherTenant: otherKey},
		broker: map[string]*statusQueue{}, hooks: map[string]*receiver{}, tokenKey: map[string]store.TokenKey{}}
	for ten := range w.keys {
		w.broker[ten] = consumeStatus(t, e.broker.URL, ten)
		w.hooks[ten] = newReceiver(t)
		secret, _ := auth.NewSecret()
		k := store.TokenKey{TenantID: ten, Kid: "k1", Alg: "HS256", Issuer: "https://" + ten + ".example", Key: secret}
		if err := store.AddTokenKey(ctx, e.db.Pool, k); err != nil {
			t.Fatal(err)
		}
		w.tokenKey[ten] = k
	}
	return w
}

// setWebhook PUTs the tenant's webhook (every kind) and gives its
// receiver the secret.
func (w *statusWorld) setWebhook(t *testing.T, tenant string) {
	t.Helper()
	body := fmt.Sprintf(`{"url": %q, "kinds": [%s]}`, w.hooks[tenant].srv.URL+"/hook/"+tenant, `"`+strings.Join(webhook.Kinds, `", "`)+`"`)
	resp := w.call(t, "PUT", "/v1/settings/webhook", w.keys[tenant], body)
	var got struct{ Secret string }
	if err := json.Unmarshal(resp.body, &got); resp.code != http.StatusCreated || err != nil || got.Secret == "" {
		t.Fatalf("PUT webhook for %s: %d %s", tenant, resp.code, resp.body)
	}
	w.hooks[tenant].setSecret(got.Secret)
}

type callReply struct {
	code int
	body []byte
}

func (w *statusWorld) call(t *testing.T, method, path, bearer, body string) callReply {
	t.Helper()
	req, _ := http.NewRequest(method, w.apiURL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return callReply{resp.StatusCode, b}
}

func (w *statusWorld) userToken(t *testing.T, tenant, user string) string {
	t.Helper()
	tok, err := auth.Issue(w.tokenKey[tenant], w.audience(t), auth.User{UserID: user, UserType: "STAFF"}, 5*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// emit sends n reservations for the tenant.
func (w *statusWorld) emit(t *testing.T, tenant, prefix string, n int) {
	t.Helper()
	c := &producer.Client{BaseURL: w.apiURL, APIKey: w.keys[tenant]}
	for i := range n {
		if _, _, err := c.Emit(context.Background(), reservation(fmt.Sprintf("%s-%d", prefix, i))); err != nil {
			t.Fatal(err)
		}
	}
}

// recorded is status_events as the database holds them: id → tenant/kind.
func (w *statusWorld) recorded(t *testing.T) map[string]string {
	t.Helper()
	rows, err := w.db.Pool.Query(context.Background(), `SELECT event_id::text, tenant_id || '/' || kind FROM status_events`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, what string
		if err := rows.Scan(&id, &what); err != nil {
			t.Fatal(err)
		}
		out[id] = what
	}
	return out
}

// waitFinal waits until the tenant's n events are all final.
func (w *statusWorld) waitFinal(t *testing.T, n int) {
	t.Helper()
	testenv.Eventually(t, 90*time.Second, func() bool {
		return w.count(`SELECT count(*) FROM deliveries WHERE status IN ('SENT', 'FAILED')`) == n*deliveriesPerEvent
	}, "%d deliveries final (now: %s)", n*deliveriesPerEvent, w.statusSummary())
}

// assertReceived waits until every recorded event reached its tenant's
// queue and (when want) webhook, then checks that nothing else did: no
// event of another tenant, none that was not recorded, every copy of an
// event the same message.
func (w *statusWorld) assertReceived(t *testing.T, webhooks bool) map[string]string {
	t.Helper()
	var rec map[string]string
	testenv.Eventually(t, 90*time.Second, func() bool {
		rec = w.recorded(t)
		for id, what := range rec {
			ten := strings.SplitN(what, "/", 2)[0]
			if !w.broker[ten].has(id) || (webhooks && !w.hooks[ten].has(id)) {
				return false
			}
		}
		return true
	}, "every recorded status event on its tenant's queue and webhook")
	for ten := range w.keys {
		for _, got := range []map[string]statusev.Message{w.broker[ten].messages(), w.hooks[ten].messages()} {
			for id, m := range got {
				want, ok := rec[id]
				if !ok || want != m.TenantID+"/"+m.Type || m.TenantID != ten {
					t.Errorf("tenant %s received %s (%s/%s); recorded as %q", ten, id, m.TenantID, m.Type, want)
				}
			}
		}
		if bad := w.hooks[ten].refused(); len(bad) > 0 {
			t.Errorf("tenant %s's receiver refused signatures: %v", ten, bad)
		}
		if keys := w.broker[ten].keys(); len(keys) > 0 {
			for k := range keys {
				if !strings.HasPrefix(k, ten+".") {
					t.Errorf("tenant %s's queue got routing key %s", ten, k)
				}
			}
		}
	}
	return rec
}

// TestStatusEventsReachBrokerAndWebhooksAsRecorded: two tenants' sent and
// failed deliveries, a read and an action reach each tenant's routing key
// and webhook exactly as status_events recorded them, signed; the
// receiver down then up gets everything retried; a SIGKILL of the daemon
// while it drains loses nothing (a repeat carries the same id).
func TestStatusEventsReachBrokerAndWebhooksAsRecorded(t *testing.T) {
	w := newStatusWorld(t, "1s")
	ctx := context.Background()
	d := w.start()
	for ten := range w.keys {
		w.setWebhook(t, ten)
	}
	w.emit(t, w.tenant, "a", 2)
	w.emit(t, otherTenant, "b", 2)
	w.waitFinal(t, 4)

	// A read and an action in acme's inbox.
	var n1, n2 string
	if err := w.db.Pool.QueryRow(ctx, `SELECT min(notification_id::text) FILTER (WHERE user_id = 'staff1'), min(notification_id::text) FILTER (WHERE user_id = 'staff2')
		FROM notifications WHERE tenant_id = $1 AND event_id = 'a-0'`, w.tenant).Scan(&n1, &n2); err != nil {
		t.Fatal(err)
	}
	if r := w.call(t, "POST", "/v1/inbox/"+n1+"/read", w.userToken(t, w.tenant, "staff1"), ""); r.code != http.StatusOK {
		t.Fatalf("read: %d %s", r.code, r.body)
	}
	if r := w.call(t, "POST", "/v1/inbox/"+n2+"/actions", w.userToken(t, w.tenant, "staff2"), `{"type": "CONFIRMED"}`); r.code != http.StatusOK {
		t.Fatalf("act: %d %s", r.code, r.body)
	}
	rec := w.assertReceived(t, true)
	kinds := map[string]int{}
	for _, what := range rec {
		kinds[what]++
	}
	for _, ten := range []string{w.tenant, otherTenant} {
		if got, want := kinds[ten+"/delivery.sent"], w.count(`SELECT count(*) FROM deliveries WHERE tenant_id = $1 AND status = 'SENT'`, ten); got != want || want == 0 {
			t.Errorf("%s: %d delivery.sent events for %d SENT deliveries", ten, got, want)
		}
		if got, want := kinds[ten+"/delivery.failed"], w.count(`SELECT count(*) FROM deliveries WHERE tenant_id = $1 AND status = 'FAILED'`, ten); got != want || want == 0 {
			t.Errorf("%s: %d delivery.failed events for %d FAILED deliveries", ten, got, want)
		}
	}
	if got, want := kinds[w.tenant+"/notification.read"], w.count(`SELECT count(*) FROM notifications WHERE tenant_id = $1 AND read_at IS NOT NULL`, w.tenant); got != want || want == 0 {
		t.Errorf("%d notification.read events for %d read notifications", got, want)
	}
	if got := kinds[w.tenant+"/notification.acted"]; got != 1 {
		t.Errorf("%d notification.acted events for one action", got)
	}
	if kinds[otherTenant+"/notification.read"]+kinds[otherTenant+"/notification.acted"] != 0 {
		t.Errorf("globex has inbox events it never made: %v", kinds)
	}
	// A message's data is the row's: a failed delivery says why.
	for id, m := range w.hooks[w.tenant].messages() {
		if m.Type != "delivery.failed" {
			continue
		}
		var status string
		if err := w.db.Pool.QueryRow(ctx, `SELECT status FROM deliveries WHERE delivery_id = $1`, strings.ReplaceAll(jsonField(m.Data, "delivery_id"), `"`, "")).Scan(&status); err != nil ||
			status != "FAILED" || jsonField(m.Data, "channel") != `"EMAIL"` {
			t.Errorf("event %s: data %s; the delivery is %s (%v)", id, m.Data, status, err)
		}
		break
	}

	// The receiver down: events are retried with backoff, then delivered
	// once it is up.
	w.hooks[w.tenant].mode.Store(modeDown)
	w.emit(t, w.tenant, "down", 1)
	testenv.Eventually(t, 60*time.Second, func() bool {
		return w.count(`SELECT count(*) FROM status_events WHERE tenant_id = $1 AND webhook_attempts >= 2 AND webhook_delivered_at IS NULL`, w.tenant) > 0
	}, "acme's events retried while its receiver is down")
	w.hooks[w.tenant].mode.Store(modeUp)
	w.waitFinal(t, 5)
	w.assertReceived(t, true)

	// SIGKILL while draining: the receiver answers slowly, the daemon is
	// killed once it delivered some but not all, and a new one finishes.
	w.hooks[w.tenant].mode.Store(modeSlow)
	w.emit(t, w.tenant, "kill", 2)
	testenv.Eventually(t, 60*time.Second, func() bool {
		return w.count(`SELECT count(*) FROM status_events WHERE tenant_id = $1 AND webhook_delivered_at IS NOT NULL AND data->>'event_id' LIKE 'kill-%'`, w.tenant) > 0 &&
			w.count(`SELECT count(*) FROM status_events WHERE tenant_id = $1 AND webhook_due_at IS NOT NULL`, w.tenant) > 0
	}, "the daemon draining acme's events")
	d.stop(syscall.SIGKILL)
	w.hooks[w.tenant].mode.Store(modeUp)
	w.start()
	w.waitFinal(t, 7)
	w.assertReceived(t, true)
	// The daemon records an outcome after the receiver answered.
	testenv.Eventually(t, 30*time.Second, func() bool {
		return w.count(`SELECT count(*) FROM status_events WHERE (txid, seq) > (SELECT txid, seq FROM status_event_cursor) OR webhook_due_at IS NOT NULL`) == 0
	}, "no status event owed")
	t.Logf("webhook copies beyond the first (same id): acme %d, globex %d", w.hooks[w.tenant].repeats(), w.hooks[otherTenant].repeats())
}

// TestSlowTenantWebhookDoesNotDelayAnother: acme's endpoint hangs; globex's
// events all arrive while acme's requests are still hanging, then acme's
// arrive once its endpoint answers.
func TestSlowTenantWebhookDoesNotDelayAnother(t *testing.T) {
	w := newStatusWorld(t, "120s")
	w.start()
	for ten := range w.keys {
		w.setWebhook(t, ten)
	}
	w.hooks[w.tenant].mode.Store(modeHang)
	w.emit(t, w.tenant, "a", 2)
	testenv.Eventually(t, 60*time.Second, func() bool { return w.hooks[w.tenant].hanging.Load() > 0 }, "acme's endpoint hanging")
	w.emit(t, otherTenant, "b", 2)
	testenv.Eventually(t, 90*time.Second, func() bool {
		n := w.count(`SELECT count(*) FROM status_events WHERE tenant_id = $1`, otherTenant)
		return n >= 2*deliveriesPerEvent && len(w.hooks[otherTenant].messages()) == n
	}, "every globex event at globex's webhook")
	if h, got := w.hooks[w.tenant].hanging.Load(), len(w.hooks[w.tenant].messages()); h == 0 || got != 0 {
		t.Fatalf("acme's endpoint: %d requests hanging, %d answered; want it still hanging with none answered", h, got)
	}
	w.hooks[w.tenant].mode.Store(modeUp)
	w.hooks[w.tenant].release()
	w.waitFinal(t, 4)
	w.assertReceived(t, true)
}

func jsonField(raw json.RawMessage, key string) string {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	return string(m[key])
}

// statusQueue consumes one tenant's binding of the status exchange.
type statusQueue struct {
	mu     sync.Mutex
	got    map[string]statusev.Message
	routes map[string]bool
}

func consumeStatus(t *testing.T, url, tenant string) *statusQueue {
	t.Helper()
	ch := testenv.AMQPChannel(t, url)
	exchange := statusev.DefaultConfig().Exchange
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("status-"+tenant, false, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, tenant+".#", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	msgs, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &statusQueue{got: map[string]statusev.Message{}, routes: map[string]bool{}}
	go func() {
		for d := range msgs {
			var m statusev.Message
			if err := json.Unmarshal(d.Body, &m); err != nil || m.ID != d.MessageId {
				t.Errorf("status message %q (id %s): %v", d.Body, d.MessageId, err)
				continue
			}
			s.mu.Lock()
			s.got[m.ID] = m
			s.routes[d.RoutingKey] = true
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *statusQueue) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.got[id]
	return ok
}

func (s *statusQueue) messages() map[string]statusev.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]statusev.Message, len(s.got))
	for k, v := range s.got {
		out[k] = v
	}
	return out
}

func (s *statusQueue) keys() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]bool{}
	for k := range s.routes {
		out[k] = true
	}
	return out
}

// receiver is a tenant's webhook endpoint on loopback: it verifies every
// signature and timestamp as a receiver must, and answers as mode says.
type receiver struct {
	srv     *httptest.Server
	mode    atomic.Int32
	hanging atomic.Int32
	unhang  chan struct{}
	once    sync.Once
	mu      sync.Mutex
	secret  string
	got     map[string]statusev.Message
	copies  map[string]int
	bad     []string
}

const (
	modeUp int32 = iota
	modeDown
	modeSlow
	modeHang
)

func newReceiver(t *testing.T) *receiver {
	r := &receiver{got: map[string]statusev.Message{}, copies: map[string]int{}, unhang: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() { r.release(); r.srv.Close() })
	return r
}

func (r *receiver) setSecret(s string) {
	r.mu.Lock()
	r.secret = s
	r.mu.Unlock()
}

func (r *receiver) release() { r.once.Do(func() { close(r.unhang) }) }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	switch r.mode.Load() {
	case modeDown:
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	case modeSlow:
		time.Sleep(300 * time.Millisecond) // a slow endpoint, not a wait for a condition
	case modeHang:
		r.hanging.Add(1)
		select {
		case <-r.unhang:
		case <-req.Context().Done():
		}
		r.hanging.Add(-1)
		http.Error(w, "was hanging", http.StatusServiceUnavailable)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.secret == "" {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	id := req.Header.Get("webhook-id")
	if err := webhook.Verify(r.secret, id, req.Header.Get("webhook-timestamp"), req.Header.Get("webhook-signature"), body, time.Now(), webhook.Tolerance); err != nil {
		r.bad = append(r.bad, id+": "+err.Error())
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var m statusev.Message
	if err := json.Unmarshal(body, &m); err != nil || m.ID != id {
		r.bad = append(r.bad, fmt.Sprintf("%s: body %q", id, body))
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	if prev, ok := r.got[id]; ok && string(prev.Data) != string(m.Data) {
		r.bad = append(r.bad, id+": a repeat with other data")
	}
	r.got[id] = m
	r.copies[id]++
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.got[id]
	return ok
}

func (r *receiver) messages() map[string]statusev.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]statusev.Message, len(r.got))
	for k, v := range r.got {
		out[k] = v
	}
	return out
}

func (r *receiver) refused() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bad...)
}

func (r *receiver) repeats() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.copies {
		n += c - 1
	}
	return n
}
