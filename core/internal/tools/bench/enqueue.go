package bench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/store"
)

// The names of the EnqueueCeilings, one per way of writing an event.
const (
	// EnqueueDirectName: INSERT INTO event_outbox, as sdk/producer wrote
	// events before migration 0045 (a batch of set_config and the INSERT).
	EnqueueDirectName = "enqueue by direct INSERT"
	// EnqueueOwnerName: herald_enqueue called by Herald's own login.
	EnqueueOwnerName = "enqueue by herald_enqueue as Herald's login"
	// EnqueueProducerName: herald_enqueue called by a producer login
	// (herald db producer), the way every service now writes events.
	EnqueueProducerName = "enqueue by herald_enqueue as a producer login"
)

// enqueueRounds is how many times EnqueueCeilings alternates the ways:
// each round writes a share of the events each way, in a rotating order,
// so that what changes during the measurement (the table and its indexes
// growing, checkpoints, the other processes of the machine) falls on
// every way alike.
const enqueueRounds = 6

// directInsert is sdk/producer's statement before migration 0045, run
// after set_config('herald.tenant', ...) in the same batch.
const directInsert = `INSERT INTO event_outbox (tenant_id, event_id, event_type, aggregate_type, aggregate_id, payload, available_at, project_id,
		payload_sha256, traceparent, tracestate)
	VALUES ($1, $2, $3, $4, $5, $6, now(), 'default', sha256(convert_to($6::jsonb::text, 'UTF8')), NULL, NULL)
	ON CONFLICT (tenant_id, event_id) DO NOTHING RETURNING id`

// enqueueCall is the call every producer makes now.
const enqueueCall = `SELECT outcome, id FROM herald_enqueue(tenant_id => $1, event_id => $2, event_type => $3, payload => $4::jsonb,
	aggregate_type => $5, aggregate_id => $6)`

