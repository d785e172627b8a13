// Package bench holds the pieces behind `herald bench`: raw-speed ceilings of
// the servers and of the producers measured in the same run as the
// benchmark, peak memory of the processes under test, latency histograms and
// a progress bar.
package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/core/internal/progress"
	"github.com/heraldhq/herald/core/internal/store"
)

// Ceiling is one raw-speed measurement of a server, taken in the same run as
// the benchmark.
type Ceiling struct {
	// Name says what was measured, e.g. "rabbitmq publish+confirm+consume
	// (classic, window 256)" or "postgresql copy (batch 1000)".
	Name string `json:"name"`
	// Unit is "msgs/s", "rows/s" or "events/s".
	Unit string `json:"unit"`
	// Ops is how many messages or rows went through.
	Ops int `json:"ops"`
	// Elapsed is the wall time the Ops took.
	Elapsed time.Duration `json:"elapsed_ns"`
	// PerSec is Ops divided by Elapsed in seconds.
	PerSec float64 `json:"per_sec"`
}

func newCeiling(name, unit string, ops int, elapsed time.Duration) Ceiling {
	c := Ceiling{Name: name, Unit: unit, Ops: ops, Elapsed: elapsed}
	if elapsed > 0 {
		c.PerSec = float64(ops) / elapsed.Seconds()
	}
	return c
}

// String formats c as "name: 9,100 msgs/s (50,000 in 5.49s)".
func (c Ceiling) String() string {
	return fmt.Sprintf("%s: %s %s (%s in %s)", c.Name, progress.Thousands(int64(c.PerSec+0.5)), c.Unit,
		progress.Thousands(int64(c.Ops)), c.Elapsed.Round(time.Millisecond))
}

// Scratch objects are named with these prefixes and a random suffix. The
// queue prefix matches what `scripts/servers.sh reset` deletes, so a queue
// left behind by a killed run is cleaned up there too.
const (
	scratchQueuePrefix = "herald.bench.ceiling."
	scratchTablePrefix = "herald_bench_ceiling_"
)

// cleanupTimeout bounds the deletion of a scratch queue or table, which runs
// even when the caller's context is already done.
const cleanupTimeout = 30 * time.Second

// RabbitMessageSize is the body size of a RabbitCeiling message.
const RabbitMessageSize = 512

// Consumer settings of RabbitCeiling.
const (
	rabbitPrefetch = 500
	rabbitAckEvery = 100
)

func uniqueSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RabbitCeiling publishes n persistent 512-byte messages to a fresh durable
// classic queue on amqpURL with publisher confirms pipelined (up to window
// unconfirmed), while a consumer on a second connection consumes them at the
// same time (prefetch 500, acking with multiple=true every 100 messages and at
// the last), and returns msgs/s for the round trip (first publish → last
// message consumed).
//
// It declares its own uniquely named queue ("herald.bench.ceiling.<hex>") on
// the default exchange and deletes it afterwards, pass or fail. It is bounded
// by ctx: when ctx is done both connections are closed and ctx's error is
// returned.
func RabbitCeiling(ctx context.Context, amqpURL string, n, window int) (c Ceiling, err error) {
	if n <= 0 || window <= 0 {
		return Ceiling{}, fmt.Errorf("rabbit ceiling: n and window must be positive, got n=%d window=%d", n, window)
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The queue is deleted on a connection of its own after the benchmark's
	// connections are closed (deferred calls run last-in, first-out).
	queue := scratchQueuePrefix + uniqueSuffix()
	declared := false
	defer func() {
		if !declared {
			return
		}
		if derr := deleteQueue(parent, amqpURL, queue); derr != nil {
			err = errors.Join(err, fmt.Errorf("rabbit ceiling: delete queue %s: %w", queue, derr))
		}
	}()

	pubConn, err := dialAMQP(ctx, amqpURL)
	if err != nil {
		return Ceiling{}, fmt.Errorf("rabbit ceiling: dial publisher: %w", err)
	}
	defer pubConn.Close()
	subConn, err := dialAMQP(ctx, amqpURL)
	if err != nil {
		return Ceiling{}, fmt.Errorf("rabbit ceiling: dial consumer: %w", err)
	}
	defer subConn.Close()
	// The client library's calls take no context: closing the connections is
	// what unblocks them when ctx is done.
	stopClosing := context.AfterFunc(ctx, func() {
		_ = pubConn.Close()
		_ = subConn.Close()
	})
	defer stopClosing()

	pubCh, err := pubConn.Channel()
	if err != nil {
		return Ceiling{}, ctxErr(parent, fmt.Errorf("rabbit ceiling: open channel: %w", err))
	}
	declared = true // a failed declare may still have created it
	if _, err := pubCh.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "classic"}); err != nil {
		return Ceiling{}, ctxErr(parent, fmt.Errorf("rabbit ceiling: declare queue %s: %w", queue, err))
	}

	// The first error cancels the run; later errors are consequences of it.
	var (
		failOnce sync.Once
		firstErr error
	)
	fail := func(err error) {
		failOnce.Do(func() {
			firstErr = err
			cancel()
		})
	}

	// Consumer, started before the first publish.
	subCh, err := subConn.Channel()
	if err != nil {
		return Ceiling{}, ctxErr(parent, fmt.Errorf("rabbit ceiling: open consumer channel: %w", err))
	}
	if err := subCh.Qos(rabbitPrefetch, 0, false); err != nil {
		return Ceiling{}, ctxErr(parent, fmt.Errorf("rabbit ceiling: qos: %w", err))
	}
	deliveries, err := subCh.Consume(queue, "herald-bench-ceiling", false, true, false, false, nil)
	if err != nil {
		return Ceiling{}, ctxErr(parent, fmt.Errorf("rabbit ceiling: consume: %w", err))
	}
	var lastConsumed time.Time
	consumerDone := make(chan struct{})
	go func() {
		defer close(consumerDone)
		got := 0
		for got < n {
			d, ok := <-deliveries
			if !ok {
				fail(fmt.Errorf("rabbit ceiling: consumer channel closed after %d of %d messages", got, n))
				return
			}
			got++
			if got%rabbitAckEvery == 0 || got == n {
				if err := d.Ack(true); err != nil {
					fail(fmt.Errorf("rabbit ceiling: ack: %w", err))
					return
				}
			}
		}
		lastConsumed = time.Now()
	}()

	// Publisher with at most window messages unconfirmed.
	if err := pubCh.Confirm(false); err != nil {
		cancel()
		<-consumerDone
		return Ceiling{}, ctxErr(parent, fmt.Errorf("rabbit ceiling: confirm mode: %w", err))
	}
	confirms := pubCh.NotifyPublish(make(chan amqp.Confirmation, window))
	slots := make(chan struct{}, window)
	confirmsDone := make(chan struct{})
	go func() {
		defer close(confirmsDone)
		for acked := 0; acked < n; acked++ {
			cf, ok := <-confirms
			if !ok {
				fail(fmt.Errorf("rabbit ceiling: publisher channel closed after %d of %d confirms", acked, n))
				return
			}
			if !cf.Ack {
				fail(fmt.Errorf("rabbit ceiling: broker nacked message %d", cf.DeliveryTag))
				return
			}
			<-slots
		}
	}()

	msg := amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		ContentType:  "application/octet-stream",
		Body:         bytes.Repeat([]byte{'x'}, RabbitMessageSize),
	}
	start := time.Now()
publish:
	for i := 0; i < n; i++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			break publish
		}
		if err := pubCh.PublishWithContext(ctx, "", queue, false, false, msg); err != nil {
			fail(fmt.Errorf("rabbit ceiling: publish: %w", err))
			break
		}
	}
	<-confirmsDone
	<-consumerDone
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return Ceiling{}, ctxErr(parent, firstErr)
	}
	name := fmt.Sprintf("rabbitmq publish+confirm+consume (classic, window %d)", window)
	return newCeiling(name, "msgs/s", n, lastConsumed.Sub(start)), nil
}

// ctxErr prefers the caller's context error: once ctx is done, the errors of
// closed connections are consequences of it.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	return err
}

