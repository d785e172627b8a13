package integration

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// webhookGuide is the plugin authoring guide this test follows.
const webhookGuide = "docs/plugin-authoring.md"

// guideChannelBlock returns the WEBHOOK channel block the guide appends to
// the rules in its step 9 (the heredoc after `cat >> /tmp/webhook-rules.hcl`).
func guideChannelBlock(t *testing.T, root string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, webhookGuide))
	if err != nil {
		t.Fatal(err)
	}
	const open = "cat >> /tmp/webhook-rules.hcl <<'HCL'\n"
	_, rest, ok := strings.Cut(string(doc), open)
	if !ok {
		t.Fatalf("%s: no %q: the guide's step 9 changed, update this test with it", webhookGuide, strings.TrimSpace(open))
	}
	block, _, ok := strings.Cut(rest, "\nHCL\n")
	if !ok || !strings.Contains(block, `channel "WEBHOOK"`) {
		t.Fatalf("%s: step 9's heredoc has no WEBHOOK channel block:\n%s", webhookGuide, block)
	}
	return block
}

// webhookReceiver is the receiving end of the guide's WEBHOOK channel: it
// checks X-Herald-Signature ("sha256=" + hex HMAC-SHA256 of the body under
// the provider's secret) before trusting a request, as the guide's
// receiver does, and records what it accepted.
type webhookReceiver struct {
	*httptest.Server
	secret []byte

	mu       sync.Mutex
	got      map[string]webhookPost // by delivery id
	rejected int
}

// webhookPost is one accepted POST.
type webhookPost struct {
	DeliveryID     string `json:"delivery_id"`
	IdempotencyKey string `json:"idempotency_key"`
	TenantID       string `json:"tenant_id"`
	EventID        string `json:"event_id"`
	Channel        string `json:"channel"`
	Recipient      struct {
		UserID string `json:"user_id"`
	} `json:"recipient"`
	Title string `json:"title"`
	Body  string `json:"body"`

	header    http.Header
	messageID string
}

