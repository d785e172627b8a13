package integration

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/core/internal/tools/devpeer"
)

// TestSlackWebhookThroughTheDaemon runs the real slack plugin binary in
// webhook mode under a real `herald serve` against the incoming-webhook
// stand-in of `herald devpeers`: the webhook URLs come from the daemon's
// environment (env: references in a map field), staff1 and staff2 land on
// the "ops" webhook (the default, and staff2's slack_webhook attribute),
// and staff3's revoked webhook ends FAILED with code webhook_revoked after
// one attempt.
func TestSlackWebhookThroughTheDaemon(t *testing.T) {
	e := newEnv(t, "sent")
	e.pluginDir = testenv.PluginBinaries(t, "slack")
	sink := &lockedLog{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	peers, err := devpeer.Start(ctx, devpeer.Config{HTTPAddr: "127.0.0.1:0", Log: sink})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peers.Close() })
	e.daemonEnv = append(e.daemonEnv,
		"HERALD_TEST_SLACK_OPS="+peers.HTTPURL()+"/services/T0HERALDDEV/B0OPS/demo",
		"HERALD_TEST_SLACK_GONE="+peers.HTTPURL()+"/services/T0HERALDDEV/B0GONE/"+devpeer.SlackHookRevoked)
	e.writeConfig()
	dir := staff
	dir.Recipients = append([]directory.Recipient(nil), staff.Recipients...)
	dir.Recipients[1].Attributes = map[string]string{"slack_webhook": "ops"}
	dir.Recipients[2].Attributes = map[string]string{"slack_webhook": "gone"}
	if err := store.ImportDirectory(context.Background(), e.db.Pool, e.tenant, &dir); err != nil {
		t.Fatal(err)
	}
	e.writeRules(`
defaults {
  time_zone = "UTC"
}
channel "SLACK" {
  best_effort = true
  providers = [{
    plugin = "slack"
    name   = "hooks"
    config = {
      mode            = "webhook"
      webhooks        = { ops = "env:HERALD_TEST_SLACK_OPS", gone = "env:HERALD_TEST_SLACK_GONE" }
      default_webhook = "ops"
      timeout         = "5s"
    }
  }]
}
event "RESERVATION_REQUESTED" {
  audience {
    group = "restaurant:{{ .payload.restaurant_id }}"
    roles = ["MANAGER", "CHEF", "WAITER"]
  }
  mandatory   = ["SLACK"]
  quiet_hours = "ignore"
  inbox {
    title = "New reservation"
    body  = "{{ .payload.customer_name }}, {{ .payload.pax }} people"
  }
  template "SLACK" {
    title = "New reservation"
    body  = "{{ .payload.customer_name }}, {{ .payload.pax }} people"
    data  = { blocks = "[{\"type\": \"section\", \"text\": {\"type\": \"mrkdwn\", \"text\": {{ json .payload.customer_name }}}}]" }
  }
}
`)
	// The revoked hook is named in the health message, but the live one
	// keeps the provider serving.
	e.start()
	if _, _, err := e.client().Emit(context.Background(), reservation("hook-1")); err != nil {
		t.Fatal(err)
	}
	var statuses string
	testenv.Eventually(t, 30*time.Second, func() bool {
		statuses = e.statusSummary()
		return e.count(`SELECT count(*) FROM deliveries WHERE status IN ('SENT', 'FAILED')`) == 3
	}, "3 final deliveries; statuses %s", statuses)
	if n := e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT' AND user_id IN ('staff1', 'staff2') AND provider_message_id = 'webhook:ops'`); n != 2 {
		t.Errorf("%d deliveries SENT through webhook:ops, want staff1 and staff2; %s", n, e.statusSummary())
	}
	var status, lastErr string
	var attempts int
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT status, last_error, attempts FROM deliveries WHERE user_id = 'staff3'`).Scan(&status, &lastErr, &attempts); err != nil {
		t.Fatal(err)
	}
	if status != "FAILED" || !strings.Contains(lastErr, "(code webhook_revoked)") || attempts != 1 || strings.Contains(lastErr, "/services/") {
		t.Errorf("staff3: %s after %d attempts, last error %q; want FAILED once with code webhook_revoked and no URL", status, attempts, lastErr)
	}
	if n := strings.Count(sink.String(), "webhook posted hook=T0HERALDDEV/B0OPS"); n != 2 {
		t.Errorf("the stand-in logged %d posts to B0OPS, want 2:\n%s", n, sink.String())
	}
	if !strings.Contains(sink.String(), "blocks=1") {
		t.Errorf("the posts carried no blocks:\n%s", sink.String())
	}
	t.Logf("stand-in log:\n%s", sink.String())
}

// lockedLog is an io.Writer the stand-in logs to, read by the test.
type lockedLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
