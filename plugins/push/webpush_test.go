package main

import (
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/SherClockHolmes/webpush-go"
	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/internal/pushpeer"
	"github.com/heraldhq/herald/plugins/internal/channeltest"
	"github.com/heraldhq/herald/sdk"
)

// startTLSPeer serves h over TLS with HTTP/2 and returns its URL and a CA
// file that trusts it.
func startTLSPeer(t *testing.T, h http.Handler) (string, string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv.URL, ca
}

type webPushSetup struct {
	peer     *pushpeer.WebPush
	url, ca  string
	pub, key string
}

func startWebPush(t *testing.T) webPushSetup {
	t.Helper()
	key, pub, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	peer := pushpeer.NewWebPush(pub)
	url, ca := startTLSPeer(t, peer)
	return webPushSetup{peer: peer, url: url, ca: ca, pub: pub, key: key}
}

func (w webPushSetup) config() map[string]any {
	return map[string]any{
		FieldProviders:       []any{ProviderWebPush},
		FieldVAPIDSubject:    "mailto:ops@example.com",
		FieldVAPIDPublicKey:  w.pub,
		FieldVAPIDPrivateKey: w.key,
		FieldCAFile:          w.ca,
		FieldTimeout:         "5s",
		FieldWebPushPrivate:  true, // the peer listens on loopback
	}
}

func (w webPushSetup) device(id string) sdk.Device {
	s := pushpeer.DevSubscription(w.url, id)
	return sdk.Device{Kind: sdk.DeviceWebPush, Token: s.Endpoint, Endpoint: s.Endpoint, P256dh: s.P256dh, Auth: s.Auth}
}

func deviceDelivery(id string, devs ...sdk.Device) sdk.Delivery {
	d := delivery(id)
	d.Recipient.Devices = devs
	return d
}

// TestWebPushPeerDecryptsWhatWasSent: the push service of ours checks the
// VAPID JWT against the configured public key and decrypts the payload
// with the subscription's private key; the plaintext is the message the
// plugin built, and TTL / Urgency / Topic come from the template's data
// (taken out of the data the service worker gets) or the config.
func TestWebPushPeerDecryptsWhatWasSent(t *testing.T) {
	t.Parallel()
	w := startWebPush(t)
	p := configure(t, w.config())
	d1 := deviceDelivery("d1", w.device("s1"))
	d2 := deviceDelivery("d2", w.device("s2"))
	d2.Content.Data = json.RawMessage(`{"reservation_id":"r-7","webpush_ttl":"90","webpush_urgency":"high","webpush_topic":"reservation-r7"}`)
	got := send(t, p, d1, d2)
	if diff := cmp.Diff([]sdk.Result{sdk.Sent("d1", ""), sdk.Sent("d2", "")}, got, ignoreText); diff != "" {
		t.Fatalf("results (-want +got):\n%s", diff)
	}
	msgs := w.peer.Messages()
	if len(msgs) != 2 {
		t.Fatalf("peer accepted %d messages, want 2", len(msgs))
	}
	bySub := map[string]pushpeer.WebPushMessage{}
	for _, m := range msgs {
		bySub[m.Subscription] = m
	}
	want1 := `{"title":"New reservation","body":"4 people at 20:00","data":{"herald_delivery_id":"d1","herald_event_type":"RESERVATION_REQUESTED",` +
		`"herald_idempotency_key":"idem-d1","herald_notification_id":"n-d1","herald_severity":"info","pax":4,"reservation_id":"r-42"}}`
	m1 := bySub["s1"]
	if string(m1.Plaintext) != want1 {
		t.Errorf("decrypted payload\n got %s\nwant %s", m1.Plaintext, want1)
	}
	if m1.TTL != 86400 || m1.Urgency != "normal" || m1.Topic != topicOf("idem-d1") || m1.Subject != "mailto:ops@example.com" {
		t.Errorf("s1 headers: ttl %d urgency %q topic %q sub %q; want the config's defaults and the key's topic", m1.TTL, m1.Urgency, m1.Topic, m1.Subject)
	}
	if got[0].ProviderMessageID != m1.Location {
		t.Errorf("provider message id %q, want the Location %q", got[0].ProviderMessageID, m1.Location)
	}
	m2 := bySub["s2"]
	var p2 WebPushPayload
	if err := json.Unmarshal(m2.Plaintext, &p2); err != nil {
		t.Fatal(err)
	}
	if _, ok := p2.Data["webpush_ttl"]; ok || string(p2.Data["reservation_id"]) != `"r-7"` {
		t.Errorf("s2 data %s: want the options taken out and the data kept", m2.Plaintext)
	}
	if m2.TTL != 90 || m2.Urgency != "high" || m2.Topic != "reservation-r7" {
		t.Errorf("s2 headers: ttl %d urgency %q topic %q; want the template's 90, high, reservation-r7", m2.TTL, m2.Urgency, m2.Topic)
	}
}

