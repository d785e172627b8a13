package pluginhost

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/heraldhq/herald/core/internal/api/openapitest"
	"github.com/heraldhq/herald/core/internal/channel"
)

func TestAdminHandler(t *testing.T) {
	t.Parallel()
	env := startHost(t, []channel.Config{sinkChannel("TEST", nil)}, nil)
	srv := httptest.NewServer(AdminHandler(env.h))
	defer srv.Close()
	openapitest.Watch(t, srv.URL)
	before := statusOf(t, env.h, "TEST", "sink")

	tests := []struct {
		name       string
		method     string
		path       string
		setup      func()
		wantStatus int
		check      func(t *testing.T, body []byte)
	}{
		{name: "list", method: "GET", path: "/admin/v1/plugins", wantStatus: 200, check: func(t *testing.T, body []byte) {
			var st []ProviderStatus
			if err := json.Unmarshal(body, &st); err != nil {
				t.Fatal(err)
			}
			if len(st) != 1 || st[0].Name != "sink" || st[0].State != StateServing || st[0].PID != before.PID {
				t.Errorf("list = %+v", st)
			}
		}},
		{name: "reload", method: "POST", path: "/admin/v1/plugins/sink/reload", wantStatus: 200, check: func(t *testing.T, body []byte) {
			var out ReloadResponse
			if err := json.Unmarshal(body, &out); err != nil {
				t.Fatal(err)
			}
			if len(out.Reloaded) != 1 || out.Reloaded[0].PID == before.PID || out.Reloaded[0].State != StateServing {
				t.Errorf("reload = %+v (pid before %d)", out, before.PID)
			}
		}},
		{name: "reload unknown", method: "POST", path: "/admin/v1/plugins/nope/reload", wantStatus: 404, check: func(t *testing.T, body []byte) {
			if !strings.Contains(string(body), "unknown plugin") {
				t.Errorf("body = %s", body)
			}
		}},
		{name: "broken binary keeps the old one", method: "POST", path: "/admin/v1/plugins/TEST%2Fsink/reload", wantStatus: 409,
			setup: func() { installPlugin(t, sinkVariant(t, "version=9.9.9-broken", "brokenHealth=true"), env.dir, "sink") },
			check: func(t *testing.T, body []byte) {
				var ae AdminError
				if err := json.Unmarshal(body, &ae); err != nil || !strings.Contains(ae.Detail, "health check failed") {
					t.Errorf("body = %s", body)
				}
				if st := statusOf(t, env.h, "TEST", "sink"); st.State != StateServing || st.Version != "1.0.0" {
					t.Errorf("after failed reload: %+v", st)
				}
			}},
		{name: "wrong method", method: "DELETE", path: "/admin/v1/plugins", wantStatus: 405},
	}
	// Sequential: the cases act on one host in order.
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var buf strings.Builder
			_, _ = io.Copy(&buf, resp.Body)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, buf.String())
			}
			if tc.check != nil {
				tc.check(t, []byte(buf.String()))
			}
		})
	}
}
