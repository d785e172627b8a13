package integration

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/internal/pushpeer"
)

// TestPushWebPushAndAPNsEndToEnd runs herald serve with the real push
// plugin configured for Web Push and APNs against our peers (one HTTP/2
// TLS server): the directory's subscription and device token of staff1
// get the reservation (the Web Push peer decrypts it), while the
// subscription the push service answers 410 for (staff2) and the token
// APNs calls Unregistered (staff3) end FAILED as gone and are deleted
// from the directory, so no later event tries them.
func TestPushWebPushAndAPNsEndToEnd(t *testing.T) {
	e := newEnv(t, "sent")
	e.pluginDir = testenv.PluginBinaries(t, "sink", "push")
	e.writeConfig()

	vapid, err := pushpeer.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	p8, apnsPub, err := pushpeer.NewAPNsKey()
	if err != nil {
		t.Fatal(err)
	}
	wp := pushpeer.NewWebPush(vapid.Public)
	ap := &pushpeer.APNs{Key: apnsPub, KeyID: "KEYID00001", TeamID: "TEAMID0001", Topic: "com.example.herald"}
	mux := http.NewServeMux()
	mux.Handle(pushpeer.WebPushPath, wp)
	mux.Handle(pushpeer.APNsPath, ap)
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(e.dir, "push-ca.pem")
	keyFile := filepath.Join(e.dir, "AuthKey_KEYID00001.p8")
	for path, b := range map[string][]byte{ca: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), keyFile: p8} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	push := fmt.Sprintf(`providers = [{ plugin = "push", config = {
    providers = ["webpush", "apns"]
    ca_file = %q
    vapid_subject = "mailto:ops@example.com"
    webpush_private_endpoints = true
    vapid_public_key = %q
    vapid_private_key = %q
    apns_endpoint = %q
    apns_key = "file:%s"
    apns_key_id = "KEYID00001"
    apns_team_id = "TEAMID0001"
    apns_topic = "com.example.herald"
  } }]`, ca, vapid.Public, vapid.Private, srv.URL, keyFile)
	body := fmt.Sprintf(sinkRules, e.record, "sent")
	sinkPush := fmt.Sprintf(`providers = [{ plugin = "sink", config = { record_file = "%s", outcome = "sent" } }]
}
channel "WEBSOCKET"`, e.record)
	if !strings.Contains(body, sinkPush) {
		t.Fatal("sinkRules changed: cannot find the PUSH provider to replace")
	}
	body = strings.Replace(body, sinkPush, push+"\n}\nchannel \"WEBSOCKET\"", 1)
	e.writeRules(body)

	sub := func(id string) directory.Device {
		s := pushpeer.DevSubscription(srv.URL, id)
		return directory.Device{Kind: directory.DeviceWebPush, Endpoint: s.Endpoint, P256dh: s.P256dh, Auth: s.Auth}
	}
	tok := func(c string) directory.Device {
		return directory.Device{Kind: directory.DeviceAPNs, Token: strings.Repeat(c, 64)}
	}
	dir := staff
	dir.Recipients = append([]directory.Recipient(nil), staff.Recipients...)
	dir.Recipients[0].Devices = []directory.Device{sub("staff1-browser"), tok("a")}
	dir.Recipients[1].Devices = []directory.Device{sub("staff2-gone")}
	dir.Recipients[2].Devices = []directory.Device{tok("c")}
	if err := store.ImportDirectory(context.Background(), e.db.Pool, e.tenant, &dir); err != nil {
		t.Fatal(err)
	}
	wp.Script("staff2-gone", pushpeer.Reply{Status: http.StatusGone})
	ap.Script(strings.Repeat("c", 64), pushpeer.Reply{Status: http.StatusGone, Reason: "Unregistered"})

	e.start()
	if _, _, err := e.client().Emit(context.Background(), reservation("push-1")); err != nil {
		t.Fatal(err)
	}
	final := `SELECT count(*) FROM deliveries WHERE channel = 'PUSH' AND status IN ('SENT', 'FAILED')`
	testenv.Eventually(t, 30*time.Second, func() bool { return e.count(final) == 3 }, "3 PUSH deliveries final (now: %s)", e.statusSummary())

	status := map[string]string{}
	rows, err := e.db.Pool.Query(context.Background(), `SELECT user_id, status, last_error FROM deliveries WHERE channel = 'PUSH'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var u, s, le string
		if err := rows.Scan(&u, &s, &le); err != nil {
			t.Fatal(err)
		}
		status[u] = s + " " + le
	}
	rows.Close()
	if !strings.HasPrefix(status["staff1"], "SENT") {
		t.Errorf("staff1: %s, want SENT", status["staff1"])
	}
	for _, u := range []string{"staff2", "staff3"} {
		if !strings.HasPrefix(status[u], "FAILED") || !strings.Contains(status[u], "device_gone") {
			t.Errorf("%s: %q, want FAILED with code device_gone", u, status[u])
		}
	}
	if n := e.count(`SELECT count(*) FROM delivery_attempt_log a JOIN deliveries d USING (delivery_id) WHERE d.channel = 'PUSH' AND d.user_id <> 'staff1'`); n != 2 {
		t.Errorf("gone deliveries tried %d times in all, want once each (not retried)", n)
	}
	// The gone devices are deleted; staff1's stay.
	testenv.Eventually(t, 10*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM recipient_devices WHERE tenant_id = $1 AND user_id IN ('staff2', 'staff3')`, e.tenant) == 0
	}, "gone devices removed")
	if n := e.count(`SELECT count(*) FROM recipient_devices WHERE tenant_id = $1 AND user_id = 'staff1'`, e.tenant); n != 2 {
		t.Errorf("staff1 has %d devices, want 2", n)
	}

	msgs := wp.Messages()
	if len(msgs) != 1 || msgs[0].Subscription != "staff1-browser" {
		t.Fatalf("web push messages %+v, want one to staff1-browser", msgs)
	}
	var payload struct {
		Title string            `json:"title"`
		Body  string            `json:"body"`
		Data  map[string]string `json:"data"`
	}
	if err := json.Unmarshal(msgs[0].Plaintext, &payload); err != nil {
		t.Fatal(err)
	}
	if payload.Title != "New reservation" || payload.Body != "Rossi, 4 people" || payload.Data["herald_event_type"] != "RESERVATION_REQUESTED" {
		t.Errorf("decrypted payload %s: want the reservation's inbox title and body", msgs[0].Plaintext)
	}
	if am := ap.Messages(); len(am) != 1 || am[0].Token != strings.Repeat("a", 64) {
		t.Errorf("apns messages %+v, want one to staff1's token", am)
	}
}
