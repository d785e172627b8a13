package main

import (
	"testing"

	"github.com/heraldhq/herald/plugins/internal/pluginbin"
	"github.com/heraldhq/herald/sdk/plugintest"
)

// TestConformance runs the SDK's conformance kit against the built
// herald-plugin-sms binary, sending to the local Twilio-shaped server.
//
// Twilio's API carries the idempotency key (I-Twilio-Idempotency-Token) but
// no Herald delivery id, so ProviderSeen stays nil here; the idempotency
// header is checked by TestSendBatchFormAndIdempotency.
func TestConformance(t *testing.T) {
	t.Parallel()
	bin := pluginbin.Build(t, "sms")
	peer := startTwilioPeer(t)
	failing := peerConfig(peer)
	failing[FieldAuthToken] = "revoked"
	plugintest.Run(t, bin, plugintest.Features{
		ChannelType: "SMS",
		Config:      peerConfig(peer),
		BadConfigs: []plugintest.BadConfig{
			{Name: "malformed account sid", Config: map[string]any{FieldAccountSID: "AC1"}, Field: FieldAccountSID},
			{Name: "no sender", Config: map[string]any{FieldFrom: nil}, Field: FieldFrom},
		},
		FailingConfig: failing,
	})
}