// TestWebPushFailures: 404 and 410 mark the subscription gone, 429 is rate
// limited with the Retry-After, 5xx retried with it, a VAPID key the push
// service does not know is a retryable credential problem, and a template
// option that is not valid is permanent and names the key.
func TestWebPushFailures(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		reply pushpeer.Reply
		data  string
		want  sdk.Result
	}{
		"410 gone":          {reply: pushpeer.Reply{Status: 410}, want: sdk.Gone("d1", "")},
		"404 not found":     {reply: pushpeer.Reply{Status: 404}, want: sdk.Gone("d1", "")},
		"429 retry after":   {reply: pushpeer.Reply{Status: 429, RetryAfter: "7"}, want: sdk.RateLimited("d1", "", 7*time.Second)},
		"503 retry after":   {reply: pushpeer.Reply{Status: 503, RetryAfter: "3"}, want: sdk.Retry("d1", "", 3*time.Second)},
		"500":               {reply: pushpeer.Reply{Status: 500}, want: sdk.Retry("d1", "", 0)},
		"400":               {reply: pushpeer.Reply{Status: 400}, want: sdk.Permanent("d1", "", "http_400")},
		"bad urgency":       {data: `{"webpush_urgency":"asap"}`, want: sdk.Permanent("d1", "", CodeInvalidOption)},
		"bad ttl":           {data: `{"webpush_ttl":"forever"}`, want: sdk.Permanent("d1", "", CodeInvalidOption)},
		"bad topic":         {data: `{"webpush_topic":"not a topic!"}`, want: sdk.Permanent("d1", "", CodeInvalidOption)},
		"payload too large": {data: `{"big":"` + strings.Repeat("x", 5000) + `"}`, want: sdk.Permanent("d1", "", CodePayloadTooLarge)},
		"unknown vapid key": {reply: pushpeer.Reply{Status: -1}, want: sdk.Retry("d1", "", 0)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := startWebPush(t)
			dev := w.device("s1")
			switch {
			case tc.reply.Status == -1:
				_, otherPub, err := webpush.GenerateVAPIDKeys()
				if err != nil {
					t.Fatal(err)
				}
				w.peer.VAPIDPublicKey = otherPub
			case tc.reply.Status != 0:
				w.peer.Script("s1", tc.reply)
			}
			p := configure(t, w.config())
			d := deviceDelivery("d1", dev)
			if tc.data != "" {
				d.Content.Data = json.RawMessage(tc.data)
			}
			want := tc.want
			if want.Code == sdk.CodeDeviceGone {
				want.GoneDevices = []string{dev.Token}
			}
			got := send(t, p, d)
			if diff := cmp.Diff([]sdk.Result{want}, got, ignoreText); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if got[0].Reason == "" {
				t.Errorf("no reason: %+v", got[0])
			}
			if tc.want.Code == CodeInvalidOption && !strings.Contains(got[0].Reason, "webpush_") {
				t.Errorf("reason %q does not name the template key", got[0].Reason)
			}
			if n := len(w.peer.Messages()); n != 0 {
				t.Errorf("peer accepted %d messages", n)
			}
		})
	}
}