// dialAMQP dials url with the TCP connect and the AMQP handshake bounded by
// ctx (and by 30 s, as amqp.Dial does).
func dialAMQP(ctx context.Context, url string) (*amqp.Connection, error) {
	return amqp.DialConfig(url, amqp.Config{
		Locale: "en_US",
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: 30 * time.Second}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			deadline := time.Now().Add(30 * time.Second)
			if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
				deadline = dl
			}
			// The library clears the deadline once the handshake is done.
			if err := conn.SetDeadline(deadline); err != nil {
				_ = conn.Close()
				return nil, err
			}
			return conn, nil
		},
	})
}

// deleteQueue deletes queue on a connection of its own, so that it works
// after the benchmark's connections were closed. It keeps ctx's values but
// not its cancellation, and gives up after cleanupTimeout.
func deleteQueue(ctx context.Context, url, queue string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	conn, err := dialAMQP(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
		return err
	}
	return ch.Close()
}

// Scratch table columns, in COPY order.
var copyColumns = []string{"id", "tenant_id", "event_id", "user_id", "channel", "status", "payload", "created_at"}

// copyChannels are the channel names of the scratch rows; each event fans out
// to every channel of three users (nine rows).
var copyChannels = [...]string{"EMAIL", "PUSH", "SMS"}

// PostgresCopyCeiling COPYs rows delivery-like rows (uuid id, tenant text,
// event uuid, user text, channel text, status text, payload jsonb of about
// 200 bytes, created_at timestamptz, UNIQUE(event, user, channel)) in batches
// of batch rows, one transaction per batch, into a uniquely named scratch
// table ("herald_bench_ceiling_<hex>") that it creates and drops afterwards,
// pass or fail, and returns rows/s. Batches run one after another on one
// connection. The clock runs from the first batch's BEGIN to the last
// batch's COMMIT.
func PostgresCopyCeiling(ctx context.Context, pool *pgxpool.Pool, rows, batch int) (c Ceiling, err error) {
	if rows <= 0 || batch <= 0 {
		return Ceiling{}, fmt.Errorf("postgres ceiling: rows and batch must be positive, got rows=%d batch=%d", rows, batch)
	}
	table := scratchTablePrefix + uniqueSuffix()
	ident := pgx.Identifier{table}.Sanitize()
	// The drop is registered before the CREATE: a cancel that lands after
	// the server committed the table (and before the client heard so)
	// must not leave it behind.
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if _, derr := pool.Exec(dctx, `DROP TABLE IF EXISTS `+ident); derr != nil {
			err = errors.Join(err, fmt.Errorf("postgres ceiling: drop table %s: %w", table, derr))
		}
	}()

	_, err = pool.Exec(ctx, `CREATE TABLE `+ident+` (
    id         uuid PRIMARY KEY,
    tenant_id  text NOT NULL,
    event_id   uuid NOT NULL,
    user_id    text NOT NULL,
    channel    text NOT NULL,
    status     text NOT NULL,
    payload    jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    UNIQUE (event_id, user_id, channel)
)`)
	if err != nil {
		return Ceiling{}, fmt.Errorf("postgres ceiling: create table %s: %w", table, err)
	}

	conn, err := pool.Acquire(ctx)
	if err != nil {
		return Ceiling{}, fmt.Errorf("postgres ceiling: acquire connection: %w", err)
	}
	defer conn.Release()

	gen := newRowGen()
	start := time.Now()
	for done := 0; done < rows; {
		size := min(batch, rows-done)
		if err := copyBatch(ctx, conn, table, gen, size); err != nil {
			return Ceiling{}, fmt.Errorf("postgres ceiling: batch at row %d: %w", done, err)
		}
		done += size
	}
	elapsed := time.Since(start)
	return newCeiling(fmt.Sprintf("postgresql copy (batch %d)", batch), "rows/s", rows, elapsed), nil
}

