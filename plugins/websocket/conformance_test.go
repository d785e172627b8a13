package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldhq/herald/plugins/internal/pluginbin"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sdk/plugintest"
)

// freeAddr returns a 127.0.0.1 address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// browser is a WebSocket client connected to the plugin binary's server,
// recording the notifications it receives.
type browser struct {
	mu    sync.Mutex
	seen  map[string]string // delivery id → idempotency key
	calls int               // deliveries generated for it
}

// connect dials the plugin and waits for "ready"; from then on the
// session is registered and Send reaches it.
func (b *browser) connect(addr, tok string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws://"+addr+DefaultPath+"?token="+tok, nil)
	if err != nil {
		return fmt.Errorf("browser dial: %w", err)
	}
	if _, msg, err := conn.Read(ctx); err != nil || !json.Valid(msg) {
		_ = conn.CloseNow()
		return fmt.Errorf("browser ready frame: %q, %v", msg, err)
	}
	go func() {
		defer conn.CloseNow()
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer rcancel()
		for {
			_, msg, err := conn.Read(rctx)
			if err != nil {
				return // closed by the plugin (reconfigure, shutdown)
			}
			var f frame
			if json.Unmarshal(msg, &f) == nil && f.Type == FrameNotification {
				b.mu.Lock()
				b.seen[f.DeliveryID] = f.IdempotencyKey
				b.mu.Unlock()
			}
		}
	}()
	return nil
}

// TestConformance runs the SDK's conformance kit against the built
// herald-plugin-websocket binary, with a real WebSocket client as the
// recipient's browser.
func TestConformance(t *testing.T) {
	t.Parallel()
	bin := pluginbin.Build(t, "websocket")
	addr := freeAddr(t)
	const tenant, user = "plugintest-tenant", "plugintest-user"
	b := &browser{seen: map[string]string{}}
	tok := userToken(t, tenant, user)
	var connectOnce sync.Once
	plugintest.Run(t, bin, plugintest.Features{
		ChannelType: "WEBSOCKET",
		Config:      map[string]any{FieldListen: addr, FieldJWTSecret: testSecret},
		BadConfigs: []plugintest.BadConfig{
			{Name: "short secret", Config: map[string]any{FieldJWTSecret: "short"}, Field: FieldJWTSecret},
			{Name: "listen without port", Config: map[string]any{FieldListen: "127.0.0.1"}, Field: FieldListen},
		},
		// Deliveries go to one user whose browser connects once the
		// plugin runs under the good config (the first Delivery call
		// happens after Configure).
		Delivery: func(i int) sdk.Delivery {
			connectOnce.Do(func() {
				// Error, not Fatal: this runs inside plugintest's subtests.
				if err := b.connect(addr, tok); err != nil {
					t.Error(err)
				}
			})
			b.mu.Lock()
			b.calls++
			b.mu.Unlock()
			d := plugintest.DefaultDelivery(i)
			d.TenantID, d.Recipient.UserID = tenant, user
			return d
		},
		ProviderSeen: func(t testing.TB) map[string]string {
			// Send returns once frames are queued; wait for the browser
			// to have read one per delivery generated so far.
			deadline := time.Now().Add(10 * time.Second)
			for {
				b.mu.Lock()
				done := len(b.seen) >= b.calls
				seen := make(map[string]string, len(b.seen))
				for k, v := range b.seen {
					seen[k] = v
				}
				b.mu.Unlock()
				if done || time.Now().After(deadline) {
					return seen
				}
				time.Sleep(10 * time.Millisecond)
			}
		},
		// Under another listen address the browser is not connected: every
		// delivery is Permanent "offline".
		FailingConfig: map[string]any{FieldListen: freeAddr(t), FieldJWTSecret: testSecret},
	})
}
