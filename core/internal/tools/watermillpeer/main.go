// Command watermillpeer measures the peer that issue 30 holds Herald's
// single run against: a Watermill outbox (watermill-sql in PostgreSQL)
// forwarded to RabbitMQ (watermill-amqp) by Watermill's forwarder, one
// broker message per event, as MEASUREMENTS.md describes it: --events
// events from --producers producers, each event written in a transaction
// of its own, and a consumer that acks every message it receives.
//
// It runs on the same servers as herald bench (a database of its own on
// --database-url's cluster, a queue of its own on --amqp-url) and prints
// events/s from the first producer's first commit to the last message
// consumed, and the commit → consumed latency p50 and p99, for two
// configurations: "defaults" (Watermill's defaults: no publisher
// confirms, a 1 s poll) and "tuned" (publisher confirms, a 10 ms poll).
// herald bench does not run it: it is a module of its own so Herald's
// build graph carries no Watermill.
//
//	cd core/internal/tools/watermillpeer && go run . --events 20000
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
)

type options struct {
	databaseURL string
	amqpURL     string
	events      int
	producers   int
	modes       string
	deadline    time.Duration
	batch       int
}

// mode is one configuration of the peer.
type mode struct {
	name    string
	confirm bool          // publisher confirms on the forwarder's AMQP publisher
	poll    time.Duration // the SQL subscriber's poll interval (0: Watermill's 1 s)
}

var modes = map[string]mode{
	"defaults": {name: "defaults"},
	"tuned":    {name: "tuned", confirm: true, poll: 10 * time.Millisecond},
}

type result struct {
	mode          string
	events        int
	elapsed       time.Duration
	p50, p99      time.Duration
	producersOnly float64
}

