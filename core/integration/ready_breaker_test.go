package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestReadyzReturnsAfterBrokerOutageOnAQuietDaemon: the websocket plugin
// reports itself unhealthy while the broker is unreachable, so its circuit
// opens; the circuit closes only on a probe send, and a quiet daemon sends
// nothing. Once the broker is back, /readyz must come back to 200 within
// the breaker's cooldown plus a health interval, with no traffic at all
// (it used to stay 503 until a send came, which a daemon out of service
// never gets).
func TestReadyzReturnsAfterBrokerOutageOnAQuietDaemon(t *testing.T) {
	e := newEnv(t, "sent")
	u, err := url.Parse(e.broker.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr
	e.pluginDir = filepath.Join(e.dir, "plugins")
	if err := os.MkdirAll(e.pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.InstallPlugin(t, testenv.PluginVariant(t, "sink"), e.pluginDir, "sink")
	testenv.InstallPlugin(t, testenv.PluginVariant(t, "websocket"), e.pluginDir, "websocket")
	e.cfgAMQPURL = u.String()
	e.writeConfig()
	e.writeRules(liveRules(e.record, u.String()))
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
	reasons := func() []string {
		_, b := get(e.admin+"/admin/v1/ready", e.adminToken)
		var st struct{ Reasons []string }
		_ = json.Unmarshal([]byte(b), &st)
		return st.Reasons
	}
	describe := func() string { return fmt.Sprintf("reasons %q", reasons()) }
	e.until(30*time.Second, func() bool { c, _ := get(e.apiURL+"/readyz", ""); return c == http.StatusOK }, describe)

	proxy.Break()
	// Two failed health checks (10 s apart by default) open the circuit.
	e.until(60*time.Second, func() bool {
		for _, r := range reasons() {
			if strings.Contains(r, "channel WEBSOCKET") && strings.Contains(r, "circuit_open") {
				return true
			}
		}
		return false
	}, describe)

	proxy.Restore()
	// Cooldown (10 s) plus a health interval (10 s), with margin; no event
	// is posted, so no send can close the circuit.
	e.until(45*time.Second, func() bool {
		c, b := get(e.apiURL+"/readyz", "")
		return c == http.StatusOK && b == `{"status":"ready"}`
	}, describe)
}