func copyBatch(ctx context.Context, conn *pgxpool.Conn, table string, gen *rowGen, size int) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	left := size
	n, err := tx.CopyFrom(ctx, pgx.Identifier{table}, copyColumns, pgx.CopyFromFunc(func() ([]any, error) {
		if left == 0 {
			return nil, nil
		}
		left--
		return gen.next(), nil
	}))
	if err != nil {
		if ctx.Err() != nil {
			// A cancel can surface as the connection pgx closed under the
			// COPY ("use of closed network connection"): say it was the
			// cancel, as the caller asked for it.
			return fmt.Errorf("copy: %w: %w", ctx.Err(), err)
		}
		return fmt.Errorf("copy: %w", err)
	}
	if int(n) != size {
		return fmt.Errorf("copy: wrote %d rows, want %d", n, size)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// rowGen makes the scratch rows: nine per event (three users times three
// channels), with a JSON payload of about 200 bytes.
type rowGen struct {
	rng   *mrand.ChaCha8
	i     int
	event pgtype.UUID
	now   time.Time
}

func newRowGen() *rowGen {
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	return &rowGen{rng: mrand.NewChaCha8(seed), now: time.Now()}
}

func (g *rowGen) uuid() pgtype.UUID {
	var u pgtype.UUID
	_, _ = g.rng.Read(u.Bytes[:])
	u.Bytes[6] = u.Bytes[6]&0x0f | 0x40 // version 4
	u.Bytes[8] = u.Bytes[8]&0x3f | 0x80 // RFC 4122 variant
	u.Valid = true
	return u
}

// next returns the next row, in copyColumns order.
func (g *rowGen) next() []any {
	k := g.i % 9
	if k == 0 {
		g.event = g.uuid()
	}
	user := "user-" + strconv.Itoa(g.i/9*3+k/3)
	channel := copyChannels[k%3]
	p := make([]byte, 0, 256)
	p = append(p, `{"subject":"Your order has shipped","body":"Order #`...)
	p = strconv.AppendInt(p, int64(g.i), 10)
	p = append(p, ` is on its way and should arrive within three working days.","user":"`...)
	p = append(p, user...)
	p = append(p, `","channel":"`...)
	p = append(p, channel...)
	p = append(p, `","locale":"en"}`...)
	g.i++
	return []any{g.uuid(), "tenant-1", g.event, user, channel, "PENDING", p, g.now}
}

// ProducerCeilingName starts the name of a ProducerCeiling.
const ProducerCeilingName = "producer commits"

// ProducerCeiling measures what producers alone can commit on this machine:
// the ceiling of a run's events/s when each event is its own transaction.
// It creates a database called name next to adminURL's database, applies
// Herald's migrations and adds the benchmark's tenant, then enqueues events
// events from producers concurrent producers exactly as a benchmark run's
// producers do (sdk/producer.Enqueue in a transaction of its own per event,
// the same payloads), with no herald serve running, and returns events/s
// from the first BEGIN to the last COMMIT. It checks that every event is in
// the outbox, and drops the database afterwards, pass or fail.
func ProducerCeiling(ctx context.Context, adminURL, name string, events, producers int) (c Ceiling, err error) {
	if events <= 0 || producers <= 0 {
		return Ceiling{}, fmt.Errorf("producer ceiling: events and producers must be positive, got events=%d producers=%d", events, producers)
	}
	_, pool, drop, err := heraldDatabase(ctx, adminURL, name, producers+2, 0)
	if err != nil {
		return Ceiling{}, ctxErr(ctx, fmt.Errorf("producer ceiling: %w", err))
	}
	defer func() {
		pool.Close()
		if derr := drop(); derr != nil {
			err = errors.Join(err, fmt.Errorf("producer ceiling: %w", derr))
		}
	}()
	if err := store.EnsureTenant(ctx, pool, benchTenant, "Benchmark"); err != nil {
		return Ceiling{}, ctxErr(ctx, fmt.Errorf("producer ceiling: %w", err))
	}

	sc := Scenario{Events: events, Producers: producers}
	var committed atomic.Int64
	start := time.Now()
	err = produce(ctx, pool, sc, seedGroups(sc), make([]int64, events), 0, &committed, nil)
	elapsed := time.Since(start)
	if err != nil {
		return Ceiling{}, ctxErr(ctx, fmt.Errorf("producer ceiling: after %d of %d events: %w", committed.Load(), events, err))
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM event_outbox`).Scan(&rows); err != nil {
		return Ceiling{}, ctxErr(ctx, fmt.Errorf("producer ceiling: count events: %w", err))
	}
	if rows != events {
		return Ceiling{}, fmt.Errorf("producer ceiling: the outbox holds %d events, want %d", rows, events)
	}
	name = fmt.Sprintf("%s (%d producers, one event per transaction)", ProducerCeilingName, producers)
	return newCeiling(name, "events/s", events, elapsed), nil
}
