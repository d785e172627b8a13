package main

import (
	"net/mail"
	"strings"
	"testing"

	"github.com/heraldhq/herald/plugins/internal/pluginbin"
	"github.com/heraldhq/herald/sdk/plugintest"
)

// TestConformance runs the SDK's conformance kit against the built
// herald-plugin-email binary, delivering to a real SMTP server.
func TestConformance(t *testing.T) {
	t.Parallel()
	bin := pluginbin.Build(t, "email")
	p := startPeer(t, peerOptions{})
	plugintest.Run(t, bin, plugintest.Features{
		ChannelType: "EMAIL",
		Config: map[string]any{
			FieldHost: "127.0.0.1", FieldPort: p.addr.Port, FieldFrom: "Herald <noreply@herald.test>",
			FieldTLS: TLSNone, FieldTimeout: "5s",
		},
		BadConfigs: []plugintest.BadConfig{
			{Name: "from not an address", Config: map[string]any{FieldFrom: "herald"}, Field: FieldFrom},
			{Name: "port out of range", Config: map[string]any{FieldPort: 0}, Field: FieldPort},
			{Name: "password without username", Config: map[string]any{FieldPassword: "x"}, Field: FieldUsername},
		},
		ProviderSeen: func(t testing.TB) map[string]string {
			seen := map[string]string{}
			for _, m := range p.received() {
				msg, err := mail.ReadMessage(strings.NewReader(m.Data))
				if err != nil {
					t.Errorf("stored message does not parse: %v", err)
					continue
				}
				seen[msg.Header.Get(HeaderDeliveryID)] = msg.Header.Get(HeaderIdempotencyKey)
			}
			return seen
		},
		FailingConfig: map[string]any{
			FieldHost: "127.0.0.1", FieldPort: closedPort(t), FieldFrom: "noreply@herald.test",
			FieldTLS: TLSNone, FieldTimeout: "2s",
		},
	})
}
