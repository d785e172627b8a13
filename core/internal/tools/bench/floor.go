package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/delivery"
	"github.com/heraldhq/herald/core/internal/maintenance"
	"github.com/heraldhq/herald/core/internal/relay"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/sdk"
)

// Floor is the database floor of one shape: what PostgreSQL alone lets
// the pipeline do on this machine. With no broker and no plugin, it runs
// the pipeline's own code against a migrated database of its own, as the
// daemon's role (herald_worker, row-level security on) and with the
// daemon's concurrency: producers enqueue as a run's producers do, the
// relay (relay.Relay, the daemon's relay settings and the run's rules)
// claims events and writes notifications, deliveries, counters and the
// handoff rows, a stand-in for the handoff takes each committed batch at
// once (no broker: every message counts as confirmed) and deletes its
// handoff rows as the handoff does (store.DeleteHandoffs), and the
// listener's own code (delivery.Listener.HandleMessage: the in-flight
// guard, the check, store.RecordOutcomes per MaxBatch chunk, the lock
// release) handles each message with a plugin stand-in that returns
// "sent" at once; the maintenance stage runs as in the daemon. Whatever
// those write (attempts, status events by trigger, …) the floor writes.
type Floor struct {
	// Scenario is the shape: its Name ("fanout" or "single"), Events,
	// Recipients, Channels and Producers.
	Scenario Scenario `json:"scenario"`
	// EventsEnqueued is how many events the producers committed;
	// Deliveries how many deliveries were recorded SENT.
	EventsEnqueued int `json:"events_enqueued"`
	Deliveries     int `json:"deliveries"`
	// Elapsed runs from the first commit to the last outcome recorded.
	Elapsed        time.Duration `json:"elapsed_ns"`
	EventsPerSec   float64       `json:"events_per_sec"`
	DeliveriesPerS float64       `json:"deliveries_per_sec"`
	// Concurrency says what ran at once: relay workers, listener
	// consumers per channel, deliveries per message, pool size.
	Concurrency string `json:"concurrency"`
	// GoCPU is the CPU this process used while measured (the producers,
	// the relay's rule engine and rendering, the listener's Go side), as a
	// fraction of one core: it ran on the machine PostgreSQL ran on.
	GoCPU float64 `json:"go_cpu_cores"`
	// Writes are the row writes of every table the floor wrote
	// (pg_stat_user_tables, a table's partitions summed), from before the
	// producers started until every session of the floor ended.
	Writes []TableWrites `json:"writes"`
	// WritesPerDelivery is every table's row writes (inserts, updates and
	// deletes) divided by Deliveries.
	WritesPerDelivery float64 `json:"writes_per_delivery"`
	// Redelivered counts messages the listener gave back (nack with
	// requeue), which the floor handed it again: none on the happy path.
	Redelivered int `json:"redelivered"`
	// Check is the exactly-once verdict: every delivery SENT once, every
	// event PROCESSED.
	Check Check `json:"check"`
}

// TableWrites is one table's row writes during a floor run.
type TableWrites struct {
	Table   string `json:"table"`
	Inserts int64  `json:"inserts"`
	// Updates counts every update, HOTUpdates those that wrote no index
	// entry (heap-only tuples).
	Updates    int64 `json:"updates"`
	HOTUpdates int64 `json:"hot_updates"`
	Deletes    int64 `json:"deletes"`
}

// Rows is every row the table wrote: inserts, updates and deletes.
func (t TableWrites) Rows() int64 { return t.Inserts + t.Updates + t.Deletes }

// writesPerDelivery is every table's row writes divided by deliveries.
func writesPerDelivery(writes []TableWrites, deliveries int) float64 {
	if deliveries == 0 {
		return 0
	}
	var n int64
	for _, t := range writes {
		n += t.Rows()
	}
	return float64(n) / float64(deliveries)
}

// perDelivery is n divided by the floor's deliveries.
func (f Floor) perDelivery(n int64) float64 {
	if f.Deliveries == 0 {
		return 0
	}
	return float64(n) / float64(f.Deliveries)
}

// floorMaxBatch is the MaxBatch the floor's plugin stand-in declares: what
// the recording sink declares (core/internal/tools/sinkplugin), so the
// listener records outcomes in the chunks of a pipeline run.
const floorMaxBatch = 100

