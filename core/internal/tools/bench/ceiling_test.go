package bench

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// scratchQueues lists the queues of vhost whose names start with the
// ceiling's scratch prefix.
func scratchQueues(t *testing.T, vhost string) []string {
	t.Helper()
	out, err := testenv.Rabbitmqctl("list_queues", "-p", vhost, "--no-table-headers", "name")
	if err != nil {
		t.Fatalf("list queues: %v: %s", err, out)
	}
	var qs []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, scratchQueuePrefix) {
			qs = append(qs, l)
		}
	}
	return qs
}

func TestRabbitCeiling(t *testing.T) {
	t.Parallel()
	b := testenv.RabbitMQ(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const n = 3000
	c, err := RabbitCeiling(ctx, b.URL, n, 256)
	if err != nil {
		t.Fatalf("RabbitCeiling: %v", err)
	}
	t.Logf("%s", c)
	checkCeiling(t, c, n, "msgs/s", "rabbitmq publish+confirm+consume")
	if qs := scratchQueues(t, b.VHost); len(qs) != 0 {
		t.Errorf("scratch queues left behind: %v", qs)
	}
}

// TestRabbitCeilingCanceled cancels a run that would take minutes once its
// queue exists, and checks that it returns the context's error and still
// deletes the queue.
func TestRabbitCeilingCanceled(t *testing.T) {
	t.Parallel()
	b := testenv.RabbitMQ(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type result struct {
		c   Ceiling
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := RabbitCeiling(ctx, b.URL, 10_000_000, 256)
		res <- result{c, err}
	}()
	testenv.Eventually(t, time.Minute, func() bool { return len(scratchQueues(t, b.VHost)) > 0 },
		"scratch queue declared")
	cancel()
	select {
	case r := <-res:
		if !errors.Is(r.err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", r.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("RabbitCeiling did not return within a minute of cancel")
	}
	if qs := scratchQueues(t, b.VHost); len(qs) != 0 {
		t.Errorf("scratch queues left behind: %v", qs)
	}
}

func TestRabbitCeilingBadArgs(t *testing.T) {
	t.Parallel()
	for name, a := range map[string][2]int{"zero n": {0, 10}, "zero window": {10, 0}, "negative": {-1, -1}} {
		if _, err := RabbitCeiling(context.Background(), "amqp://127.0.0.1:1/", a[0], a[1]); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestRabbitCeilingUnreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Port 1 on loopback refuses connections.
	if _, err := RabbitCeiling(ctx, "amqp://guest:guest@127.0.0.1:1/", 10, 10); err == nil {
		t.Fatal("no error dialing a closed port")
	}
}

// scratchTables lists the tables whose names start with the ceiling's
// scratch prefix.
func scratchTables(t *testing.T, db *testenv.DB) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		`SELECT tablename FROM pg_tables WHERE starts_with(tablename, $1) ORDER BY 1`, scratchTablePrefix)
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatalf("scan: %v", err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("list tables: %v", err)
	}
	return names
}

func TestPostgresCopyCeiling(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// 2,500 rows in batches of 1,000: the last batch is short.
	const rows = 2500
	c, err := PostgresCopyCeiling(ctx, db.Pool, rows, 1000)
	if err != nil {
		t.Fatalf("PostgresCopyCeiling: %v", err)
	}
	t.Logf("%s", c)
	checkCeiling(t, c, rows, "rows/s", "postgresql copy")
	if ts := scratchTables(t, db); len(ts) != 0 {
		t.Errorf("scratch tables left behind: %v", ts)
	}
}

// TestCopyRows checks the rows themselves: they satisfy the unique key,
// and the payload is valid JSON of about 200 bytes.
func TestCopyRows(t *testing.T) {
	t.Parallel()
	g := newRowGen()
	keys := map[string]bool{}
	for i := 0; i < 900; i++ {
		r := g.next()
		if len(r) != len(copyColumns) {
			t.Fatalf("row has %d values, want %d", len(r), len(copyColumns))
		}
		key := []any{r[2], r[3], r[4]}
		kb, _ := json.Marshal(key)
		if keys[string(kb)] {
			t.Fatalf("row %d repeats key %s", i, kb)
		}
		keys[string(kb)] = true
		p := r[6].([]byte)
		if !json.Valid(p) {
			t.Fatalf("row %d payload is not JSON: %s", i, p)
		}
		if len(p) < 150 || len(p) > 250 {
			t.Errorf("row %d payload is %d bytes, want about 200", i, len(p))
		}
	}
}

// TestPostgresCopyCeilingCanceled cancels a long run once its table exists
// and checks that the table is still dropped.
func TestPostgresCopyCeilingCanceled(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	res := make(chan error, 1)
	go func() {
		_, err := PostgresCopyCeiling(ctx, db.Pool, 100_000_000, 1000)
		res <- err
	}()
	testenv.Eventually(t, time.Minute, func() bool { return len(scratchTables(t, db)) > 0 }, "scratch table created")
	cancel()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("PostgresCopyCeiling did not return within a minute of cancel")
	}
	if ts := scratchTables(t, db); len(ts) != 0 {
		t.Errorf("scratch tables left behind: %v", ts)
	}
}

func TestPostgresCopyCeilingBadArgs(t *testing.T) {
	t.Parallel()
	for name, a := range map[string][2]int{"zero rows": {0, 10}, "zero batch": {10, 0}} {
		// The arguments are checked before the pool is used.
		if _, err := PostgresCopyCeiling(context.Background(), nil, a[0], a[1]); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestCeilingJSON(t *testing.T) {
	t.Parallel()
	c := newCeiling("x", "rows/s", 1000, 2*time.Second)
	if c.PerSec != 500 {
		t.Errorf("PerSec = %v, want 500", c.PerSec)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"x","unit":"rows/s","ops":1000,"elapsed_ns":2000000000,"per_sec":500}`
	if string(b) != want {
		t.Errorf("json = %s, want %s", b, want)
	}
	if got, want := c.String(), "x: 500 rows/s (1,000 in 2s)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// databaseExists reports whether a database called name exists on db's
// server.
func databaseExists(t *testing.T, db *testenv.DB, name string) bool {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil {
		t.Fatalf("list databases: %v", err)
	}
	return n > 0
}

func TestProducerCeiling(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t) // checks that PostgreSQL answers; its pool lists databases
	adminURL := testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// 601 events over 4 producers: they do not divide evenly.
	const events = 601
	name := testenv.RandomName("herald_bench_producers_")
	c, err := ProducerCeiling(ctx, adminURL, name, events, 4)
	if err != nil {
		t.Fatalf("ProducerCeiling: %v", err)
	}
	t.Logf("%s", c)
	checkCeiling(t, c, events, "events/s", ProducerCeilingName+" (4 producers")
	if databaseExists(t, db, name) {
		t.Errorf("scratch database %s left behind", name)
	}
}

// outboxEvents counts the events in database name's outbox, or returns -1
// while it cannot (the database or its tables do not exist yet).
func outboxEvents(adminURL, name string) int {
	u, err := url.Parse(adminURL)
	if err != nil {
		return -1
	}
	u.Path = "/" + name
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		return -1
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM event_outbox`).Scan(&n); err != nil {
		return -1
	}
	return n
}

// TestProducerCeilingCanceled cancels a long run once its producers are
// enqueuing and checks that it returns the context's error and still drops the
// database.
func TestProducerCeilingCanceled(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	adminURL := testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	name := testenv.RandomName("herald_bench_producers_")
	res := make(chan error, 1)
	go func() {
		_, err := ProducerCeiling(ctx, adminURL, name, 100_000_000, 2)
		res <- err
	}()
	testenv.Eventually(t, time.Minute, func() bool { return outboxEvents(adminURL, name) > 0 }, "events enqueued")
	cancel()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("ProducerCeiling did not return within a minute of cancel")
	}
	if databaseExists(t, db, name) {
		t.Errorf("scratch database %s left behind", name)
	}
}

func TestProducerCeilingBadArgs(t *testing.T) {
	t.Parallel()
	for name, a := range map[string][2]int{"zero events": {0, 8}, "zero producers": {10, 0}, "negative": {-1, -1}} {
		// The arguments are checked before the server is used.
		if _, err := ProducerCeiling(context.Background(), "postgres://127.0.0.1:1/x", "unused", a[0], a[1]); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// checkCeiling checks what every ceiling reports: the operations asked
// for, a positive rate and time, and its unit and name.
func checkCeiling(t *testing.T, c Ceiling, ops int, unit, namePrefix string) {
	t.Helper()
	if c.Ops != ops {
		t.Errorf("Ops = %d, want %d", c.Ops, ops)
	}
	if c.PerSec <= 0 || c.Elapsed <= 0 {
		t.Errorf("PerSec = %v, Elapsed = %v, want both > 0", c.PerSec, c.Elapsed)
	}
	if c.Unit != unit || !strings.HasPrefix(c.Name, namePrefix) {
		t.Errorf("Name, Unit = %q, %q", c.Name, c.Unit)
	}
}