func newWebhookReceiver(t *testing.T, secret string) *webhookReceiver {
	r := &webhookReceiver{secret: []byte(secret), got: map[string]webhookPost{}}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *webhookReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m := hmac.New(sha256.New, r.secret)
	m.Write(body)
	want := "sha256=" + hex.EncodeToString(m.Sum(nil))
	if req.Method != http.MethodPost || !hmac.Equal([]byte(req.Header.Get("X-Herald-Signature")), []byte(want)) {
		r.mu.Lock()
		r.rejected++
		r.mu.Unlock()
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var p webhookPost
	if err := json.Unmarshal(body, &p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.header = req.Header.Clone()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.got[p.DeliveryID]; dup {
		// A repeated Idempotency-Key is acknowledged and not delivered again.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	p.messageID = fmt.Sprintf("rcv-%d", len(r.got)+1)
	r.got[p.DeliveryID] = p
	w.Header().Set("X-Message-Id", p.messageID)
	w.WriteHeader(http.StatusNoContent)
}

func (r *webhookReceiver) posts() (map[string]webhookPost, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]webhookPost, len(r.got))
	for k, v := range r.got {
		out[k] = v
	}
	return out, r.rejected
}

// TestWebhookPluginGuide walks docs/plugin-authoring.md end to end against
// a real `herald serve`: build examples/plugins/webhook (its own module)
// into the plugin directory, add the guide's WEBHOOK channel block (pinned
// to the binary's checksum) to the rules, check them with `herald rules
// check --plugin-dir`, post the quick-start event through the HTTP API, and
// see every staff member's delivery reach a receiver that verifies the
// signature, SENT once in the database.
func TestWebhookPluginGuide(t *testing.T) {
	root := testenv.RepoRoot(t)
	e := newEnv(t, "sent")
	e.pluginDir = filepath.Join(e.dir, "plugins")
	if err := os.MkdirAll(e.pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.writeConfig()

	// Step 8: build it into the plugin directory.
	bin := filepath.Join(e.pluginDir, "herald-plugin-webhook")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(root, "examples", "plugins", "webhook")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the webhook plugin (its own module): %v\n%s", err, out)
	}
	sum := sha256File(t, bin)

	// Step 9: the guide's channel block, pointed at this test's receiver
	// and pinned to the binary's checksum as the guide suggests.
	const guideURL = "http://127.0.0.1:9099/herald"
	const guideSecret = "change-me-to-a-long-random-secret"
	rcv := newWebhookReceiver(t, guideSecret)
	block := guideChannelBlock(t, root)
	for _, s := range []string{guideURL, guideSecret, `# checksum = "<sha256sum output>"`} {
		if !strings.Contains(block, s) {
			t.Fatalf("%s: the WEBHOOK block no longer holds %q: update this test with the guide", webhookGuide, s)
		}
	}
	block = strings.Replace(block, guideURL, rcv.URL+"/herald", 1)
	block = strings.Replace(block, `# checksum = "<sha256sum output>"`, fmt.Sprintf("checksum = %q", sum), 1)
	e.writeRules(`
defaults {
  time_zone = "UTC"
}
` + block + `

event "RESERVATION_REQUESTED" {
  shared = true
  audience {
    group = "restaurant:{{ .payload.restaurant_id }}"
    roles = ["MANAGER", "CHEF", "WAITER"]
  }
  mandatory   = ["WEBHOOK"]
  quiet_hours = "ignore"
  inbox {
    title = "New reservation"
    body  = "{{ .payload.customer_name }}, {{ .payload.pax }} people at {{ .payload.time }}"
  }
}
`)
	rulesFile := filepath.Join(e.rulesDir, "rules.hcl")
	if out, err := e.cli("rules", "check", "--plugin-dir", e.pluginDir, rulesFile); err != nil {
		t.Fatalf("herald rules check --plugin-dir: %v\n%s", err, out)
	}

	// Step 10: run it and post the quick-start event.
	e.start()
	st := e.plugin("WEBHOOK", "webhook")
	if st.State != pluginhost.StateServing || st.Version != "0.1.0" || st.SHA256 != sum {
		t.Fatalf("webhook provider = %+v, want serving version 0.1.0 of the pinned binary", st)
	}
	event, err := os.ReadFile(filepath.Join(root, "examples", "quickstart", "reservation.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ev struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(event, &ev); err != nil || ev.EventID == "" {
		t.Fatalf("examples/quickstart/reservation.json: %v", err)
	}
	req, _ := http.NewRequest(http.MethodPost, e.apiURL+"/v1/events", bytes.NewReader(event))
	req.Header.Set("Authorization", "Bearer "+e.apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /v1/events: %s: %s", resp.Status, answer)
	}

	const staffCount = 3
	e.waitAllSent(staffCount, 30*time.Second)
	e.assertExactlyOnce(staffCount)
	e.assertOneAttemptEach(staffCount)
	testenv.Eventually(t, 10*time.Second, func() bool {
		got, _ := rcv.posts()
		return len(got) == staffCount
	}, "the receiver got %d deliveries", staffCount)
	got, rejected := rcv.posts()
	if rejected != 0 {
		t.Errorf("the receiver rejected %d requests", rejected)
	}

	rows, err := e.db.Pool.Query(context.Background(), `SELECT delivery_id::text, tenant_id, user_id, channel, provider, provider_message_id
		FROM deliveries WHERE event_id = $1 ORDER BY user_id`, ev.EventID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	users := map[string]bool{}
	for rows.Next() {
		var id, tenant, user, channel, prov, msgID string
		if err := rows.Scan(&id, &tenant, &user, &channel, &prov, &msgID); err != nil {
			t.Fatal(err)
		}
		users[user] = true
		p, ok := got[id]
		switch {
		case channel != "WEBHOOK" || prov != "webhook":
			t.Errorf("delivery %s: channel %s provider %s, want WEBHOOK by webhook", id, channel, prov)
		case !ok:
			t.Errorf("delivery %s (%s) never reached the receiver", id, user)
		case p.EventID != ev.EventID || p.Recipient.UserID != user || p.Channel != "WEBHOOK":
			t.Errorf("delivery %s: the receiver got %+v, want event %s for %s", id, p, ev.EventID, user)
		case p.IdempotencyKey != tenant+":"+id || p.header.Get("Idempotency-Key") != p.IdempotencyKey || p.header.Get("X-Herald-Delivery") != id:
			t.Errorf("delivery %s: idempotency key %q / header %q, delivery header %q", id, p.IdempotencyKey,
				p.header.Get("Idempotency-Key"), p.header.Get("X-Herald-Delivery"))
		case p.Title != "New reservation" || p.Body != "Maria Rossi, 4 people at 20:30":
			t.Errorf("delivery %s: title %q body %q", id, p.Title, p.Body)
		case msgID != p.messageID:
			t.Errorf("delivery %s: provider_message_id %q, the receiver answered %q", id, msgID, p.messageID)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(users) != staffCount {
		t.Errorf("deliveries for %v, want the %d staff members", users, staffCount)
	}

	// `herald plugins ls` shows the new plugin, as in the guide.
	out, err := e.cli("plugins", "ls")
	if err != nil {
		t.Fatalf("herald plugins ls: %v\n%s", err, out)
	}
	if !regexpMatch(fmt.Sprintf(`(?m)^webhook\s+0\.1\.0\s+WEBHOOK\s+webhook\s+serving\s+%d\s`, st.PID), out) {
		t.Errorf("herald plugins ls does not list the webhook plugin serving:\n%s", out)
	}
}