// floorQueue bounds the messages waiting for one channel's consumers; the
// handoff stand-in waits while it is full.
const floorQueue = 1024

// FloorScenarios are the floor's two shapes, sized to take seconds: the
// fanout run's (recipients × channels, producers) with fanoutEvents
// events, and the single run's with singleEvents.
func FloorScenarios(fanout, single Scenario, fanoutEvents, singleEvents int) []Scenario {
	f, s := fanout, single
	f.Name, f.Events, f.Serve, f.Rate, f.Window, f.Deliveries, f.Backlog = "fanout", fanoutEvents, 1, 0, 0, 0, 0
	s.Name, s.Events, s.Serve, s.Rate, s.Window, s.Deliveries, s.Backlog = "single", singleEvents, 1, 0, 0, 0, 0
	return []Scenario{f, s}
}

// RunFloor measures the database floor of sc's shape (see Floor) in a
// database of its own, which it drops afterwards unless env.Keep. The run
// is capped by sc.Duration. Its Check says whether every delivery was SENT
// exactly once and every event PROCESSED (Report.Err fails the report when
// not).
func RunFloor(ctx context.Context, env Env, sc Scenario) (res Floor, err error) {
	res.Scenario = sc
	if err := checkScenario(sc); err != nil {
		return res, err
	}
	if sc.Rate > 0 || sc.Window > 0 || sc.Source || sc.Digest > 0 || sc.RLS != RLSWorker {
		return res, fmt.Errorf("bench: floor %s: the floor runs the plain unpaced shape as herald_worker only", sc.Name)
	}
	logf := env.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	d := config.DefaultDaemon()
	// The bench's daemons run with database.max_conns = 12 (startDaemon).
	const maxConns = 12
	name := fmt.Sprintf("herald_bench_floor_%s_%d_%d", sc.Name, time.Now().Unix(), os.Getpid())
	dbURL, owner, drop, err := heraldDatabase(ctx, env.AdminDatabaseURL, name, sc.Producers+2, 0)
	if err != nil {
		return res, fmt.Errorf("bench: floor %s: %w", sc.Name, err)
	}
	defer func() {
		if !env.Keep {
			if derr := drop(); derr != nil {
				err = errors.Join(err, derr)
			}
		}
	}()
	groups := seedGroups(sc)
	seedErr := seed(ctx, owner, sc, groups)
	owner.Close()
	if seedErr != nil {
		return res, seedErr
	}

	dir, err := os.MkdirTemp("", "herald-bench-floor-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	channels := make([]string, sc.Channels)
	for i := range channels {
		channels[i] = fmt.Sprintf("BENCH%d", i+1)
	}
	rulesPath := filepath.Join(dir, "rules.hcl")
	if err := os.WriteFile(rulesPath, []byte(rulesFile(sc, channels, filepath.Join(dir, "records"))), 0o600); err != nil {
		return res, err
	}
	rs, err := rulesfile.Load(rulesPath)
	if err != nil {
		return res, fmt.Errorf("bench: floor %s: rules: %w", sc.Name, err)
	}
	current := func() *rules.RuleSet { return rs }

	// What the floor writes is read from the statistics once every
	// session that wrote ended (a backend sends its statistics at exit).
	if err := waitSessionsGone(ctx, env.AdminDatabaseURL, name); err != nil {
		return res, err
	}
	before, err := tableWrites(ctx, dbURL)
	if err != nil {
		return res, err
	}

	producers, err := store.NewPool(ctx, dbURL, sc.Producers+2)
	if err != nil {
		return res, err
	}
	worker, err := store.NewPoolWith(ctx, dbURL, store.PoolOptions{MaxConns: maxConns, Role: RLSWorker.workerRole()})
	if err != nil {
		producers.Close()
		return res, err
	}
	run := newFloorRun(worker, current, d, channels, sc.Events*sc.perEvent())
	res.Concurrency = fmt.Sprintf("relay %d workers (batch %d); listener %d consumers per channel; %d deliveries per message; MaxBatch %d; pool %d",
		d.Relay.Workers, d.Relay.BatchSize, floorConsumers, d.Publisher.PerMessage, floorMaxBatch, maxConns)
	logf("floor %s: %d events × %d deliveries, no broker, no plugin (%s)", sc.Name, sc.Events, sc.perEvent(), res.Concurrency)

	runCtx, cancel := context.WithTimeout(ctx, sc.Duration)
	defer cancel()
	stages, stop := context.WithCancel(runCtx)
	var wg sync.WaitGroup
	run.start(stages, &wg)

	commits := make([]int64, sc.Events)
	var enqueued atomic.Int64
	cpuStart := selfCPU()
	wallStart := time.Now()
	produceErr := produce(runCtx, producers, sc, groups, commits, 0, &enqueued, nil)
	var waitErr error
	if produceErr == nil {
		waitErr = run.wait(runCtx)
	}
	wall := time.Since(wallStart)
	stop()
	wg.Wait()
	run.listener.CloseGuard(context.WithoutCancel(ctx))
	producers.Close()
	worker.Close()
	res.GoCPU = (selfCPU() - cpuStart).Seconds() / wall.Seconds()
	if produceErr != nil {
		return res, fmt.Errorf("bench: floor %s: produce: %w", sc.Name, produceErr)
	}
	if err := run.failure(); err != nil {
		return res, fmt.Errorf("bench: floor %s: %w", sc.Name, err)
	}
	res.EventsEnqueued = int(enqueued.Load())
	res.Redelivered = int(run.redelivered.Load())
	first, last := int64(0), run.lastRecorded.Load()
	for _, c := range commits {
		if c > 0 && (first == 0 || c < first) {
			first = c
		}
	}
	if first > 0 && last > first {
		res.Elapsed = time.Duration(last - first)
	}

	// The verdict and the statistics, on sessions of their own.
	if err := waitSessionsGone(ctx, env.AdminDatabaseURL, name); err != nil {
		return res, err
	}
	after, err := tableWrites(ctx, dbURL)
	if err != nil {
		return res, err
	}
	res.Writes = writesBetween(before, after)
	checkPool, err := store.NewPool(ctx, dbURL, 2)
	if err != nil {
		return res, err
	}
	defer checkPool.Close()
	expected := res.EventsEnqueued * sc.perEvent()
	res.Check, err = check(ctx, checkPool, expected, run.records())
	if err != nil {
		return res, err
	}
	var unprocessed int
	if err := checkPool.QueryRow(ctx, `SELECT count(*) FROM event_outbox WHERE status <> 'PROCESSED'`).Scan(&unprocessed); err != nil {
		return res, fmt.Errorf("bench: floor %s: check events: %w", sc.Name, err)
	}
	if unprocessed > 0 {
		res.Check.OK = false
		res.Check.Detail += fmt.Sprintf("; %d events not PROCESSED", unprocessed)
	}
	if waitErr != nil {
		res.Check.OK = false
		res.Check.Detail = fmt.Sprintf("floor cut off after %s: %s", sc.Duration, res.Check.Detail)
	}
	res.Deliveries = res.Check.Sent
	res.WritesPerDelivery = writesPerDelivery(res.Writes, res.Deliveries)
	if secs := res.Elapsed.Seconds(); secs > 0 {
		res.EventsPerSec = float64(res.EventsEnqueued) / secs
		res.DeliveriesPerS = float64(res.Deliveries) / secs
	}
	return res, nil
}

// floorConsumers is how many messages of one channel the listener handles
// at once: the bench's daemons give every queue concurrency = 4
// (startDaemon).
const floorConsumers = 4

// floorRun is the pipeline of one floor run: the relay, the handoff
// stand-in, the listener and the maintenance stage on one worker pool.
type floorRun struct {
	pool     *pgxpool.Pool
	relay    *relay.Relay
	listener *delivery.Listener
	maint    *maintenance.Maintenance
	handoff  *floorHandoff
	sender   *floorSender
	queues   map[string]chan amqp.Delivery
	expected int64

	recorded     atomic.Int64 // deliveries whose message was acked
	lastRecorded atomic.Int64 // when the last of them was (Unix ns)
	redelivered  atomic.Int64
	done         chan struct{} // closed when recorded reaches expected
	stopped      <-chan struct{}

	errMu sync.Mutex
	err   error
}

func newFloorRun(pool *pgxpool.Pool, current func() *rules.RuleSet, d config.Daemon, channels []string, expected int) *floorRun {
	log := hclog.NewNullLogger()
	r := &floorRun{pool: pool, sender: &floorSender{sent: map[string]int{}}, queues: map[string]chan amqp.Delivery{},
		expected: int64(expected), done: make(chan struct{})}
	for _, ch := range channels {
		r.queues[ch] = make(chan amqp.Delivery, floorQueue)
	}
	pubCfg := d.Publisher
	confirm := pubCfg.ConfirmTimeout
	if confirm <= 0 {
		confirm = 30 * time.Second // delivery.PublisherConfig's default
	}
	r.handoff = &floorHandoff{batches: make(chan floorBatch, 64), grace: confirm + 10*time.Second,
		perMessage: pubCfg.PerMessage}
	relayCfg := d.Relay
	relayCfg.Handoff = r.handoff
	r.relay = relay.New(pool, current, nil, log, relayCfg)
	r.listener = delivery.NewListener(pool, nil, r.sender, current, log, delivery.ListenerConfig{Lease: d.Retry.Lease})
	r.maint = maintenance.New(pool, d.Retry.PollInterval, func() {}, log)
	return r
}

// fail records the run's first error.
func (r *floorRun) fail(err error) {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

func (r *floorRun) failure() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.err
}

// start runs the stages until ctx ends.
func (r *floorRun) start(ctx context.Context, wg *sync.WaitGroup) {
	r.stopped = ctx.Done()
	goRun := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	goRun(func() { _ = r.relay.Run(ctx) })
	goRun(func() { _ = r.maint.Run(ctx) })
	goRun(func() { r.handoff.run(ctx, r) })
	for _, q := range r.queues {
		for range floorConsumers {
			goRun(func() {
				for {
					select {
					case <-ctx.Done():
						return
					case m := <-q:
						r.listener.HandleMessage(ctx, m)
					}
				}
			})
		}
	}
}

// wait waits until every expected delivery's message was acked.
func (r *floorRun) wait(ctx context.Context) error {
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// records are the deliveries the plugin stand-in was sent, as the sink's
// records, for check.
func (r *floorRun) records() []sinkRecord {
	return r.sender.records()
}

// floorBatch is one committed relay batch handed over.
type floorBatch struct {
	id   int64
	dels []store.NewDelivery
}

// floorHandoff stands in for delivery.Handoff with no broker: the relay
// offers it each committed batch; it turns the batches into the messages
// the handoff would publish (version 2, grouped by routing key, at most
// PerMessage deliveries each) and puts them on their channel's queue, and
// deletes the batches' handoff rows as the handoff does once the broker
// confirmed them (here at once): the relay's next batch takes them
// (TakeConfirmed) and deletes them in its own transaction, and what no
// batch took within floorDeleteAfter is deleted by a statement of its own.
type floorHandoff struct {
	batches    chan floorBatch
	grace      time.Duration
	perMessage int
	mu         sync.Mutex
	done       []int64
}

var _ relay.Handoff = (*floorHandoff)(nil)

// Ready is always true: the floor's broker never goes down.
func (h *floorHandoff) Ready() bool { return true }

// Grace is the handoff's: the publisher's confirm timeout and 10 s.
func (h *floorHandoff) Grace() time.Duration { return h.grace }

// Owner is 0: the rows name no daemon (none takes them over here).
func (h *floorHandoff) Owner() int32 { return 0 }

// TakeConfirmed returns the rows queued since the last take, for the
// relay's transaction to delete.
func (h *floorHandoff) TakeConfirmed() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := h.done
	h.done = nil
	return ids
}

// ReturnConfirmed gives back rows a relay transaction did not delete.
func (h *floorHandoff) ReturnConfirmed(ids []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done = append(h.done, ids...)
}

// Offer hands over a committed batch; it waits while the handoff is behind.
func (h *floorHandoff) Offer(ctx context.Context, id int64, dels []store.NewDelivery) {
	select {
	case h.batches <- floorBatch{id: id, dels: dels}:
	case <-ctx.Done():
	}
}

// floorGather bounds the deliveries one round takes, as the handoff's
// rounds do (handoffGather).
const floorGather = 10000

// run publishes the offered batches to the queues until ctx ends. As in
// the handoff, publishing never waits for the database: a second goroutine
// deletes the handoff rows of the rounds queued (those ready together with
// one statement, as the handoff's confirm loop does).
func (h *floorHandoff) run(ctx context.Context, r *floorRun) {
	rounds := make(chan []int64, floorPipeline)
	deleted := make(chan struct{})
	go func() {
		defer close(deleted)
		h.deleteRounds(ctx, r, rounds)
	}()
	defer func() {
		close(rounds)
		<-deleted
	}()
	for {
		var batches []floorBatch
		select {
		case <-ctx.Done():
			return
		case b := <-h.batches:
			batches = append(batches, b)
		}
		n := len(batches[0].dels)
	gather:
		for n < floorGather {
			select {
			case b := <-h.batches:
				batches = append(batches, b)
				n += len(b.dels)
			default:
				break gather
			}
		}
		ids := make([]int64, len(batches))
		byKey := map[string][]delivery.Wire{}
		channelOf := map[string]string{}
		for i, b := range batches {
			ids[i] = b.id
			for _, d := range b.dels {
				key := broker.RoutingKey(d.UserType, d.Channel)
				byKey[key] = append(byKey[key], delivery.HandoffWire(d))
				channelOf[key] = d.Channel
			}
		}
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, key := range keys {
			wires := byKey[key]
			q, ok := r.queues[channelOf[key]]
			if !ok {
				r.fail(fmt.Errorf("no queue for routing key %s", key))
				return
			}
			for start := 0; start < len(wires); start += h.perMessage {
				part := wires[start:min(start+h.perMessage, len(wires))]
				body, err := json.Marshal(delivery.Envelope{V: 2, Deliveries: part})
				if err != nil {
					r.fail(err)
					return
				}
				ack := &floorAck{run: r, n: len(part)}
				m := amqp.Delivery{Body: body, MessageId: part[0].ID, Acknowledger: ack}
				ack.m = m
				select {
				case q <- m:
				case <-ctx.Done():
					return
				}
			}
		}
		select {
		case rounds <- ids:
		case <-ctx.Done():
			return
		}
	}
}

// floorPipeline bounds the rounds queued whose handoff rows are not yet
// deleted, as the handoff bounds its unconfirmed rounds (handoffPipeline).
const floorPipeline = 16

// floorDeleteAfter is how long queued rows wait for a relay batch to take
// them before they are deleted alone (the handoff's deleteAfter).
const floorDeleteAfter = 200 * time.Millisecond

// deleteRounds makes the handoff rows of each round queued confirmed, for
// the relay's next batch to delete; every floorDeleteAfter it deletes those
// no batch took, and at the end what is left, until rounds is closed.
func (h *floorHandoff) deleteRounds(ctx context.Context, r *floorRun, rounds <-chan []int64) {
	work := context.WithoutCancel(ctx)
	sweep := func() {
		if ids := h.TakeConfirmed(); len(ids) > 0 {
			if err := store.DeleteHandoffs(work, r.pool, ids); err != nil && ctx.Err() == nil {
				r.fail(fmt.Errorf("delete handoffs: %w", err))
			}
		}
	}
	tick := time.NewTicker(floorDeleteAfter)
	defer tick.Stop()
	for {
		select {
		case ids, ok := <-rounds:
			if !ok {
				sweep()
				return
			}
			h.ReturnConfirmed(ids)
		case <-tick.C:
			sweep()
		}
	}
}

// floorAck is the acknowledger of one floor message: an ack counts its
// deliveries recorded; a nack with requeue hands the message to its
// queue again, as the broker would.
type floorAck struct {
	run *floorRun
	n   int
	m   amqp.Delivery
}

// Ack counts the message's deliveries as recorded.
func (a *floorAck) Ack(uint64, bool) error {
	now := time.Now().UnixNano()
	for {
		last := a.run.lastRecorded.Load()
		if now <= last || a.run.lastRecorded.CompareAndSwap(last, now) {
			break
		}
	}
	if a.run.recorded.Add(int64(a.n)) == a.run.expected {
		close(a.run.done)
	}
	return nil
}

// Nack requeues the message when asked; the floor's happy path never
// does.
func (a *floorAck) Nack(_ uint64, _ bool, requeue bool) error {
	a.run.redelivered.Add(1)
	if !requeue {
		a.run.fail(errors.New("the listener dropped a message"))
		return nil
	}
	var env delivery.Envelope
	if err := json.Unmarshal(a.m.Body, &env); err != nil || len(env.Deliveries) == 0 {
		a.run.fail(fmt.Errorf("requeue: %v", err))
		return nil
	}
	q := a.run.queues[env.Deliveries[0].Channel]
	go func() {
		select {
		case q <- a.m:
		case <-a.run.stopped:
		}
	}()
	return nil
}

// Reject is a nack of one message.
func (a *floorAck) Reject(tag uint64, requeue bool) error { return a.Nack(tag, false, requeue) }

// floorSender stands in for the plugin host: every delivery is sent at
// once, and recorded for the exactly-once check.
type floorSender struct {
	mu   sync.Mutex
	sent map[string]int // delivery id → attempts sent
}

// Send returns Sent for every delivery.
func (s *floorSender) Send(_ context.Context, _ string, batch []sdk.Delivery) ([]sdk.Result, string, error) {
	out := make([]sdk.Result, len(batch))
	s.mu.Lock()
	for i, d := range batch {
		s.sent[d.DeliveryID]++
		out[i] = sdk.Result{DeliveryID: d.DeliveryID, Outcome: sdk.OutcomeSent, ProviderMessageID: "floor-" + d.DeliveryID}
	}
	s.mu.Unlock()
	return out, "floor", nil
}

// Describe declares the sink's MaxBatch for every channel.
func (s *floorSender) Describe(string) (sdk.Description, bool) {
	return sdk.Description{MaxBatch: floorMaxBatch}, true
}

func (s *floorSender) records() []sinkRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	recs := make([]sinkRecord, 0, len(s.sent))
	for id, n := range s.sent {
		for range n {
			recs = append(recs, sinkRecord{DeliveryID: id, Attempt: 1, Outcome: "sent"})
		}
	}
	return recs
}

