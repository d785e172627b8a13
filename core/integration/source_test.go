package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
	src, block := e.sourceDatabase("orders", 20)
	e.appendConfig(block)

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

// sourceDatabase creates a database of the test's own with the outbox
// installed (herald outbox install's SQL) and returns its pool and the
// daemon file's source block naming it (its URL from a secret file, as
// database.url may), for e's tenant.
func (e *env) sourceDatabase(name string, batch int) (*pgxpool.Pool, string) {
	t := e.t
	t.Helper()
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
	defer c.Release()
	if _, err := c.Conn().PgConn().Exec(ctx, outbox.InstallSQL).ReadAll(); err != nil {
		t.Fatal(err)
	}
	urlFile := filepath.Join(e.dir, name+".url")
	if err := os.WriteFile(urlFile, []byte(srcURL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return src, fmt.Sprintf("source %q {\n  url = \"file:%s\"\n  tenants = [%q]\n  batch_size = %d\n}\n", name, urlFile, e.tenant, batch)
}

// TestTwoDaemonsShareASourceOneSIGKILLed: two real `herald serve`
// processes with the same source block forward one source database while
// four producers write into it concurrently, one event per transaction.
// One daemon is killed with SIGKILL while both forward and the producers
// write, the producers go on while the other forwards alone, and it is
// started again: every event reaches event_outbox exactly once, the source
// table ends empty, and every delivery is sent exactly once.
func TestTwoDaemonsShareASourceOneSIGKILLed(t *testing.T) {
	e := newEnv(t, "sent")
	ctx := context.Background()
	src, block := e.sourceDatabase("orders", 10)
	e.appendConfig(block)
	other := e.sibling()
	other.appendConfig(block)

	first := e.start()
	other.start()

	const producers, perProducer = 4, 150
	const events = producers * perProducer
	// The producers write the first half, wait for the kill, then write
	// the second half while one daemon is down and after it is back.
	killed := make(chan struct{})
	errs := make(chan error, producers)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				if i == perProducer/2 {
					<-killed
				}
				if _, err := src.Exec(ctx, `SELECT herald_enqueue($1, $2, 'RESERVATION_REQUESTED', '{"restaurant_id": 5, "customer_name": "Rossi", "pax": 4}')`,
					e.tenant, fmt.Sprintf("two-%d-%d", p, i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	forwarded := func() int { return e.count(`SELECT count(*) FROM event_outbox`) }
	// Kill the first once the two forward the first half and before it is
	// all in.
	testenv.Eventually(t, 60*time.Second, func() bool { return forwarded() > 0 }, "forwarding under way")
	first.stop(syscall.SIGKILL)
	t.Logf("SIGKILL: %d of %d events in event_outbox", forwarded(), events)
	close(killed)
	// The other forwards alone for a while, then the first is back.
	before := forwarded()
	testenv.Eventually(t, 60*time.Second, func() bool { return forwarded() > before }, "the other daemon forwarding alone")
	e.start()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("producer: %v", err)
	}
	testenv.Eventually(t, 120*time.Second, func() bool {
		var left int
		if err := src.QueryRow(ctx, `SELECT count(*) FROM herald_outbox`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0 && forwarded() >= events
	}, "every event forwarded and the source table empty")
	if n := forwarded(); n != events {
		t.Fatalf("event_outbox holds %d events, want %d", n, events)
	}
	if n := e.count(`SELECT count(*) FROM (SELECT event_id FROM event_outbox GROUP BY event_id HAVING count(*) > 1) x`); n != 0 {
		t.Fatalf("%d events doubled", n)
	}
	if n := e.count(`SELECT count(*) FROM event_outbox WHERE event_id LIKE 'two-%'`); n != events {
		t.Fatalf("%d of the producers' %d events in event_outbox", n, events)
	}
	e.waitAllSent(events*deliveriesPerEvent, 180*time.Second)
	e.assertExactlyOnce(events * deliveriesPerEvent)
	t.Logf("forwarded since their last start: first %v, other %v", e.metric(t, `herald_source_forwarded_total{source="orders"}`),
		other.metric(t, `herald_source_forwarded_total{source="orders"}`))
}
