package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestRulesReloadAddsChannelQueue adds a channel by editing the rules under
// a running daemon: its queue is declared and consumed at once, and the new
// channel's deliveries are SENT (not failed as unroutable) with no restart.
func TestRulesReloadAddsChannelQueue(t *testing.T) {
	e := newPluginEnv(t, testenv.PluginVariant(t, "sink"))
	email := channelSpec{name: "EMAIL", providers: []provider{{config: map[string]string{"record_file": e.record}}}}
	push := channelSpec{name: "PUSH", providers: []provider{{config: map[string]string{"record_file": e.record}}}}
	e.writeRules(pluginRules(5, email))
	d := e.start()
	if _, _, err := e.client().Emit(context.Background(), reservation("before")); err != nil {
		t.Fatal(err)
	}
	e.waitAllSent(3, 30*time.Second)

	e.writeRules(pluginRules(5, email, push))
	e.until(30*time.Second, func() bool {
		return logHasLine(d.Log(), "queue added for a new channel", "queue=herald.push")
	}, func() string { return "the PUSH queue declared after the reload" })
	if _, _, err := e.client().Emit(context.Background(), reservation("after")); err != nil {
		t.Fatal(err)
	}
	e.waitAllSent(3+6, 30*time.Second)
	e.assertExactlyOnce(9)
	if strings.Contains(d.Log(), "unroutable") {
		t.Fatal("a delivery was unroutable after the reload")
	}
}