// waitSessionsGone waits until no session but the caller's is connected to
// database name: a backend sends its table statistics when it exits.
func waitSessionsGone(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("bench: floor: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()`, name).Scan(&n); err != nil {
			return fmt.Errorf("bench: floor: sessions of %s: %w", name, err)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: floor: %d sessions still connected to %s after 30s", n, name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// tableWrites reads the row writes of every user table of the database at
// dbURL, a partitioned table's partitions summed under its name.
func tableWrites(ctx context.Context, dbURL string) (map[string]TableWrites, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("bench: floor: table writes: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `
		SELECT coalesce(pg_partition_root(s.relid), s.relid::regclass)::text,
			sum(s.n_tup_ins)::bigint, sum(s.n_tup_upd)::bigint, sum(s.n_tup_hot_upd)::bigint, sum(s.n_tup_del)::bigint
		FROM pg_stat_user_tables s GROUP BY 1`)
	if err != nil {
		return nil, fmt.Errorf("bench: floor: table writes: %w", err)
	}
	out := map[string]TableWrites{}
	for rows.Next() {
		var t TableWrites
		if err := rows.Scan(&t.Table, &t.Inserts, &t.Updates, &t.HOTUpdates, &t.Deletes); err != nil {
			rows.Close()
			return nil, err
		}
		t.Table = strings.TrimPrefix(t.Table, "public.")
		out[t.Table] = t
	}
	return out, rows.Err()
}

// writesBetween is what each table wrote from before to after, for the
// tables that wrote anything, the most written first.
func writesBetween(before, after map[string]TableWrites) []TableWrites {
	var out []TableWrites
	for name, a := range after {
		b := before[name]
		d := TableWrites{Table: name, Inserts: a.Inserts - b.Inserts, Updates: a.Updates - b.Updates,
			HOTUpdates: a.HOTUpdates - b.HOTUpdates, Deletes: a.Deletes - b.Deletes}
		if d.Rows() > 0 {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Rows() != out[j].Rows() {
			return out[i].Rows() > out[j].Rows()
		}
		return out[i].Table < out[j].Table
	})
	return out
}
