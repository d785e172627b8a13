package main

import (
	"net"
	"testing"

	"github.com/heraldhq/herald/plugins/internal/pluginbin"
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