// EnqueueCeilings measures, in one run on one database, the events/s that
// producers commit (one event per transaction, producers concurrent
// producers, no herald serve) when they write the event by a direct
// INSERT into event_outbox, by herald_enqueue as Herald's login, and by
// herald_enqueue as a producer login: events events each way, in
// alternating rounds. It creates a database called name next to adminURL's
// database and a producer login of its own, checks that every event of
// every way is in the outbox once, and drops both afterwards, pass or fail.
func EnqueueCeilings(ctx context.Context, adminURL, name string, events, producers int) (cs []Ceiling, err error) {
	if events < enqueueRounds || producers <= 0 {
		return nil, fmt.Errorf("enqueue ceilings: want events ≥ %d and producers > 0, got events=%d producers=%d", enqueueRounds, events, producers)
	}
	dbURL, owner, drop, err := heraldDatabase(ctx, adminURL, name, producers+2, 0)
	if err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("enqueue ceilings: %w", err))
	}
	defer func() {
		owner.Close()
		if derr := drop(); derr != nil {
			err = errors.Join(err, fmt.Errorf("enqueue ceilings: %w", derr))
		}
	}()
	if err := store.EnsureTenant(ctx, owner, benchTenant, "Benchmark"); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("enqueue ceilings: %w", err))
	}
	role, password := "bench_producer_"+uniqueSuffix(), "pw-"+uniqueSuffix()
	if err := store.EnsureProducerRole(ctx, owner, role, password, []string{benchTenant}); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("enqueue ceilings: %w", err))
	}
	defer func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		// The login's pool is closed (deferred later, run earlier); its
		// backends end a moment after, and dropping the database must
		// not find them: Herald's login may not terminate another
		// login's backends.
		for {
			var n int
			if err := owner.QueryRow(c, `SELECT count(*) FROM pg_stat_activity WHERE usename = $1`, role).Scan(&n); err != nil || n == 0 {
				break
			}
			select {
			case <-c.Done():
			case <-time.After(20 * time.Millisecond):
				continue
			}
			break
		}
		if _, derr := owner.Exec(c, "DROP ROLE IF EXISTS "+role); derr != nil {
			err = errors.Join(err, fmt.Errorf("enqueue ceilings: drop role %s: %w", role, derr))
		}
	}()
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, fmt.Errorf("enqueue ceilings: %w", err)
	}
	u.User = url.UserPassword(role, password)
	// Each way has a pool of its own, made alike and opened before the
	// clock starts: on the machine this was written on, the same calls
	// through two pools of one login differed by up to 2×, so no way
	// shares the setup's pool.
	pools := make([]*pgxpool.Pool, 3)
	for i, dsn := range []string{dbURL, dbURL, u.String()} {
		if pools[i], err = store.NewPool(ctx, dsn, producers+2); err != nil {
			return nil, ctxErr(ctx, fmt.Errorf("enqueue ceilings: connect: %w", err))
		}
		defer pools[i].Close()
		// A producer login authenticates with a password (SCRAM),
		// Herald's login maybe not, and neither is what is measured.
		if err := warm(ctx, pools[i], producers); err != nil {
			return nil, ctxErr(ctx, fmt.Errorf("enqueue ceilings: %w", err))
		}
	}

	ways := []struct {
		name string
		pool *pgxpool.Pool
		one  func(ctx context.Context, tx pgx.Tx, eventID string, i int) error
	}{
		{EnqueueDirectName, pools[0], func(ctx context.Context, tx pgx.Tx, eventID string, i int) error {
			b := &pgx.Batch{}
			b.Queue(`SELECT set_config('herald.tenant', $1, true)`, benchTenant)
			b.Queue(directInsert, benchTenant, eventID, benchEventType, "bench", strconv.Itoa(i), enqueuePayload(i))
			br := tx.SendBatch(ctx, b)
			_, err := br.Exec()
			if err == nil {
				var id int64
				err = br.QueryRow().Scan(&id)
			}
			return errors.Join(err, br.Close())
		}},
		{EnqueueOwnerName, pools[1], callEnqueue},
		{EnqueueProducerName, pools[2], callEnqueue},
	}
	elapsed := make([]time.Duration, len(ways))
	per := events / enqueueRounds
	for round := range enqueueRounds {
		n := per
		if round == enqueueRounds-1 {
			n = events - per*(enqueueRounds-1)
		}
		for k := range ways {
			w := (round + k) % len(ways)
			prefix := fmt.Sprintf("enq-%d-%d-", w, round)
			start := time.Now()
			if err := commitEach(ctx, ways[w].pool, n, producers, func(ctx context.Context, tx pgx.Tx, i int) error {
				return ways[w].one(ctx, tx, prefix+strconv.Itoa(i), i)
			}); err != nil {
				return nil, ctxErr(ctx, fmt.Errorf("enqueue ceilings: %s: %w", ways[w].name, err))
			}
			elapsed[w] += time.Since(start)
		}
	}
	for w, way := range ways {
		var rows int
		if err := owner.QueryRow(ctx, `SELECT count(DISTINCT event_id) FROM event_outbox WHERE event_id LIKE $1`,
			fmt.Sprintf("enq-%d-%%", w)).Scan(&rows); err != nil {
			return nil, ctxErr(ctx, fmt.Errorf("enqueue ceilings: count events: %w", err))
		}
		if rows != events {
			return nil, fmt.Errorf("enqueue ceilings: %s: the outbox holds %d events, want %d", way.name, rows, events)
		}
		cs = append(cs, newCeiling(fmt.Sprintf("%s (%d producers, one event per transaction)", way.name, producers),
			"events/s", events, elapsed[w]))
	}
	return cs, nil
}

// callEnqueue writes event i through herald_enqueue in tx.
func callEnqueue(ctx context.Context, tx pgx.Tx, eventID string, i int) error {
	var outcome string
	var id int64
	if err := tx.QueryRow(ctx, enqueueCall, benchTenant, eventID, benchEventType, enqueuePayload(i), "bench", strconv.Itoa(i)).
		Scan(&outcome, &id); err != nil {
		return err
	}
	if outcome != "new" {
		return fmt.Errorf("herald_enqueue answered %s for %s, want new", outcome, eventID)
	}
	return nil
}

// enqueuePayload is the payload of event i, the benchmark runs' shape.
func enqueuePayload(i int) string {
	return fmt.Sprintf(`{"team": %d, "n": %d}`, i%10, i)
}

// warm opens n connections of pool at once.
func warm(ctx context.Context, pool *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}

// commitEach runs write for i in [0, n) from producers goroutines, each
// call in a transaction of its own, and returns the first error.
func commitEach(ctx context.Context, pool *pgxpool.Pool, n, producers int, write func(context.Context, pgx.Tx, int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for range producers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return write(ctx, tx, i) }); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(<-errs, ctx.Err())
}
