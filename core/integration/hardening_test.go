package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestPluginNewPinStopsServingProcess runs EMAIL's plugin unpinned, then
// reloads the rules with a checksum pin the running binary does not have:
// the serving process stops, EMAIL's provider shows refused with the
// mismatch (admin API, `herald plugins ls`, log), its deliveries wait as
// RETRY and none reaches the sink; pinning the right checksum sends each
// of them once.
func TestPluginNewPinStopsServingProcess(t *testing.T) {
	e := newPluginEnv(t, testenv.PluginVariant(t, "sink"))
	good := sha256File(t, e.pluginDir+"/herald-plugin-sink")
	wrong := strings.Repeat("0f", 32)
	rulesWith := func(emailSum string) string {
		return pluginRules(30,
			channelSpec{name: "EMAIL", providers: []provider{{checksum: emailSum, config: map[string]string{"record_file": e.record}}}},
			channelSpec{name: "PUSH", providers: []provider{{checksum: good, config: map[string]string{"record_file": e.record}}}})
	}
	e.writeRules(rulesWith(""))
	d := e.start()
	before := e.plugin("EMAIL", "sink")
	if before.State != pluginhost.StateServing || before.PID == 0 {
		t.Fatalf("EMAIL before the pin = %+v, want serving", before)
	}

	e.writeRules(rulesWith(wrong))
	e.until(30*time.Second, func() bool {
		st := e.plugin("EMAIL", "sink")
		return st.State == pluginhost.StateRefused && st.PID == 0 && strings.Contains(st.LastError, "checksum mismatch") &&
			strings.Contains(st.LastError, wrong)
	}, func() string { return fmt.Sprintf("EMAIL refused by the new pin: %+v", e.plugins()) })
	e.until(10*time.Second, func() bool { return !processAlive(before.PID) },
		func() string { return fmt.Sprintf("EMAIL's old process %d stopped", before.PID) })
	out, err := e.cli("plugins", "ls")
	if err != nil {
		t.Fatalf("herald plugins ls: %v\n%s", err, out)
	}
	if !regexpMatch(`(?m)^sink\s+-\s+EMAIL\s+sink\s+refused\s+-\s+-\s+0\s+\S+\s+checksum mismatch`, out) {
		t.Errorf("herald plugins ls does not show EMAIL refused for a checksum mismatch:\n%s", out)
	}
	if !logHasLine(d.Log(), "does not match the new checksum pin", "channel=EMAIL") {
		t.Errorf("herald log does not say the running EMAIL plugin was refused by the new pin")
	}

	const events = 3
	for i := range events {
		if _, _, err := e.client().Emit(context.Background(), reservation(fmt.Sprintf("newpin-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	e.until(30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE channel = 'PUSH' AND status = 'SENT'`) == events*3 &&
			e.count(`SELECT count(*) FROM deliveries WHERE channel = 'EMAIL' AND status = 'RETRY'
				AND last_error LIKE '%no provider available%'`) == events*3
	}, func() string { return "PUSH sent and every EMAIL delivery waiting as RETRY: " + e.statusSummary() })
	for _, r := range e.records() {
		if r.Channel == "EMAIL" {
			t.Fatalf("the sink received EMAIL delivery %s after the pin refused its process", r.DeliveryID)
		}
	}

	e.writeRules(rulesWith(good))
	e.waitAllSent(events*6, 60*time.Second)
	e.assertExactlyOnce(events * 6)
}

// TestReadyzFollowsBroker runs herald serve over a broker it reaches
// through a proxy that the test breaks (the shared broker keeps running):
// /readyz goes 503 {"status":"not ready"} with no detail, the admin API's
// /admin/v1/ready says "broker: unreachable" (with the admin token), and
// both come back to ready once the proxy is restored.
func TestReadyzFollowsBroker(t *testing.T) {
	e := newEnv(t, "sent")
	u, err := url.Parse(e.broker.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr
	e.cfgAMQPURL = u.String()
	e.writeConfig()
	e.start()

	get := func(url, token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	public := func(code int, body string) func() bool {
		return func() bool { c, b := get(e.apiURL+"/readyz", ""); return c == code && b == body }
	}
	admin := func(code int, reasons string) func() bool {
		return func() bool {
			c, b := get(e.admin+"/admin/v1/ready", e.adminToken)
			var st struct{ Reasons []string }
			return c == code && json.Unmarshal([]byte(b), &st) == nil && strings.Join(st.Reasons, ",") == reasons
		}
	}
	last := func(url, token string) func() string {
		return func() string { c, b := get(url, token); return fmt.Sprintf("%s: %d %s", url, c, b) }
	}
	e.until(10*time.Second, admin(200, ""), last(e.admin+"/admin/v1/ready", e.adminToken))
	if c, _ := get(e.admin+"/admin/v1/ready", ""); c != http.StatusUnauthorized {
		t.Errorf("/admin/v1/ready without the token: %d, want 401", c)
	}

	proxy.Break()
	e.until(20*time.Second, public(503, `{"status":"not ready"}`), last(e.apiURL+"/readyz", ""))
	e.until(5*time.Second, admin(503, "broker: unreachable"), last(e.admin+"/admin/v1/ready", e.adminToken))

	proxy.Restore()
	e.until(30*time.Second, public(200, `{"status":"ready"}`), last(e.apiURL+"/readyz", ""))
	e.until(5*time.Second, admin(200, ""), last(e.admin+"/admin/v1/ready", e.adminToken))
}
