// Package telegram_test runs the sdk/plugintest conformance kit against
// herald-plugin-telegram, a channel plugin written in Python, built by
// gen.sh, talking to a local server that speaks the Telegram Bot API's
// shapes. It is the proof that a plugin in another language speaks the
// same protocol as the Go plugins.
package telegram_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sdk/plugintest"
)

// buildPlugin builds the Python zip application with gen.sh.
func buildPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "herald-plugin-telegram")
	if out, err := exec.Command("./gen.sh", bin).CombinedOutput(); err != nil {
		t.Fatalf("gen.sh: %v\n%s", err, out)
	}
	return bin
}

// botAPI is a local Telegram Bot API: getMe and sendMessage for one token.
// It records the idempotency key each delivery arrived with, keyed by its
// delivery id (the plugin's X-Herald-* headers).
type botAPI struct {
	token  string
	status int // answer every sendMessage with this status when not 0

	mu   sync.Mutex
	seen map[string]string // delivery id → X-Herald-Idempotency-Key
	n    int
}

func (b *botAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	prefix := "/bot" + b.token + "/"
	if !strings.HasPrefix(r.URL.Path, prefix) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"ok":false,"error_code":404,"description":"Not Found"}`)
		return
	}
	switch strings.TrimPrefix(r.URL.Path, prefix) {
	case "getMe":
		fmt.Fprint(w, `{"ok":true,"result":{"id":1,"is_bot":true,"username":"herald_test_bot"}}`)
	case "sendMessage":
		var m struct {
			ChatID string `json:"chat_id"`
			Text   string `json:"text"`
		}
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil || m.ChatID == "" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}`)
			return
		}
		if b.status != 0 {
			w.WriteHeader(b.status)
			fmt.Fprintf(w, `{"ok":false,"error_code":%d,"description":"test peer told to fail","parameters":{"retry_after":7}}`, b.status)
			return
		}
		b.mu.Lock()
		b.n++
		id := b.n
		b.seen[r.Header.Get("X-Herald-Delivery-Id")] = r.Header.Get("X-Herald-Idempotency-Key")
		b.mu.Unlock()
		fmt.Fprintf(w, `{"ok":true,"result":{"message_id":%d,"chat":{"id":%s}}}`, id, m.ChatID)
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"ok":false,"error_code":404,"description":"Not Found"}`)
	}
}

func (b *botAPI) providerSeen(testing.TB) map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]string, len(b.seen))
	for k, v := range b.seen {
		out[k] = v
	}
	return out
}

func TestConformance(t *testing.T) {
	bin := buildPlugin(t)
	const token = "123456:test-token"
	api := &botAPI{token: token, seen: map[string]string{}}
	good := httptest.NewServer(api)
	defer good.Close()
	failing := httptest.NewServer(&botAPI{token: token, status: http.StatusServiceUnavailable, seen: map[string]string{}})
	defer failing.Close()

	plugintest.Run(t, bin, plugintest.Features{
		ChannelType: "TELEGRAM",
		Config:      map[string]any{"token": token, "api_url": good.URL},
		BadConfigs: []plugintest.BadConfig{
			{Name: "api_url not http", Config: map[string]any{"api_url": "ftp://x"}, Field: "api_url"},
			{Name: "negative timeout", Config: map[string]any{"timeout": "-1s"}, Field: "timeout"},
		},
		Delivery: func(i int) sdk.Delivery {
			d := plugintest.DefaultDelivery(i)
			d.Recipient.Attributes = map[string]string{"telegram_chat_id": fmt.Sprint(1000 + i)}
			return d
		},
		ProviderSeen:  api.providerSeen,
		FailingConfig: map[string]any{"token": token, "api_url": failing.URL},
	})
}