func main() {
	var o options
	flag.StringVar(&o.databaseURL, "database-url", envOr("HERALD_PG_ADMIN_URL", "postgres://herald:herald@127.0.0.1:5432/herald?sslmode=disable"),
		"PostgreSQL URL of a role that may create databases")
	flag.StringVar(&o.amqpURL, "amqp-url", envOr("HERALD_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ URL")
	flag.IntVar(&o.events, "events", 20000, "events per configuration")
	flag.IntVar(&o.producers, "producers", 4, "concurrent producers, one transaction per event")
	flag.StringVar(&o.modes, "modes", "defaults,tuned", "configurations to run, in order: defaults, tuned")
	flag.DurationVar(&o.deadline, "deadline", 10*time.Minute, "cap per configuration")
	flag.IntVar(&o.batch, "batch", 0, "rows the SQL subscriber reads per query in the tuned configuration (0: Watermill's 100)")
	flag.Parse()
	if o.events < 1 || o.producers < 1 {
		fail(errors.New("--events and --producers must be at least 1"))
	}
	ctx := context.Background()
	var order []mode
	for _, name := range strings.Split(o.modes, ",") {
		m, ok := modes[name]
		if !ok {
			fail(fmt.Errorf("--modes: unknown configuration %q (defaults, tuned)", name))
		}
		order = append(order, m)
	}
	for _, m := range order {
		r, err := run(ctx, o, m)
		if err != nil {
			fail(fmt.Errorf("%s: %w", m.name, err))
		}
		fmt.Printf("watermill %s: %d events from %d producers in %.1f s: %.0f events/s (the producers committed at %.0f events/s), commit → consumed p50 %.1f ms, p99 %.1f ms\n",
			r.mode, r.events, o.producers, r.elapsed.Seconds(), float64(r.events)/r.elapsed.Seconds(),
			r.producersOnly, ms(r.p50), ms(r.p99))
	}
}

// run measures one configuration in a database and a queue of its own.
func run(ctx context.Context, o options, m mode) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, o.deadline)
	defer cancel()
	suffix := fmt.Sprintf("%d_%d", os.Getpid(), time.Now().UnixNano())
	dbName := "watermillpeer_" + suffix
	pool, drop, err := createDatabase(ctx, o.databaseURL, dbName)
	if err != nil {
		return result{}, err
	}
	defer drop()
	defer pool.Close()
	logger := watermill.NopLogger{}
	schema := wsql.DefaultPostgreSQLSchema{}
	if m.confirm {
		schema.SubscribeBatchSize = o.batch
	}
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(pool), wsql.SubscriberConfig{
		PollInterval:     m.poll,
		SchemaAdapter:    schema,
		OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
	}, logger)
	if err != nil {
		return result{}, err
	}
	topic := "watermillpeer." + suffix
	amqpCfg := wamqp.NewDurableQueueConfig(o.amqpURL)
	amqpCfg.Publish.ConfirmDelivery = m.confirm
	out, err := wamqp.NewPublisher(amqpCfg, logger)
	if err != nil {
		return result{}, err
	}
	defer out.Close()
	consumerCfg := wamqp.NewDurableQueueConfig(o.amqpURL)
	consumerCfg.Consume.Qos.PrefetchCount = 100
	in, err := wamqp.NewSubscriber(consumerCfg, logger)
	if err != nil {
		return result{}, err
	}
	defer in.Close()
	defer deleteQueue(o.amqpURL, topic)
	if err := in.SubscribeInitialize(topic); err != nil {
		return result{}, err
	}
	fwdTopic := "forwarder_" + suffix
	fwd, err := forwarder.NewForwarder(sub, out, logger, forwarder.Config{ForwarderTopic: fwdTopic})
	if err != nil {
		return result{}, err
	}
	// The outbox table exists before the producers write to it: the
	// forwarder's subscription creates it.
	if err := sub.SubscribeInitialize(fwdTopic); err != nil {
		return result{}, err
	}
	fwdDone := make(chan error, 1)
	go func() { fwdDone <- fwd.Run(ctx) }()
	select {
	case <-fwd.Running():
	case err := <-fwdDone:
		return result{}, fmt.Errorf("forwarder: %w", err)
	case <-ctx.Done():
		return result{}, ctx.Err()
	}
	defer fwd.Close()

	msgs, err := in.Subscribe(ctx, topic)
	if err != nil {
		return result{}, err
	}
	var committed sync.Map // event id → commit time
	consumedAll := make(chan []time.Duration, 1)
	go func() {
		seen := map[string]bool{}
		lat := make([]time.Duration, 0, o.events)
		for msg := range msgs {
			var body struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(msg.Payload, &body)
			now := time.Now()
			msg.Ack()
			if seen[body.ID] {
				continue // a redelivery: counted once
			}
			seen[body.ID] = true
			// A message can arrive before its producer stored the commit
			// time (the forwarder is that fast): wait for it briefly.
			for range 1000 {
				if v, ok := committed.Load(body.ID); ok {
					lat = append(lat, now.Sub(v.(time.Time)))
					break
				}
				time.Sleep(100 * time.Microsecond)
			}
			if len(seen) == o.events {
				consumedAll <- lat
				return
			}
		}
	}()

	var next atomic.Int64
	began := time.Now()
	errs := make(chan error, o.producers)
	var wg sync.WaitGroup
	for range o.producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(o.events) {
					return
				}
				id := fmt.Sprintf("event-%d", i)
				if err := produce(ctx, pool, schema, fwdTopic, topic, id); err != nil {
					errs <- err
					return
				}
				committed.Store(id, time.Now())
			}
		}()
	}
	wg.Wait()
	producersDone := time.Since(began)
	select {
	case err := <-errs:
		return result{}, err
	default:
	}
	var lat []time.Duration
	select {
	case lat = <-consumedAll:
	case <-ctx.Done():
		return result{}, fmt.Errorf("not every event reached the queue before the deadline: %w", ctx.Err())
	}
	elapsed := time.Since(began)
	slices.Sort(lat)
	return result{mode: m.name, events: o.events, elapsed: elapsed, p50: pct(lat, 0.50), p99: pct(lat, 0.99),
		producersOnly: float64(o.events) / producersDone.Seconds()}, nil
}

// produce writes one event the way a service using Watermill's outbox
// does: in its own transaction, through the forwarder's publisher over a
// SQL publisher bound to that transaction.
func produce(ctx context.Context, pool *pgxpool.Pool, schema wsql.SchemaAdapter, fwdTopic, topic, id string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	sqlPub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: schema}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	pub := forwarder.NewPublisher(sqlPub, forwarder.PublisherConfig{ForwarderTopic: fwdTopic})
	payload, _ := json.Marshal(map[string]any{"id": id, "type": "RESERVATION_REQUESTED",
		"payload": map[string]any{"restaurant_id": 5, "customer_name": "Rossi", "pax": 4}})
	if err := pub.Publish(topic, message.NewMessage(watermill.NewUUID(), payload)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// createDatabase creates name on url's cluster and returns a pool on it
// and a function that drops it.
func createDatabase(ctx context.Context, url, name string) (*pgxpool.Pool, func(), error) {
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		_ = admin.Close(ctx)
		return nil, nil, err
	}
	drop := func() {
		c := context.Background()
		_, _ = admin.Exec(c, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		_ = admin.Close(c)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		drop()
		return nil, nil, err
	}
	cfg.ConnConfig.Database = name
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		drop()
		return nil, nil, err
	}
	return pool, drop, nil
}

// deleteQueue removes the run's queue.
func deleteQueue(url, name string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	_, _ = ch.QueueDelete(name, false, false, false)
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "watermillpeer:", err)
	os.Exit(1)
}
