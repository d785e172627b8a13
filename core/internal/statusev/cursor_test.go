package statusev_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/statusev"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// The publisher moves one cursor over (txid, seq) instead of marking each
// event (migration 0138). An event is never skipped by it, whatever order
// the transactions that recorded events commit in: an event of a
// transaction still open holds back the events of younger transactions,
// and an event with a lower seq, committed after an older transaction's
// event was published, is still published. Each event reaches the broker
// once, with its id, and the backlog counts what is not yet confirmed.
func TestCursorSkipsNoEventWhateverTheCommitOrder(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	mq := testenv.RabbitMQ(t)
	ctx := context.Background()
	seed(t, db, "acme", 4)

	cfg := statusev.DefaultConfig()
	ch := statusChannel(t, mq.URL, cfg.Exchange)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "#", cfg.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	bc := broker.Dial(mq.URL, broker.Topology{Exchange: "herald.deliveries"}, hclog.NewNullLogger())
	defer bc.Close()
	s := statusev.New(db.Pool, bc, cfg, nil, hclog.NewNullLogger())

	// none runs one round, which must publish nothing; rounds runs rounds
	// until want events were confirmed: a write transaction open anywhere
	// on the server (another test's) holds the publisher back a while, as
	// it would in production.
	none := func() {
		t.Helper()
		if n, err := s.PublishRound(ctx, ch); err != nil || n != 0 {
			t.Fatalf("publish round: %d events confirmed (%v), want none", n, err)
		}
	}
	rounds := func(want int) {
		t.Helper()
		got := 0
		testenv.Eventually(t, 30*time.Second, func() bool {
			n, err := s.PublishRound(ctx, ch)
			if err != nil || n < 0 {
				t.Fatalf("publish round: %d (%v)", n, err)
			}
			got += n
			return got >= want
		}, "the publisher confirmed the events")
		if got != want {
			t.Fatalf("the publisher confirmed %d events, want %d", got, want)
		}
	}
	backlog := func(want int64) {
		t.Helper()
		b, err := statusev.Backlog(ctx, db.Pool)
		if err != nil || b.Unpublished != want {
			t.Fatalf("backlog: %d unpublished (%v), want %d", b.Unpublished, err, want)
		}
	}
	send := func(tx pgx.Tx, channel string) {
		t.Helper()
		if _, err := tx.Exec(ctx, `UPDATE deliveries SET status = 'SENT' WHERE tenant_id = 'acme' AND channel = $1`, channel); err != nil {
			t.Fatal(err)
		}
	}
	begin := func() pgx.Tx {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		// Take the transaction's id now: the order of the ids is the
		// order of the begins below.
		if _, err := tx.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
			t.Fatal(err)
		}
		return tx
	}

	// An older transaction still open holds back a younger one's event.
	older, younger := begin(), begin()
	send(older, "C1")
	send(younger, "C2")
	if err := younger.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	none()
	backlog(1) // the open transaction's event is not visible yet
	if err := older.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	backlog(2)
	rounds(2)
	backlog(0)
	none()

	// A younger transaction records the lower seq and commits last: the
	// older one's event (higher seq) goes first, the cursor passes it,
	// and the lower seq is still published after.
	older, younger = begin(), begin()
	send(younger, "C3")
	send(older, "C4")
	if err := older.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var c3, c4 int64
	if err := db.Pool.QueryRow(ctx, `SELECT max(seq) FILTER (WHERE data->>'channel' = 'C4'), 0 FROM status_events`).Scan(&c4, &c3); err != nil {
		t.Fatal(err)
	}
	rounds(1)
	if err := younger.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT max(seq) FROM status_events WHERE data->>'channel' = 'C3'`).Scan(&c3); err != nil {
		t.Fatal(err)
	}
	if c3 >= c4 {
		t.Fatalf("the younger transaction's event has seq %d, the older's %d: the case needs the lower seq committed last", c3, c4)
	}
	backlog(1)
	rounds(1)
	backlog(0)

	// Every event reached the queue once, with its own id.
	rows, err := db.Pool.Query(ctx, `SELECT event_id::text FROM status_events WHERE tenant_id = 'acme'`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) != 4 {
		t.Fatalf("%d status events recorded (%v), want 4", len(ids), err)
	}
	got := map[string]int{}
	testenv.Eventually(t, 10*time.Second, func() bool {
		for {
			d, ok, err := ch.Get(q.Name, true)
			if err != nil || !ok {
				break
			}
			got[d.MessageId]++
		}
		return len(got) == len(ids)
	}, "every status event in the queue")
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("event %s reached the queue %d times, want 1", id, got[id])
		}
	}
}

// The backlog is read through indexes: the gauges read it every few
// seconds, and status_events holds every event of the replay window (half
// a gigabyte per million deliveries). The broker's part is read past the
// cursor in its order and counted up to a limit, and once the table holds
// more than that limit the plan stays on the (txid, seq) index, though
// the planner cannot know where the cursor is; the webhooks' part goes
// through their partial index once the daemon's analyze (store.AnalyzeStale,
// which a server with autovacuum off relies on) has the table's
// statistics.
func TestBacklogReadsPastTheCursorByItsIndex(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	const events = 50_000
	if _, err := db.Pool.Exec(ctx, `INSERT INTO status_events (tenant_id, kind, data, occurred_at)
		SELECT 'acme', 'delivery.sent', '{}', now() - make_interval(secs => $1 - g) FROM generate_series(1, $1) g`, events); err != nil {
		t.Fatal(err)
	}
	// The inserts reach the statistics the analyze reads within a second
	// or so (PostgreSQL flushes them after the transaction).
	testenv.Eventually(t, 30*time.Second, func() bool {
		analyzed, err := store.AnalyzeStale(ctx, db.Pool)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(analyzed, "status_events")
	}, "the daemon's analyze never took status_events after %d inserts", events)
	// The planner's cost of the whole reading, against what it costs to
	// read the table once: a plan that reads the table, or a third of it,
	// costs about as much; one that reads up to the limit through the
	// indexes costs a small part of it.
	const limit = 100
	var plan []map[string]any
	if err := db.Pool.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+statusev.BacklogQuery, limit).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var table float64
	if err := db.Pool.QueryRow(ctx, `SELECT relpages * current_setting('seq_page_cost')::float8 + reltuples * current_setting('cpu_tuple_cost')::float8
		FROM pg_class WHERE oid = 'status_events'::regclass`).Scan(&table); err != nil {
		t.Fatal(err)
	}
	cost, _ := plan[0]["Plan"].(map[string]any)["Total Cost"].(float64)
	if cost <= 0 || cost > table/5 {
		t.Fatalf("the backlog's plan costs %.0f, a table read %.0f: it reads the table\n%v", cost, table, plan)
	}
	b, err := statusev.Backlog(ctx, db.Pool)
	if err != nil || b.Unpublished != events {
		t.Fatalf("backlog: %d unpublished (%v), want %d", b.Unpublished, err, events)
	}
	// The first in publishing order was recorded events-1 seconds ago
	// (by its occurred_at); counted up to the limit, the count stops there
	// and the age is still the first event's.
	if got, want := b.OldestUnpublished, time.Duration(events-1)*time.Second; got < want || got > want+time.Minute {
		t.Fatalf("oldest unpublished %s, want %s", got, want)
	}
	capped, err := statusev.BacklogUpTo(ctx, db.Pool, limit)
	if err != nil || capped.Unpublished != limit || capped.OldestUnpublished < b.OldestUnpublished {
		t.Fatalf("backlog up to %d: %d unpublished, oldest %s (%v); want %d, at least %s", limit, capped.Unpublished, capped.OldestUnpublished, err, limit, b.OldestUnpublished)
	}
}
