package main

import (
	"encoding/json"
	"fmt"
	"net"
	"testing"

	"github.com/SherClockHolmes/webpush-go"

	"github.com/heraldhq/herald/plugins/internal/pluginbin"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sdk/plugintest"
)

// TestConformance runs the SDK's conformance kit against the built
// herald-plugin-push binary, sending to the local FCM-shaped server.
func TestConformance(t *testing.T) {
	t.Parallel()
	bin := pluginbin.Build(t, "push")
	peer := startFCMPeer(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	_ = l.Close()
	plugintest.Run(t, bin, plugintest.Features{
		ChannelType: "PUSH",
		Config:      peerConfig(peer),
		BadConfigs: []plugintest.BadConfig{
			{Name: "no credentials", Config: map[string]any{FieldAccessToken: nil}, Field: FieldAccessToken},
			{Name: "endpoint not a URL", Config: map[string]any{FieldEndpoint: "fcm"}, Field: FieldEndpoint},
		},
		ProviderSeen: func(t testing.TB) map[string]string {
			seen := map[string]string{}
			for _, r := range peer.received() {
				if id := r.Message.Data[DataDeliveryID]; id != "" {
					seen[id] = r.Message.Data[DataIdempotencyKey]
				}
			}
			return seen
		},
		FailingConfig: map[string]any{FieldEndpoint: down, FieldProjectID: peerProject, FieldAccessToken: "x", FieldTimeout: "2s"},
	})
}

// TestConformanceWebPush runs the conformance kit against the binary
// configured for Web Push, sending to our decrypting push service: the
// idempotency keys it checks are read from the decrypted payloads.
func TestConformanceWebPush(t *testing.T) {
	t.Parallel()
	bin := pluginbin.Build(t, "push")
	w := startWebPush(t)
	otherKey, otherPubOK, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	failing := w.config()
	// A valid key pair the push service does not know: 401, retryable.
	failing[FieldVAPIDPrivateKey], failing[FieldVAPIDPublicKey] = otherKey, otherPubOK
	plugintest.Run(t, bin, plugintest.Features{
		ChannelType: "PUSH",
		Config:      w.config(),
		Delivery: func(i int) sdk.Delivery {
			d := plugintest.DefaultDelivery(i)
			d.Recipient.DeviceTokens = nil
			d.Recipient.Devices = []sdk.Device{w.device(fmt.Sprintf("sub-%d", i))}
			return d
		},
		BadConfigs: []plugintest.BadConfig{
			{Name: "no vapid private key", Config: map[string]any{FieldVAPIDPrivateKey: nil}, Field: FieldVAPIDPrivateKey},
			{Name: "malformed vapid public key", Config: map[string]any{FieldVAPIDPublicKey: "BAD"}, Field: FieldVAPIDPublicKey},
			{Name: "subject not a URI", Config: map[string]any{FieldVAPIDSubject: "ops"}, Field: FieldVAPIDSubject},
		},
		ProviderSeen: func(t testing.TB) map[string]string {
			seen := map[string]string{}
			for _, m := range w.peer.Messages() {
				var p struct {
					Data map[string]string `json:"data"`
				}
				_ = json.Unmarshal(m.Plaintext, &p)
				if id := p.Data[DataDeliveryID]; id != "" {
					seen[id] = p.Data[DataIdempotencyKey]
				}
			}
			return seen
		},
		FailingConfig: failing,
	})
}

// TestConformanceAPNs runs the conformance kit against the binary
// configured for APNs, sending to our HTTP/2 APNs peer.
func TestConformanceAPNs(t *testing.T) {
	t.Parallel()
	bin := pluginbin.Build(t, "push")
	a := startAPNs(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "https://" + l.Addr().String()
	_ = l.Close()
	failing := a.config()
	failing[FieldAPNsEndpoint] = down
	failing[FieldTimeout] = "2s"
	plugintest.Run(t, bin, plugintest.Features{
		ChannelType: "PUSH",
		Config:      a.config(),
		Delivery: func(i int) sdk.Delivery {
			d := plugintest.DefaultDelivery(i)
			d.Recipient.DeviceTokens = nil
			d.Recipient.Devices = []sdk.Device{apnsDevice(i)}
			return d
		},
		BadConfigs: []plugintest.BadConfig{
			{Name: "p8 not an EC key", Config: map[string]any{FieldAPNsKey: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}, Field: FieldAPNsKey},
			{Name: "no team id", Config: map[string]any{FieldAPNsTeamID: nil}, Field: FieldAPNsTeamID},
		},
		ProviderSeen: func(t testing.TB) map[string]string {
			seen := map[string]string{}
			for _, m := range a.peer.Messages() {
				if id, _ := m.Payload[DataDeliveryID].(string); id != "" {
					seen[id], _ = m.Payload[DataIdempotencyKey].(string)
				}
			}
			return seen
		},
		FailingConfig: failing,
	})
}