// TestMixedDevices: one plugin with fcm and webpush sends to both kinds
// of a recipient's devices, each through its provider; a gone
// subscription next to an accepting FCM token is Sent and lists the
// subscription as gone; a kind no provider serves is no address.
func TestMixedDevices(t *testing.T) {
	t.Parallel()
	w := startWebPush(t)
	fcm := startFCMPeer(t)
	cfg := w.config()
	for k, v := range peerConfig(fcm) {
		if k != FieldTimeout {
			cfg[k] = v
		}
	}
	cfg[FieldProviders] = []any{ProviderFCM, ProviderWebPush}
	p := configure(t, cfg)
	w.peer.Script("gone", pushpeer.Reply{Status: 410})
	gone := w.device("gone")
	got := send(t, p,
		deviceDelivery("d1", sdk.Device{Kind: sdk.DeviceFCM, Token: "tok-a"}, w.device("s1")),
		deviceDelivery("d2", sdk.Device{Kind: sdk.DeviceFCM, Token: "tok-b"}, gone),
		deviceDelivery("d3", sdk.Device{Kind: sdk.DeviceAPNs, Token: strings.Repeat("ab", 32)}),
	)
	want := []sdk.Result{sdk.Sent("d1", ""), withGone(sdk.Sent("d2", ""), gone.Token), sdk.Permanent("d3", "", CodeNoAddress)}
	if diff := cmp.Diff(want, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if n, m := len(fcm.received()), len(w.peer.Messages()); n != 2 || m != 1 {
		t.Errorf("fcm got %d messages, webpush %d; want 2 and 1", n, m)
	}
}

func TestConfigureRefusesBadWebPushConfig(t *testing.T) {
	t.Parallel()
	key, pub, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	good := func() map[string]any {
		return map[string]any{FieldProviders: []any{ProviderWebPush}, FieldVAPIDSubject: "https://example.com/contact",
			FieldVAPIDPublicKey: pub, FieldVAPIDPrivateKey: key}
	}
	channeltest.RefusesBadConfig(t, New, good, map[string]channeltest.BadConfig{
		"unknown provider":     {Edit: func(m map[string]any) { m[FieldProviders] = []any{"webpush", "mqtt"} }, WantField: FieldProviders},
		"no providers":         {Edit: func(m map[string]any) { m[FieldProviders] = []any{} }, WantField: FieldProviders},
		"no subject":           {Edit: func(m map[string]any) { delete(m, FieldVAPIDSubject) }, WantField: FieldVAPIDSubject},
		"subject not a uri":    {Edit: func(m map[string]any) { m[FieldVAPIDSubject] = "ops@example.com" }, WantField: FieldVAPIDSubject},
		"no public key":        {Edit: func(m map[string]any) { delete(m, FieldVAPIDPublicKey) }, WantField: FieldVAPIDPublicKey},
		"public key malformed": {Edit: func(m map[string]any) { m[FieldVAPIDPublicKey] = "not-a-key!" }, WantField: FieldVAPIDPublicKey},
		"public key short":     {Edit: func(m map[string]any) { m[FieldVAPIDPublicKey] = pub[:40] }, WantField: FieldVAPIDPublicKey},
		"private key malformed": {Edit: func(m map[string]any) { m[FieldVAPIDPrivateKey] = "AAAA" },
			WantField: FieldVAPIDPrivateKey},
		"keys not a pair":       {Edit: func(m map[string]any) { m[FieldVAPIDPrivateKey] = otherKey }, WantField: FieldVAPIDPublicKey},
		"ttl too long":          {Edit: func(m map[string]any) { m[FieldWebPushTTL] = "1000h" }, WantField: FieldWebPushTTL},
		"urgency not in enum":   {Edit: func(m map[string]any) { m[FieldWebPushUrgency] = "asap" }, WantField: FieldWebPushUrgency},
		"fcm field without fcm": {Edit: func(m map[string]any) { m[FieldProjectID] = "p" }, WantField: FieldProjectID},
		"ca file not pem":       {Edit: func(m map[string]any) { m[FieldCAFile] = "/etc/hostname" }, WantField: FieldCAFile},
	})
}

// TestWebPushBadSubscriptionKeys: a subscription whose keys do not decode
// to a P-256 point (from a directory imported before kinds were checked,
// say) is permanent, and nothing is posted.
func TestWebPushBadSubscriptionKeys(t *testing.T) {
	t.Parallel()
	w := startWebPush(t)
	p := configure(t, w.config())
	dev := w.device("s1")
	dev.P256dh = "BAAA"
	got := send(t, p, deviceDelivery("d1", dev))
	if diff := cmp.Diff([]sdk.Result{sdk.Permanent("d1", "", CodeInvalidSubscription)}, got, ignoreText); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if n := len(w.peer.Messages()); n != 0 {
		t.Errorf("peer accepted %d messages", n)
	}
}

// TestWebPushRefusesPrivateEndpoints: without webpush_private_endpoints, a
// subscription on a loopback address (a user pointing Herald at its own
// network) is refused before anything is sent, and the device is kept.
func TestWebPushRefusesPrivateEndpoints(t *testing.T) {
	t.Parallel()
	w := startWebPush(t)
	cfg := w.config()
	delete(cfg, FieldWebPushPrivate)
	p := configure(t, cfg)
	local := func(id, host string) sdk.Device {
		d := w.device(id)
		d.Endpoint = strings.Replace(d.Endpoint, "127.0.0.1", host, 1)
		d.Token = d.Endpoint
		return d
	}
	for _, host := range []string{"127.0.0.1", "localhost", "[::1]"} {
		got := send(t, p, deviceDelivery("d1", local("s1", host)))
		if diff := cmp.Diff([]sdk.Result{sdk.Permanent("d1", "", CodeEndpointRefused)}, got, ignoreText); diff != "" {
			t.Errorf("%s: results (-want +got):\n%s", host, diff)
		}
	}
	if n := len(w.peer.Messages()); n != 0 {
		t.Errorf("peer accepted %d messages", n)
	}
}

func TestPublicOnly(t *testing.T) {
	t.Parallel()
	for addr, public := range map[string]bool{
		"8.8.8.8:443": true, "[2001:4860:4860::8888]:443": true,
		"127.0.0.1:443": false, "10.1.2.3:443": false, "192.168.0.1:443": false, "172.16.0.1:443": false,
		"169.254.169.254:80": false, "0.0.0.0:443": false, "[::1]:443": false, "[fe80::1]:443": false,
		"[fd00::1]:443": false, "100.64.0.1:443": false, "[::ffff:127.0.0.1]:443": false, "224.0.0.1:443": false,
	} {
		if err := publicOnly("tcp", addr, nil); (err == nil) != public {
			t.Errorf("publicOnly(%s) = %v, want public %v", addr, err, public)
		}
	}
}

// TestPublicAddrRefusesEverySpecialPurposeRange checks the filter's
// decision (nothing is dialled) for an address at both ends of every
// IANA special-purpose range and for public neighbours just outside them.
func TestPublicAddrRefusesEverySpecialPurposeRange(t *testing.T) {
	t.Parallel()
	cases := []struct {
		addr   string
		public bool
	}{
		// Public neighbours.
		{"8.8.8.8", true}, {"1.1.1.1", true}, {"100.63.255.255", true}, {"100.128.0.0", true},
		{"192.0.1.0", true}, {"198.17.255.255", true}, {"198.20.0.0", true}, {"203.0.114.1", true},
		{"223.255.255.254", true}, {"2001:4860:4860::8888", true}, {"2a00:1450:4001::1", true},
		{"2001:200::1", true}, {"2606:4700::1111", true}, {"::ffff:8.8.8.8", true},
		// IPv4 special-purpose.
		{"0.0.0.0", false}, {"0.255.255.255", false}, {"10.0.0.1", false}, {"10.255.255.255", false},
		{"100.64.0.0", false}, {"100.127.255.255", false}, {"127.0.0.1", false}, {"127.255.255.254", false},
		{"169.254.0.1", false}, {"169.254.169.254", false}, {"172.16.0.1", false}, {"172.31.255.255", false},
		{"192.0.0.1", false}, {"192.0.0.9", false}, {"192.0.0.255", false}, {"192.0.2.1", false},
		{"192.31.196.1", false}, {"192.52.193.1", false}, {"192.88.99.1", false}, {"192.168.1.1", false},
		{"192.175.48.1", false}, {"198.18.0.1", false}, {"198.19.255.255", false}, {"198.51.100.7", false},
		{"203.0.113.9", false}, {"224.0.0.1", false}, {"239.255.255.255", false}, {"240.0.0.1", false},
		{"255.255.255.255", false},
		// IPv4-mapped: judged as IPv4.
		{"::ffff:127.0.0.1", false}, {"::ffff:10.0.0.1", false}, {"::ffff:169.254.169.254", false},
		{"::ffff:198.18.0.1", false},
		// IPv6 special-purpose.
		{"::", false}, {"::1", false}, {"::127.0.0.1", false}, {"::8.8.8.8", false},
		{"64:ff9b::7f00:1", false}, {"64:ff9b::808:808", false}, {"64:ff9b:1::1", false}, {"100::1", false},
		{"100:0:0:1::1", false}, {"2001::1", false}, {"2001:0:4136:e378::1", false}, {"2001:2::1", false},
		{"2001:10::1", false}, {"2001:20::1", false}, {"2001:1ff:ffff::1", false}, {"2001:db8::1", false},
		{"2001:db8:ffff::1", false}, {"2002:7f00:1::1", false}, {"2002:808:808::1", false},
		{"2620:4f:8000::1", false}, {"3fff::1", false}, {"3fff:fff:ffff::1", false}, {"5f00::1", false},
		{"fc00::1", false}, {"fd12:3456::1", false}, {"fe80::1", false}, {"fe80::1%eth0", false},
		{"febf::1", false}, {"fec0::1", false}, {"feff::1", false}, {"ff02::1", false}, {"ff0e::1", false},
		// Outside 2000::/3 and unallocated.
		{"4000::1", false}, {"1::1", false}, {"e000::1", false},
	}
	for _, c := range cases {
		ip := netip.MustParseAddr(c.addr)
		if got := publicAddr(ip); got != c.public {
			t.Errorf("publicAddr(%s) = %v, want %v", c.addr, got, c.public)
		}
		port := netip.AddrPortFrom(ip.WithZone(""), 443).String()
		if err := publicOnly("tcp", port, nil); (err == nil) != c.public {
			t.Errorf("publicOnly(%s) = %v, want public %v", port, err, c.public)
		}
	}
}

// TestWebPushUnreachableHidesTheTransportError: a subscription whose
// endpoint does not answer gets one reason whatever went wrong (refused,
// reset, timeout), never the transport's text: the tenant reads
// deliveries' reasons, and "connection refused" against "i/o timeout"
// would tell them which of the daemon's neighbours listen where. The
// refused port is on loopback (webpush_private_endpoints on).
func TestWebPushUnreachableHidesTheTransportError(t *testing.T) {
	t.Parallel()
	w := startWebPush(t)
	p := configure(t, w.config())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	d := w.device("s1")
	u, _ := url.Parse(d.Endpoint)
	d.Endpoint = strings.Replace(d.Endpoint, u.Host, closed, 1)
	d.Token = d.Endpoint
	got := send(t, p, deviceDelivery("d1", d))
	if len(got) != 1 || got[0].Outcome != sdk.OutcomeRetryable {
		t.Fatalf("results: %+v", got)
	}
	if got[0].Reason != unreachable {
		t.Errorf("reason %q, want %q", got[0].Reason, unreachable)
	}
}

// TestNullDataCarriesNoHeraldData: a template whose data renders to JSON
// null (an event with no data for the channel) adds nothing to the push
// payload, in the FCM message and in the Web Push and APNs payloads alike;
// data that is not an object still travels under herald_data.
func TestNullDataCarriesNoHeraldData(t *testing.T) {
	for _, raw := range []string{"", "null", " null\n"} {
		data, opts := splitData(json.RawMessage(raw))
		if len(data) != 0 || len(opts) != 0 {
			t.Errorf("splitData(%q) = %v, %v; want nothing", raw, data, opts)
		}
		msg := buildMessage(sdk.Delivery{DeliveryID: "d1", Content: sdk.Content{Title: "t", Data: json.RawMessage(raw)}}, "tok")
		if _, ok := msg.Data[DataPayload]; ok {
			t.Errorf("FCM data for %q carries %s: %v", raw, DataPayload, msg.Data)
		}
	}
	data, _ := splitData(json.RawMessage(`"text"`))
	if string(data[DataPayload]) != `"text"` {
		t.Errorf("non-object data: %v", data)
	}
	msg := buildMessage(sdk.Delivery{DeliveryID: "d1", Content: sdk.Content{Data: json.RawMessage(`[1]`)}}, "tok")
	if msg.Data[DataPayload] != "[1]" {
		t.Errorf("FCM non-object data: %v", msg.Data)
	}
}
