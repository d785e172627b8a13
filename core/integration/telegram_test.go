package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// telegramPeer is a local Telegram Bot API (getMe, sendMessage) that
// records every message it accepted, with the Herald headers it came with.
type telegramPeer struct {
	*httptest.Server
	token string

	mu   sync.Mutex
	msgs []telegramMessage
}

type telegramMessage struct {
	ChatID         string `json:"chat_id"`
	Text           string `json:"text"`
	DeliveryID     string
	IdempotencyKey string
}

func newTelegramPeer(t *testing.T, token string) *telegramPeer {
	p := &telegramPeer{token: token}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/bot" + token + "/getMe":
			fmt.Fprint(w, `{"ok":true,"result":{"id":1,"is_bot":true,"username":"herald_it_bot"}}`)
		case "/bot" + token + "/sendMessage":
			var m telegramMessage
			if err := json.NewDecoder(r.Body).Decode(&m); err != nil || m.ChatID == "" {
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprint(w, `{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}`)
				return
			}
			m.DeliveryID, m.IdempotencyKey = r.Header.Get("X-Herald-Delivery-Id"), r.Header.Get("X-Herald-Idempotency-Key")
			p.mu.Lock()
			p.msgs = append(p.msgs, m)
			n := len(p.msgs)
			p.mu.Unlock()
			fmt.Fprintf(w, `{"ok":true,"result":{"message_id":%d}}`, n)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"ok":false,"error_code":404,"description":"Not Found"}`)
		}
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *telegramPeer) messages() []telegramMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]telegramMessage(nil), p.msgs...)
}

// TestPythonTelegramPluginEndToEnd runs examples/plugins/telegram, a channel
// plugin written in Python, under a real `herald serve`: the host launches
// it through go-plugin (handshake, protocol 2, AutoMTLS), and an event
// posted through the API reaches every staff member's Telegram chat on a
// local Bot API, SENT exactly once with the provider's message id.
func TestPythonTelegramPluginEndToEnd(t *testing.T) {
	root := testenv.RepoRoot(t)
	e := newEnv(t, "sent")
	e.pluginDir = filepath.Join(e.dir, "plugins")
	bin := filepath.Join(e.pluginDir, "herald-plugin-telegram")
	if out, err := exec.Command(filepath.Join(root, "examples", "plugins", "telegram", "gen.sh"), bin).CombinedOutput(); err != nil {
		t.Fatalf("build the Python plugin: %v\n%s", err, out)
	}
	e.writeConfig()

	// The staff directory again, now with Telegram chats.
	dir := staff
	dir.Recipients = nil
	chats := map[string]string{}
	for i, r := range staff.Recipients {
		r.Attributes = map[string]string{"telegram_chat_id": fmt.Sprint(7000 + i)}
		chats[r.UserID] = r.Attributes["telegram_chat_id"]
		dir.Recipients = append(dir.Recipients, r)
	}
	if err := store.ImportDirectory(context.Background(), e.db.Pool, e.tenant, &dir); err != nil {
		t.Fatal(err)
	}

	const token = "4242:integration-token"
	peer := newTelegramPeer(t, token)
	e.writeRules(fmt.Sprintf(`
defaults {
  time_zone = "UTC"
}

channel "TELEGRAM" {
  providers = [{
    plugin = "telegram"
    config = {
      token   = %q
      api_url = %q
      timeout = "5s"
    }
  }]
}

event "RESERVATION_REQUESTED" {
  audience {
    group = "restaurant:{{ .payload.restaurant_id }}"
    roles = ["MANAGER", "CHEF", "WAITER"]
  }
  mandatory   = ["TELEGRAM"]
  quiet_hours = "ignore"
  inbox {
    title = "New reservation"
    body  = "{{ .payload.customer_name }}, {{ .payload.pax }} people"
  }
}
`, token, peer.URL))
	e.start()
	st := e.plugin("TELEGRAM", "telegram")
	if st.State != pluginhost.StateServing || st.Version != "0.1.0" {
		t.Fatalf("telegram provider = %+v, want serving version 0.1.0", st)
	}

	if _, _, err := e.client().Emit(context.Background(), reservation("tg-1")); err != nil {
		t.Fatal(err)
	}
	const staffCount = 3
	e.waitAllSent(staffCount, 30*time.Second)
	e.assertExactlyOnce(staffCount)
	e.assertOneAttemptEach(staffCount)

	msgs := peer.messages()
	if len(msgs) != staffCount {
		t.Fatalf("the Bot API got %d messages, want %d: %+v", len(msgs), staffCount, msgs)
	}
	byID := map[string]telegramMessage{}
	for _, m := range msgs {
		byID[m.DeliveryID] = m
	}
	rows, err := e.db.Pool.Query(context.Background(), `SELECT delivery_id::text, tenant_id, user_id, provider, provider_message_id
		FROM deliveries WHERE channel = 'TELEGRAM' AND status = 'SENT'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id, tenant, user, prov, msgID string
		if err := rows.Scan(&id, &tenant, &user, &prov, &msgID); err != nil {
			t.Fatal(err)
		}
		n++
		m, ok := byID[id]
		switch {
		case !ok:
			t.Errorf("delivery %s (%s) never reached the Bot API", id, user)
		case prov != "telegram":
			t.Errorf("delivery %s: provider %q", id, prov)
		case m.ChatID != chats[user]:
			t.Errorf("delivery %s: chat %q, want %s's %q", id, m.ChatID, user, chats[user])
		case m.IdempotencyKey != tenant+":"+id:
			t.Errorf("delivery %s: idempotency key %q", id, m.IdempotencyKey)
		case !strings.HasPrefix(msgID, m.ChatID+"/"):
			t.Errorf("delivery %s: provider_message_id %q, want chat/message", id, msgID)
		case !strings.Contains(m.Text, "New reservation"):
			t.Errorf("delivery %s: text %q", id, m.Text)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != staffCount {
		t.Errorf("%d TELEGRAM deliveries SENT, want %d", n, staffCount)
	}
}
