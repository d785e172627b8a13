package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/heraldhq/herald/plugins/internal/pluginbin"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sdk/plugintest"
)

// TestConformance runs the SDK's conformance kit against the built
// herald-plugin-websocket binary; a queue bound on the live exchange
// stands in for the daemon holding the recipient's session.
func TestConformance(t *testing.T) {
	t.Parallel()
	bin := pluginbin.Build(t, "websocket")
	const tenant, user = "plugintest-tenant", "plugintest-user"
	ex := randomName("herald.live.conformance-")
	g := newGateway(t, ex, [2]string{tenant, user})
	t.Cleanup(func() { _ = g.ch.ExchangeDelete(ex+".nobody", false, false) })
	calls := 0
	plugintest.Run(t, bin, plugintest.Features{
		ChannelType: "WEBSOCKET",
		Config:      map[string]any{FieldAMQPURL: brokerURL(), FieldExchange: ex},
		BadConfigs: []plugintest.BadConfig{
			{Name: "not amqp", Config: map[string]any{FieldAMQPURL: "http://x"}, Field: FieldAMQPURL},
			{Name: "old listen key", Config: map[string]any{"listen": "127.0.0.1:8090"}, Field: "listen"},
		},
		Delivery: func(i int) sdk.Delivery {
			calls++
			d := plugintest.DefaultDelivery(i)
			d.TenantID, d.Recipient.UserID = tenant, user
			return d
		},
		ProviderSeen: func(t testing.TB) map[string]string {
			deadline := time.Now().Add(10 * time.Second)
			for g.count() < calls && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			seen := map[string]string{}
			g.mu.Lock()
			defer g.mu.Unlock()
			for _, m := range g.got {
				var f frame
				if json.Unmarshal(m.Body, &f) == nil {
					seen[f.DeliveryID] = f.IdempotencyKey
				}
			}
			return seen
		},
		// On an exchange where no daemon is bound, every delivery comes
		// back: Skipped "offline".
		FailingConfig: map[string]any{FieldAMQPURL: brokerURL(), FieldExchange: ex + ".nobody"},
	})
}
