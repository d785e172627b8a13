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
	// EnqueueDirectName: INSERT INTO event_outbox by Herald's own login,
	// the statement sdk/producer sent before migration 0045 (a producer
	// login may no longer insert).
	EnqueueDirectName = "enqueue by direct INSERT"
	// EnqueueOwnerName: herald_enqueue called by Herald's own login,
	// through the same pool as the direct INSERT.
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
const enqueueRounds = 20

// directInsert is sdk/producer's statement before migration 0045 (which
// sent it after set_config('herald.tenant', ...), a setting Herald's
// login does not need: the direct way is this one statement, as the
// function's way is one).
const directInsert = `INSERT INTO event_outbox (tenant_id, event_id, event_type, aggregate_type, aggregate_id, payload, available_at, project_id,
		payload_sha256, traceparent, tracestate)
	VALUES ($1, $2, $3, $4, $5, $6, now(), 'default', sha256(convert_to($6::jsonb::text, 'UTF8')), NULL, NULL)
	ON CONFLICT (tenant_id, event_id) DO NOTHING RETURNING id`

// enqueueCall is the call every producer makes now.
const enqueueCall = `SELECT outcome, id FROM herald_enqueue(tenant_id => $1, event_id => $2, event_type => $3, payload => $4::jsonb,
	aggregate_type => $5, aggregate_id => $6)`

// EnqueueRound is one round of EnqueueCeilings: each way's events/s in
// it, in the order of the ceilings (direct, Herald's login, producer
// login).
type EnqueueRound struct {
	Events int       `json:"events"`
	PerSec []float64 `json:"per_sec"`
	// ServerCPU is each way's CPU time in its PostgreSQL backends per
	// event, in µs, when the bench could read them in /proc (PostgreSQL
	// on this host): what the statement costs the server, which the
	// machine's other load changes less than the events/s.
	ServerCPU []float64 `json:"server_cpu_us,omitempty"`
}

