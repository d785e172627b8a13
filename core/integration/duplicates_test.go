package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestDuplicateMessageWhileSendingIsNotSentTwice holds a batch inside the
// EMAIL plugin for longer than publisher.reclaim_after, so the publisher's
// stale reclaim publishes the same deliveries again (the duplicate a lost
// queue or a long backlog produces) while the first copy is still being
// sent. The listener that gets the copy must skip it: the plugin receives
// each delivery once and the database records one attempt each.
func TestDuplicateMessageWhileSendingIsNotSentTwice(t *testing.T) {
	e := newPluginEnv(t, testenv.PluginVariant(t, "sink"))
	e.reclaim = "1s"
	e.writeConfig()
	holdFile := filepath.Join(e.dir, "hold")
	e.writeRules(pluginRules(5,
		channelSpec{name: "EMAIL", providers: []provider{{config: map[string]string{"record_file": e.record, "hold_file": holdFile}}}}))
	if err := os.WriteFile(holdFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := e.start()
	if _, _, err := e.client().Emit(context.Background(), reservation("dup-1")); err != nil {
		t.Fatal(err)
	}
	// The first copy is inside the plugin...
	e.until(30*time.Second, func() bool {
		b, _ := os.ReadFile(holdFile + ".held")
		return len(b) > 0
	}, func() string { return "a batch held inside the plugin: " + e.statusSummary() })
	// ...and the stale reclaim has republished it at least twice, each copy
	// skipped by a listener because the first is still being sent.
	e.until(30*time.Second, func() bool {
		return strings.Count(d.Log(), "skipping deliveries another listener is sending") >= 2
	}, func() string { return "copies of the held batch skipped: " + e.statusSummary() })
	if err := os.Remove(holdFile); err != nil {
		t.Fatal(err)
	}
	const want = 3
	e.waitAllSent(want, 30*time.Second)
	e.assertExactlyOnce(want)
	recs := e.sinkRecords()
	if len(recs) != want {
		t.Fatalf("the sink received %d deliveries, want %d", len(recs), want)
	}
	for id, n := range recs {
		if n != 1 {
			t.Errorf("delivery %s reached the plugin %d times", id, n)
		}
	}
}

// TestNoProviderDoesNotSpendAttempts refuses the only EMAIL provider (its
// pinned checksum does not match) while events arrive: the deliveries wait
// as RETRY without spending their attempts (max_attempts is 2, far fewer
// than the tries that happen while the provider is refused), and once the
// checksum is fixed every delivery is sent once.
func TestNoProviderDoesNotSpendAttempts(t *testing.T) {
	sink := testenv.PluginVariant(t, "sink")
	e := newPluginEnv(t, sink)
	rules := func(sum string) string {
		return pluginRules(2, channelSpec{name: "EMAIL", providers: []provider{{checksum: sum,
			config: map[string]string{"record_file": e.record}}}})
	}
	e.writeRules(rules(strings.Repeat("0", 64)))
	d := e.start()
	if _, _, err := e.client().Emit(context.Background(), reservation("np-1")); err != nil {
		t.Fatal(err)
	}
	// Several rounds of "no provider available" go by.
	e.until(30*time.Second, func() bool {
		return strings.Count(d.Log(), "no provider available") >= 6 &&
			e.count(`SELECT count(*) FROM deliveries WHERE status = 'RETRY' AND attempts = 0`) == 3
	}, func() string { return "deliveries waiting without spending attempts: " + e.statusSummary() })
	if n := e.count(`SELECT count(*) FROM deliveries WHERE status = 'FAILED'`); n != 0 {
		t.Fatalf("%d deliveries FAILED while no provider was available", n)
	}
	if n := e.count(`SELECT count(*) FROM delivery_attempt_log`); n != 0 {
		t.Fatalf("%d attempts logged while no provider was available", n)
	}
	e.writeRules(rules(sha256File(t, filepath.Join(e.pluginDir, "herald-plugin-sink"))))
	const want = 3
	e.waitAllSent(want, 30*time.Second)
	e.assertExactlyOnce(want)
}
