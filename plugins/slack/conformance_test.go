package main

import (
	"net"
	"testing"

	"github.com/heraldhq/herald/plugins/internal/pluginbin"
	"github.com/heraldhq/herald/sdk/plugintest"
)

// TestConformance runs the SDK's conformance kit against the built
// herald-plugin-slack binary, posting to a slacktest server.
func TestConformance(t *testing.T) {
	t.Parallel()
	bin := pluginbin.Build(t, "slack")
	peer := startSlackPeer(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String() + "/"
	_ = l.Close()
	plugintest.Run(t, bin, plugintest.Features{
		ChannelType: "SLACK",
		Config:      peerConfig(peer),
		BadConfigs: []plugintest.BadConfig{
			{Name: "api url not a URL", Config: map[string]any{FieldAPIURL: "slack"}, Field: FieldAPIURL},
		},
		ProviderSeen: func(t testing.TB) map[string]string {
			seen := map[string]string{}
			for _, p := range peer.posted() {
				id, _ := p.Metadata.EventPayload["delivery_id"].(string)
				key, _ := p.Metadata.EventPayload["idempotency_key"].(string)
				seen[id] = key
			}
			return seen
		},
		FailingConfig: map[string]any{FieldToken: peerToken, FieldAPIURL: down, FieldTimeout: "2s"},
	})
}

// TestConformanceWebhook runs the conformance kit against the binary in
// webhook mode, posting to the incoming-webhook test peer.
func TestConformanceWebhook(t *testing.T) {
	t.Parallel()
	bin := pluginbin.Build(t, "slack")
	peer := startWebhookPeer(t)
	plugintest.Run(t, bin, plugintest.Features{
		ChannelType: "SLACK",
		Config:      webhookConfig(peer, map[string]string{"ops": hookOK}),
		BadConfigs: []plugintest.BadConfig{
			{Name: "webhook not https", Config: map[string]any{FieldWebhooks: map[string]any{"ops": "http://hooks.slack.com/services/T/B/x"}}, Field: FieldWebhooks},
			{Name: "webhook not a URL", Config: map[string]any{FieldWebhooks: map[string]any{"ops": "hooks"}}, Field: FieldWebhooks},
			{Name: "unknown default webhook", Config: map[string]any{FieldDefaultWebhook: "alerts"}, Field: FieldDefaultWebhook},
			{Name: "token in webhook mode", Config: map[string]any{FieldToken: "xoxb-1"}, Field: FieldToken},
		},
		ProviderSeen: func(t testing.TB) map[string]string {
			seen := map[string]string{}
			for _, p := range peer.posted() {
				id, _ := p.Metadata.EventPayload["delivery_id"].(string)
				key, _ := p.Metadata.EventPayload["idempotency_key"].(string)
				seen[id] = key
			}
			return seen
		},
		FailingConfig: webhookConfig(peer, map[string]string{"ops": hookDown}),
	})
}
