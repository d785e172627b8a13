package integration

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sql/outbox"
)

// TestSourceSIGKILLMidForward: a service writes its events into the outbox
// of its own database (herald outbox install), and `herald serve` forwards
// them from a source block. The daemon is killed with SIGKILL while it
// forwards, twice, and started again: every event reaches event_outbox
// once, the source table ends empty, and every delivery is sent exactly
// once.
func TestSourceSIGKILLMidForward(t *testing.T) {
	e := newEnv(t, "sent")
	ctx := context.Background()
	srcURL, drop, err := store.CreateDatabase(ctx, testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL), testenv.RandomName("herald_src_"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = drop(context.Background()) })
	src, err := pgxpool.New(ctx, srcURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	c, err := src.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Conn().PgConn().Exec(ctx, outbox.InstallSQL).ReadAll(); err != nil {
		t.Fatal(err)
	}
	c.Release()

	// The source's URL comes from a secret file, as database.url may.
	urlFile := e.dir + "/orders.url"
	if err := os.WriteFile(urlFile, []byte(srcURL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg = append(cfg, fmt.Sprintf("source \"orders\" {\n  url = \"file:%s\"\n  tenants = [%q]\n  batch_size = 20\n}\n", urlFile, e.tenant)...)
	if err := os.WriteFile(e.cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}

	const events = 600
	tx, err := src.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range events {
		if _, err := tx.Exec(ctx, `SELECT herald_enqueue($1, $2, 'RESERVATION_REQUESTED', '{"restaurant_id": 5, "customer_name": "Rossi", "pax": 4}')`,
			e.tenant, fmt.Sprintf("src-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	forwarded := func() int { return e.count(`SELECT count(*) FROM event_outbox`) }
	for kill := range 2 {
		d := e.start()
		before := forwarded()
		// Kill it once it forwarded some rows of this run and not all.
		testenv.Eventually(t, 60*time.Second, func() bool { return forwarded() > before }, "forwarding under way (kill %d)", kill)
		d.stop(syscall.SIGKILL)
		t.Logf("kill %d: %d of %d events in event_outbox", kill, forwarded(), events)
	}
	e.start()
	testenv.Eventually(t, 120*time.Second, func() bool {
		var left int
		if err := src.QueryRow(ctx, `SELECT count(*) FROM herald_outbox`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0 && forwarded() == events
	}, "every event forwarded and the source table empty")
	if n := e.count(`SELECT count(*) FROM (SELECT event_id FROM event_outbox GROUP BY event_id HAVING count(*) > 1) x`); n != 0 {
		t.Fatalf("%d events doubled", n)
	}
	e.waitAllSent(events*deliveriesPerEvent, 180*time.Second)
	e.assertExactlyOnce(events * deliveriesPerEvent)
}