// EnqueueCeilings measures, in one run on one database, the events/s that
// producers commit (one event per transaction, producers concurrent
// producers, no herald serve) when they write the event by a direct
// INSERT into event_outbox and by herald_enqueue, both as Herald's login
// through one pool (the same connections, the same concurrency, one
// statement in a transaction each: only the statement differs), and by
// herald_enqueue as a producer login (a pool of that login, made alike):
// events events each way, in alternating rounds. It creates a database
// called name next to adminURL's database and a producer login of its
// own, checks that every event of every way is in the outbox once, and
// drops both afterwards, pass or fail.
func EnqueueCeilings(ctx context.Context, adminURL, name string, events, producers int) (cs []Ceiling, rounds []EnqueueRound, err error) {
	if events < enqueueRounds || producers <= 0 {
		return nil, nil, fmt.Errorf("enqueue ceilings: want events ≥ %d and producers > 0, got events=%d producers=%d", enqueueRounds, events, producers)
	}
	dbURL, owner, drop, err := heraldDatabase(ctx, adminURL, name, 2, 0)
	if err != nil {
		return nil, nil, ctxErr(ctx, fmt.Errorf("enqueue ceilings: %w", err))
	}
	defer func() {
		owner.Close()
		if derr := drop(); derr != nil {
			err = errors.Join(err, fmt.Errorf("enqueue ceilings: %w", derr))
		}
	}()
	if err := store.EnsureTenant(ctx, owner, benchTenant, "Benchmark"); err != nil {
		return nil, nil, ctxErr(ctx, fmt.Errorf("enqueue ceilings: %w", err))
	}
	role, password := "bench_producer_"+uniqueSuffix(), "pw-"+uniqueSuffix()
	if err := store.EnsureProducerRole(ctx, owner, role, password, []string{benchTenant}); err != nil {
		return nil, nil, ctxErr(ctx, fmt.Errorf("enqueue ceilings: %w", err))
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
		return nil, nil, fmt.Errorf("enqueue ceilings: %w", err)
	}
	u.User = url.UserPassword(role, password)
	// Herald's login has one pool for both of its ways, the producer
	// login one of its own made alike (it cannot insert directly); both
	// are opened and every connection made before the clock starts (a
	// producer login authenticates with a password, SCRAM, and that is
	// not what is measured). The setup's pool writes nothing measured.
	pools := make([]*pgxpool.Pool, 2)
	pids := make([][]int, 2)
	for i, dsn := range []string{dbURL, u.String()} {
		if pools[i], err = store.NewPool(ctx, dsn, producers); err != nil {
			return nil, nil, ctxErr(ctx, fmt.Errorf("enqueue ceilings: connect: %w", err))
		}
		defer pools[i].Close()
		if pids[i], err = warm(ctx, pools[i], producers); err != nil {
			return nil, nil, ctxErr(ctx, fmt.Errorf("enqueue ceilings: %w", err))
		}
	}

	ways := []struct {
		name string
		pool *pgxpool.Pool
		pids []int
		one  func(ctx context.Context, tx pgx.Tx, eventID string, i int) error
	}{
		{EnqueueDirectName, pools[0], pids[0], func(ctx context.Context, tx pgx.Tx, eventID string, i int) error {
			var id int64
			return tx.QueryRow(ctx, directInsert, benchTenant, eventID, benchEventType, "bench", strconv.Itoa(i), enqueuePayload(i)).Scan(&id)
		}},
		{EnqueueOwnerName, pools[0], pids[0], callEnqueue},
		{EnqueueProducerName, pools[1], pids[1], callEnqueue},
	}
	// One unmeasured round first: every connection prepares its
	// statements and PostgreSQL settles on their plans (the first calls
	// of a session plan anew each time).
	for w := range ways {
		if err := commitEach(ctx, ways[w].pool, producers*8, producers, func(ctx context.Context, tx pgx.Tx, i int) error {
			return ways[w].one(ctx, tx, fmt.Sprintf("warm-%d-%d", w, i), i)
		}); err != nil {
			return nil, nil, ctxErr(ctx, fmt.Errorf("enqueue ceilings: %s: %w", ways[w].name, err))
		}
	}
	elapsed := make([]time.Duration, len(ways))
	per := events / enqueueRounds
	for round := range enqueueRounds {
		n := per
		if round == enqueueRounds-1 {
			n = events - per*(enqueueRounds-1)
		}
		rd := EnqueueRound{Events: n, PerSec: make([]float64, len(ways)), ServerCPU: make([]float64, len(ways))}
		for k := range ways {
			w := (round + k) % len(ways)
			prefix := fmt.Sprintf("enq-%d-%d-", w, round)
			cpu0, cpuOK := backendCPU(ways[w].pids)
			start := time.Now()
			if err := commitEach(ctx, ways[w].pool, n, producers, func(ctx context.Context, tx pgx.Tx, i int) error {
				return ways[w].one(ctx, tx, prefix+strconv.Itoa(i), i)
			}); err != nil {
				return nil, nil, ctxErr(ctx, fmt.Errorf("enqueue ceilings: %s: %w", ways[w].name, err))
			}
			took := time.Since(start)
			elapsed[w] += took
			rd.PerSec[w] = float64(n) / took.Seconds()
			if cpu1, ok := backendCPU(ways[w].pids); ok && cpuOK && rd.ServerCPU != nil {
				rd.ServerCPU[w] = float64((cpu1 - cpu0).Microseconds()) / float64(n)
			} else {
				rd.ServerCPU = nil
			}
		}
		rounds = append(rounds, rd)
	}
	for w, way := range ways {
		var rows int
		if err := owner.QueryRow(ctx, `SELECT count(DISTINCT event_id) FROM event_outbox WHERE event_id LIKE $1`,
			fmt.Sprintf("enq-%d-%%", w)).Scan(&rows); err != nil {
			return nil, nil, ctxErr(ctx, fmt.Errorf("enqueue ceilings: count events: %w", err))
		}
		if rows != events {
			return nil, nil, fmt.Errorf("enqueue ceilings: %s: the outbox holds %d events, want %d", way.name, rows, events)
		}
		cs = append(cs, newCeiling(fmt.Sprintf("%s (%d producers, one event per transaction)", way.name, producers),
			"events/s", events, elapsed[w]))
	}
	return cs, rounds, nil
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

// warm opens n connections of pool at once and returns their backends'
// process ids.
func warm(ctx context.Context, pool *pgxpool.Pool, n int) ([]int, error) {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	pids := make([]int, 0, n)
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
		pids = append(pids, int(c.Conn().PgConn().PID()))
	}
	return pids, nil
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
