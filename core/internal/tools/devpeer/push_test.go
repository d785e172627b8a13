package devpeer

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/internal/pushpeer"
	"github.com/heraldhq/herald/sdk"
)

// TestPushStandInsDecryptAndLog runs the real push plugin binary
// configured with the files the TLS peer wrote (its CA, a VAPID pair, an
// APNs key) against the Web Push and APNs stand-ins: the Web Push one
// logs the payload it decrypted, the APNs one the headers and payload.
func TestPushStandInsDecryptAndLog(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the plugin binary")
	}
	sink := newLogSink()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Start(ctx, Config{TLSAddr: "127.0.0.1:0", TLSDir: dir, Log: sink})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = p.Close() })
	if p.HTTPURL() != "" || !strings.HasPrefix(p.TLSURL(), "https://127.0.0.1:") {
		t.Fatalf("urls %q %q: want only the TLS server", p.HTTPURL(), p.TLSURL())
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	bin := filepath.Join(testenv.PluginBinaries(t, "push"), "herald-plugin-push")
	plug, logs := launchPlugin(t, bin)
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	desc, err := plug.Describe(sctx, sdk.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := sdk.CheckConfig(desc.Description.Config, map[string]any{
		"providers":                 []any{"webpush", "apns"},
		"ca_file":                   filepath.Join(dir, FileCA),
		"vapid_subject":             "mailto:dev@herald.example",
		"webpush_private_endpoints": true,
		"vapid_public_key":          read(FileVAPIDPublicKey),
		"vapid_private_key":         read(FileVAPIDPrivateKey),
		"apns_endpoint":             p.TLSURL(),
		"apns_key":                  read(FileAPNsKey),
		"apns_key_id":               "DEVPEER001",
		"apns_team_id":              "DEVPEERTM1",
		"apns_topic":                "example.herald.quickstart",
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plug.Configure(sctx, sdk.ConfigureRequest{ProviderName: "devpeer-push", Config: cfg}); err != nil {
		t.Fatalf("configure: %v", err)
	}
	sub := pushpeer.DevSubscription(p.TLSURL(), "customer42-browser")
	token := strings.Repeat("4a", 32)
	d := sdk.Delivery{DeliveryID: "d1", IdempotencyKey: "demo:d1", Attempt: 1,
		Recipient: sdk.Recipient{UserID: "42", Devices: []sdk.Device{
			{Kind: sdk.DeviceWebPush, Token: sub.Endpoint, Endpoint: sub.Endpoint, P256dh: sub.P256dh, Auth: sub.Auth},
			{Kind: sdk.DeviceAPNs, Token: token},
		}},
		Content: sdk.Content{Title: "Reservation confirmed", Body: "Table for 4 at 20:00", Data: json.RawMessage(`{"reservation_id":"r-1"}`)}}
	resp, err := plug.Send(sctx, sdk.SendRequest{Deliveries: []sdk.Delivery{d}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Results[0]; r.Outcome != sdk.OutcomeSent || strings.Count(r.ProviderMessageID, ",") != 1 {
		t.Fatalf("result %+v, want sent to both devices\nplugin log:\n%s\npeer log:\n%s", r, logs, strings.Join(sink.lines(), "\n"))
	}
	sink.waitLine(t, "webpush", "accepted subscription=customer42-browser", "urgency=normal", "sub=mailto:dev@herald.example",
		`payload={"title":"Reservation confirmed","body":"Table for 4 at 20:00","data":{`, `"herald_idempotency_key":"demo:d1"`, `"reservation_id":"r-1"`)
	sink.waitLine(t, "apns", "accepted token="+token, "topic=example.herald.quickstart", "push_type=alert", "priority=10",
		`"alert":{"body":"Table for 4 at 20:00","title":"Reservation confirmed"}`)
	if n := countLines(sink, "rejected"); n != 0 {
		t.Errorf("the peers rejected %d requests:\n%s", n, strings.Join(sink.lines(), "\n"))
	}
}

func TestTLSPeerNeedsADirectory(t *testing.T) {
	if _, err := Start(context.Background(), Config{TLSAddr: "127.0.0.1:0"}); err == nil || !strings.Contains(err.Error(), "TLSDir") {
		t.Fatalf("Start without TLSDir = %v, want an error naming TLSDir", err)
	}
	if _, err := Start(context.Background(), Config{TLSAddr: "0.0.0.0:0", TLSDir: t.TempDir()}); err == nil {
		t.Fatal("Start on a non-loopback TLS address succeeded")
	}
}

// TestExampleRulesPushConfigConfigures: the PUSH provider of the example
// rules (fcm, webpush and apns with demo keys), in both syntaxes, passes
// the real push plugin's field check and Configure.
func TestExampleRulesPushConfigConfigures(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the plugin binary")
	}
	bin := filepath.Join(testenv.PluginBinaries(t, "push"), "herald-plugin-push")
	for _, name := range []string{"herald.hcl", "herald.yaml"} {
		rs, err := rulesfile.Load(filepath.Join(testenv.RepoRoot(t), "examples", "rules", name))
		if err != nil {
			t.Fatal(err)
		}
		ch, ok := rs.Channel("PUSH")
		if !ok || len(ch.Providers) != 1 {
			t.Fatalf("%s: PUSH providers %+v", name, ch.Providers)
		}
		plug, logs := launchPlugin(t, bin)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		desc, err := plug.Describe(ctx, sdk.DescribeRequest{})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		checked, err := sdk.CheckConfig(desc.Description.Config, ch.Providers[0].Config)
		if err == nil {
			_, err = plug.Configure(ctx, sdk.ConfigureRequest{ProviderName: "example", Config: checked})
		}
		cancel()
		if err != nil {
			t.Errorf("%s: the PUSH provider config: %v\n%s", name, err, logs)
		}
	}
}
