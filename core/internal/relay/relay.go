// Package relay is the relay: it claims PENDING events from the
// transactional outbox and, in one transaction per batch, turns each into
// inbox notifications and per-channel deliveries (as the rule engine
// decides), bumps unread counters and marks the events PROCESSED. A crash
// rolls the batch back; unique keys make a second run write nothing twice.
package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/config/field"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/metrics"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/tracing"
	"github.com/heraldhq/herald/sdk"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// DefaultEventRetry is the retry policy of an event the relay cannot
// process (its rule, a template or its data fail, or the database does):
// retried after 1s, 2s, 4s… up to 5 minutes, without jitter, until
// Config.MaxAttempts tries (which replaces MaxAttempts here) have failed;
// then it is FAILED.
var DefaultEventRetry = channel.RetryPolicy{MaxAttempts: 5, Initial: time.Second, Max: 5 * time.Minute, Multiplier: 2}

// Config tunes the relay: the daemon's relay { ... } settings (the
// fields with a koanf tag) and what the daemon wires in.
type Config struct {
	// BatchSize is how many events one transaction claims.
	BatchSize int `koanf:"batch_size"`
	// BatchBytes bounds the payloads one transaction loads, in bytes as
	// stored (jsonb's text): a claim takes events, oldest first, while
	// their payloads add up to at most this, and always at least one. An
	// event whose payload is over the event contract's limit (262144
	// bytes; only possible for rows older than the contract or written by a
	// superuser) is marked FAILED without being loaded.
	BatchBytes int64 `koanf:"batch_bytes"`
	// PollInterval is the fallback wake-up when no notification arrives
	// (producers' NOTIFY wakes an idle relay at once).
	PollInterval time.Duration `koanf:"poll_interval"`
	// MaxAttempts bounds how often an event that cannot be processed is
	// tried before it is marked FAILED.
	MaxAttempts int `koanf:"max_attempts"`
	// Workers is the number of concurrent relay loops: the first relays
	// whenever woken, the others join while claims come back full.
	Workers int `koanf:"workers"`
	// Handoff, when set, publishes the deliveries of each committed batch
	// itself (see delivery.Handoff); without it, or while it is not ready,
	// the publisher claims them.
	Handoff Handoff
	// Metrics records batches, processed and failed events and deferred
	// deliveries (nil: none).
	Metrics *metrics.Metrics
}

// DefaultConfig returns the relay's default settings.
func DefaultConfig() Config {
	return Config{BatchSize: 100, BatchBytes: 4 << 20, PollInterval: 200 * time.Millisecond, MaxAttempts: 5, Workers: 2}
}

// Validate checks the settings; it returns field.Errors naming the keys.
func (c Config) Validate() error {
	var errs field.Errors
	errs.Positive("batch_size", c.BatchSize)
	errs.Positive("batch_bytes", int(c.BatchBytes))
	errs.PositiveDuration("poll_interval", c.PollInterval)
	errs.Positive("max_attempts", c.MaxAttempts)
	errs.Positive("workers", c.Workers)
	return errs.Err()
}

// Handoff takes the deliveries of committed relay batches to the broker.
type Handoff interface {
	// Ready reports whether it takes a batch now.
	Ready() bool
	// Grace is how long its row may wait for a broker confirm.
	Grace() time.Duration
	// Owner is the daemon's liveness id its rows carry (0: none); a
	// publisher takes over the rows of a dead owner at once.
	Owner() int32
	// Offer hands over a committed batch and its handoff row.
	Offer(ctx context.Context, id int64, dels []store.NewDelivery)
	// TakeConfirmed returns the handoff rows whose deliveries the broker
	// confirmed, for the relay's transaction to delete with its own
	// handoff row; ReturnConfirmed gives back those of a transaction that
	// did not commit.
	TakeConfirmed() []int64
	ReturnConfirmed(ids []int64)
}

// setDefaults gives every setting left zero its default.
func (c *Config) setDefaults() {
	d := DefaultConfig()
	if c.BatchSize <= 0 {
		c.BatchSize = d.BatchSize
	}
	if c.BatchBytes <= 0 {
		c.BatchBytes = d.BatchBytes
	}
	if c.PollInterval <= 0 {
		c.PollInterval = d.PollInterval
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	if c.Workers <= 0 {
		c.Workers = d.Workers
	}
}

// Relay turns outbox events into notifications and deliveries.
type Relay struct {
	pool  *pgxpool.Pool
	rules func() *rules.RuleSet
	cfg   Config
	log   hclog.Logger
	kick  chan struct{}
	// surge wakes the workers after the first: a claim came back full, so
	// events are waiting faster than one worker relays them.
	surge chan struct{}
	// published is called after a batch wrote deliveries.
	published func()
	now       func() time.Time
}

// New returns a relay reading the current rules through ruleset and
// calling onDeliveries after each batch that wrote deliveries.
func New(pool *pgxpool.Pool, ruleset func() *rules.RuleSet, onDeliveries func(), log hclog.Logger, cfg Config) *Relay {
	cfg.setDefaults()
	if onDeliveries == nil {
		onDeliveries = func() {}
	}
	return &Relay{pool: pool, rules: ruleset, cfg: cfg, log: log.Named("relay"), kick: make(chan struct{}, 1),
		surge: make(chan struct{}, cfg.Workers), published: onDeliveries, now: time.Now}
}

// Kick wakes the relay.
func (r *Relay) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run relays until ctx ends, woken by LISTEN/NOTIFY on new events, by Kick
// and, as a fallback, every PollInterval. It returns once every worker and
// the LISTEN session stopped. A lost LISTEN session is taken again inside
// (the poll covers the gap), a failed batch is retried: nothing here is
// fatal to the daemon.
func (r *Relay) Run(ctx context.Context) error {
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		store.Listen(ctx, r.pool, "herald_events", r.log, r.Kick)
	}()
	defer func() { <-listened }()
	done := make(chan struct{})
	for i := range r.cfg.Workers {
		go func() {
			defer func() { done <- struct{}{} }()
			if i == 0 {
				r.loop(ctx)
			} else {
				r.surgeLoop(ctx)
			}
		}()
	}
	for range r.cfg.Workers {
		<-done
	}
	return nil
}

func (r *Relay) loop(ctx context.Context) {
	// wait grows from a few milliseconds after the last batch to
	// PollInterval: a producer that committed just after the relay's last
	// empty claim, while the relay's own batch still looked like a waiting
	// event to the producer's trigger, sent no notification (migration
	// 0003), and is found by the next short poll instead of a full one.
	const firstWait = 5 * time.Millisecond
	wait := r.cfg.PollInterval
	for ctx.Err() == nil {
		n, full, err := r.runOnce(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("relay batch failed; it will be retried", "error", err)
			sleep(ctx, 500*time.Millisecond)
			continue
		}
		if n > 0 {
			// Keep claiming until a claim comes back empty: producers only
			// notify when no older event waits, so the relay must not go
			// idle while events remain.
			wait = firstWait
			if full {
				r.signalSurge()
			}
			continue
		}
		t := time.NewTimer(min(wait, r.cfg.PollInterval))
		select {
		case <-ctx.Done():
		case <-r.kick:
		case <-t.C:
		}
		t.Stop()
		wait = min(wait*2, r.cfg.PollInterval)
	}
}

// signalSurge wakes the idle extra workers.
func (r *Relay) signalSurge() {
	for range r.cfg.Workers - 1 {
		select {
		case r.surge <- struct{}{}:
		default:
			return
		}
	}
}

// surgeLoop is a worker after the first: it relays only while claims come
// back at least half full (a backlog), and otherwise waits for the next
// surge. At a light load one worker relays every event as it comes, in
// batches of one or a few: more workers would only split those into more,
// smaller transactions.
func (r *Relay) surgeLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.surge:
		}
		for ctx.Err() == nil {
			n, full, err := r.runOnce(ctx)
			if err != nil {
				if ctx.Err() == nil {
					r.log.Warn("relay batch failed; it will be retried", "error", err)
					sleep(ctx, 500*time.Millisecond)
				}
				break
			}
			if !full && n < r.cfg.BatchSize/2 {
				break
			}
		}
	}
}

// RunOnce processes one batch and returns how many events it claimed
// (those failed for their payload's size included).
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	n, _, err := r.runOnce(ctx)
	return n, err
}

// runOnce is RunOnce that also reports whether the claim was full: more
// events were due than the batch's count or byte budget took.
func (r *Relay) runOnce(ctx context.Context) (int, bool, error) {
	rs := r.rules()
	if rs == nil {
		return 0, false, errors.New("no rules loaded")
	}
	began := time.Now()
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return 0, false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	claim, err := store.ClaimEvents(ctx, tx, r.cfg.BatchSize, r.cfg.BatchBytes)
	if err != nil {
		return 0, false, err
	}
	events := claim.Events
	if len(events) == 0 {
		if len(claim.Oversize) == 0 {
			return 0, false, nil
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, false, fmt.Errorf("commit relay batch: %w", err)
		}
		r.oversize(claim.Oversize)
		return len(claim.Oversize), claim.Full, nil
	}
	// Each event's notifications and deliveries are gathered per event and
	// joined once, at their final size: appending thousands of deliveries
	// one event at a time would copy them over and over as the slice grows.
	var (
		noteParts [][]store.NewNotification
		delParts  [][]store.NewDelivery
	)
	now := r.now()
	// One directory snapshot per tenant for the whole batch: the union of
	// what its events need, loaded with a handful of queries, instead of a
	// round of queries per event.
	var retried, failedEvents int
	// An event that breaks its type's rules (no rule, a payload that is
	// not an object or fails the type's JSON Schema) fails at once, in
	// this transaction, and the others go on.
	rejected := make([]*Rejection, len(events))
	var rejectedIDs []int64
	var rejectedWhy []string
	needErr := make([]error, len(events))
	merged := map[string]directory.Needs{}
	for i, e := range events {
		if rj := Check(rs, e.Type, e.Payload); rj != nil {
			rejected[i] = rj
			rejectedIDs, rejectedWhy = append(rejectedIDs, e.ID), append(rejectedWhy, rj.Reason)
			continue
		}
		n, err := rs.Needs(toRulesEvent(e))
		if needErr[i] = err; err != nil {
			continue
		}
		merged[e.TenantID] = merged[e.TenantID].Union(n)
	}
	dirs := make(map[string]rules.DirectoryIndex, len(merged))
	for tenant, m := range merged {
		dir, err := store.LoadDirectory(ctx, tx, tenant, m)
		if err != nil {
			return 0, false, err // the whole batch rolls back and is retried
		}
		dirs[tenant] = rules.IndexDirectory(dir)
	}
	if err := store.FailEvents(ctx, tx, rejectedIDs, rejectedWhy); err != nil {
		return 0, false, err
	}
	// One span per event, child of the trace context the event came
	// with; its deliveries carry the span's context on. The spans end
	// once the batch committed or rolled back.
	spans := make([]trace.Span, len(events))
	outcomes := make([]string, len(events))
	committed := false
	defer func() {
		for i, sp := range spans {
			if sp == nil {
				continue
			}
			if !committed {
				outcomes[i] = "rolled_back"
			}
			tracing.End(sp, outcomes[i], outcomes[i] != "processed")
		}
	}()
	for i, e := range events {
		var (
			n   []store.NewNotification
			d   []store.NewDelivery
			err = needErr[i]
		)
		sctx, span := tracing.Start(ctx, e.TraceParent, e.TraceState, "herald.relay.event", trace.SpanKindConsumer,
			tracing.Tenant.String(e.TenantID), tracing.EventType.String(e.Type))
		spans[i], outcomes[i] = span, "processed"
		if rj := rejected[i]; rj != nil {
			outcomes[i] = "failed"
			r.log.Error("event failed: it breaks its type's rules; it is not retried", "tenant", e.TenantID, "event_id", e.EventID,
				"type", e.Type, "reason", rj.Reason)
			continue
		}
		if err == nil {
			n, d, err = r.fanout(rs, e, dirs[e.TenantID], now)
		}
		if tp, ts := tracing.Header(sctx); tp != "" {
			for j := range d {
				d[j].TraceParent, d[j].TraceState = tp, ts
			}
		}
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("herald.deliveries", len(d)))
		}
		if err != nil {
			if ctx.Err() != nil {
				return 0, false, ctx.Err()
			}
			policy := DefaultEventRetry
			policy.MaxAttempts = r.cfg.MaxAttempts
			retryIn := policy.Next(e.Attempts+1, 0)
			failed, ferr := store.FailEventAttempt(ctx, tx, e.ID, err.Error(), policy.MaxAttempts, retryIn)
			if ferr != nil {
				return 0, false, ferr
			}
			lvl := r.log.Warn
			if failed {
				lvl = r.log.Error
				failedEvents++
				outcomes[i] = "failed"
			} else {
				retried++
				outcomes[i] = "retry"
			}
			lvl("event could not be processed", "tenant", e.TenantID, "event_id", e.EventID, "type", e.Type,
				"attempt", e.Attempts+1, "failed", failed, "error", err)
			continue
		}
		noteParts, delParts = append(noteParts, n), append(delParts, d)
	}
	notes, dels := slices.Concat(noteParts...), slices.Concat(delParts...)
	handoff := r.cfg.Handoff != nil && r.cfg.Handoff.Ready()
	if handoff {
		// Written as PUBLISHED: the publisher's claim leaves them alone,
		// and the handoff row below stands for their messages until the
		// broker confirms them.
		for i := range dels {
			if dels[i].Status == store.StatusPending {
				dels[i].Status = store.StatusPublished
			}
		}
	}
	if err := countThrottled(ctx, tx, dels, now); err != nil {
		return 0, false, err
	}
	if err := openDigests(ctx, tx, rs, dels); err != nil {
		return 0, false, err
	}
	persons, once := splitDeliveries(dels)
	_, written, err := store.InsertFanout(ctx, tx, notes, persons)
	if err != nil {
		return 0, false, err
	}
	onceOut, err := store.InsertDeliveriesOnce(ctx, tx, once)
	if err != nil {
		return 0, false, err
	}
	written = append(written, onceOut...)
	var (
		handed    []store.NewDelivery
		handedIDs []string
		others    int
		handoffID int64
	)
	for _, d := range written {
		if d.Status == store.StatusPublished {
			handedIDs = append(handedIDs, d.ID)
		} else {
			others++
		}
	}
	if others == 0 {
		// Every delivery goes by the handoff (the usual case): no copy.
		handed = written
	} else if len(handedIDs) > 0 {
		handed = make([]store.NewDelivery, 0, len(handedIDs))
		for _, d := range written {
			if d.Status == store.StatusPublished {
				handed = append(handed, d)
			}
		}
	}
	if len(handed) > 0 {
		// The confirmed handoff rows go in the same round trip: no
		// transaction of their own.
		confirmed := r.cfg.Handoff.TakeConfirmed()
		defer func() {
			if !committed {
				r.cfg.Handoff.ReturnConfirmed(confirmed)
			}
		}()
		if handoffID, err = store.InsertHandoffDeleting(ctx, tx, handedIDs, r.cfg.Handoff.Grace(), r.cfg.Handoff.Owner(), confirmed); err != nil {
			return 0, false, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, fmt.Errorf("commit relay batch: %w", err)
	}
	committed = true
	r.oversize(claim.Oversize)
	if r.cfg.Metrics != nil {
		r.cfg.Metrics.RelayBatch(len(events), len(events)-retried-failedEvents-len(rejectedIDs), failedEvents, time.Since(began))
		for _, rj := range rejected {
			if rj != nil {
				r.cfg.Metrics.EventsFailed(rj.Metric, 1)
			}
		}
		deferred, collected, throttled := map[string]int{}, map[string]int{}, map[string]int{}
		for _, d := range written {
			switch {
			case d.Status == store.StatusDeferred:
				deferred[d.Channel]++
			case d.Status == store.StatusWaiting && d.Hold == store.HoldDigest:
				collected[d.Channel]++
				if d.Throttle != nil {
					throttled[d.Channel]++ // over the limit, folded
				}
			case d.Status == store.StatusSkipped && d.Throttle != nil:
				throttled[d.Channel]++
			}
		}
		for ch, n := range deferred {
			r.cfg.Metrics.Delivery(ch, "", metrics.OutcomeDeferred, n)
		}
		for ch, n := range collected {
			r.cfg.Metrics.DigestItems(ch, n)
		}
		for ch, n := range throttled {
			r.cfg.Metrics.Throttled(ch, n)
		}
	}
	if len(handed) > 0 {
		r.cfg.Handoff.Offer(ctx, handoffID, handed)
	}
	if others > 0 {
		r.published()
	}
	return len(events) + len(claim.Oversize), claim.Full, nil
}

// splitDeliveries splits a batch's deliveries into those to persons (on
// their inbox row) and those that hang on no inbox row: the posts to
// places and the unanchored deliveries (NewDelivery.Place, Unanchored),
// which store.InsertDeliveriesOnce writes together. In the usual batch
// every delivery is a person's, and persons is dels itself: no copy.
func splitDeliveries(dels []store.NewDelivery) (persons, once []store.NewDelivery) {
	n := 0
	for i := range dels {
		if dels[i].Place || dels[i].Unanchored {
			n++
		}
	}
	if n == 0 {
		return dels, nil
	}
	persons, once = make([]store.NewDelivery, 0, len(dels)-n), make([]store.NewDelivery, 0, n)
	for _, d := range dels {
		if d.Place || d.Unanchored {
			once = append(once, d)
		} else {
			persons = append(persons, d)
		}
	}
	return persons, once
}

// oversize logs and counts the events a committed claim failed for their
// payload's size.
func (r *Relay) oversize(evs []store.OversizeEvent) {
	for _, o := range evs {
		r.log.Error("event failed: its payload is larger than the event contract allows; it was not loaded",
			"tenant", o.TenantID, "event_id", o.EventID, "type", o.Type, "bytes", o.Bytes, "limit", store.MaxPayloadBytes)
	}
	if len(evs) > 0 && r.cfg.Metrics != nil {
		r.cfg.Metrics.EventsFailed(metrics.ReasonPayloadTooLarge, len(evs))
	}
}

// Rejection is why an event breaks its type's rules.
type Rejection struct {
	// Reason is the event's last_error: the words POST /v1/events answers
	// with for the same event, naming the field.
	Reason string
	// Metric is the reason label of herald_events_failed_total.
	Metric string
}

// Check returns why the relay must fail an event of eventType with payload
// (as stored) at once, or nil: no rule handles the type, the payload is not
// a JSON object, or it does not match the type's JSON Schema. These are the
// checks POST /v1/events makes before it accepts an event, with its words;
// an event that reached the outbox another way (herald_enqueue, sdk/producer,
// the API before a rules change) meets them here.
func Check(rs *rules.RuleSet, eventType string, payload []byte) *Rejection {
	if kind := jsonKind(payload); kind != "object" {
		return &Rejection{Reason: "payload: must be a JSON object, not " + kind, Metric: metrics.ReasonPayloadNotObject}
	}
	err := rs.ValidatePayload(eventType, payload)
	var pe *rules.PayloadError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rules.ErrNoRule):
		return &Rejection{Reason: fmt.Sprintf("type: no rule handles event type %q", eventType), Metric: metrics.ReasonUnknownType}
	case errors.As(err, &pe):
		return &Rejection{Reason: pe.Error(), Metric: metrics.ReasonPayloadSchema}
	}
	return &Rejection{Reason: "payload: " + err.Error(), Metric: metrics.ReasonPayloadSchema}
}

// jsonKind names the kind of the JSON value p starts with, as jsonb_typeof
// does ("nothing" for an empty payload).
func jsonKind(p []byte) string {
	for _, c := range p {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return "object"
		case '[':
			return "array"
		case '"':
			return "string"
		case 't', 'f':
			return "boolean"
		case 'n':
			return "null"
		}
		return "number"
	}
	return "nothing"
}

func toRulesEvent(e store.EventRow) rules.Event {
	return rules.Event{TenantID: e.TenantID, EventID: e.EventID, Type: e.Type, AggregateType: e.AggregateType,
		AggregateID: e.AggregateID, Payload: e.Payload, OccurredAt: e.CreatedAt}
}

// fanout decides and renders one event against its tenant's directory
// snapshot. Its errors are the event's own (rules, templates, data): a
// template that cannot be rendered (a missing key) fails the event when it
// fails alike for every recipient (it reads only .payload, .event and
// .channel) or when it is the inbox's; a channel template that reads the
// recipient and fails for one of them fails only that delivery, written
// FAILED with the reason naming the template field.
func (r *Relay) fanout(rs *rules.RuleSet, e store.EventRow, dir rules.DirectoryIndex, now time.Time) ([]store.NewNotification, []store.NewDelivery, error) {
	ev := toRulesEvent(e)
	dec, err := rs.DecideIndexed(ev, dir, now)
	if err != nil {
		return nil, nil, err
	}
	var notes []store.NewNotification
	var dels []store.NewDelivery
	pe := rules.PrepareEvent(ev)
	var item json.RawMessage // the event as a digest item, made once
	for _, rd := range dec.Recipients {
		inbox, err := rs.RenderPrepared(pe, rd.Recipient, "")
		if err != nil {
			return nil, nil, fmt.Errorf("render inbox for %s: %w", rd.Recipient.UserID, err)
		}
		nid, err := uuid.NewV7()
		if err != nil {
			return nil, nil, err
		}
		note := store.NewNotification{ID: nid.String(), TenantID: e.TenantID, ProjectID: e.ProjectID, EventID: e.EventID, UserID: rd.Recipient.UserID,
			EventType: e.Type, Title: inbox.Title, Body: inbox.Body, Data: inbox.Data, Severity: dec.Severity, CreatedAt: e.CreatedAt}
		if note.Title == "" {
			note.Title = inbox.Subject
		}
		if dec.Shared {
			note.ShareKey = e.EventID
		}
		recipient, err := json.Marshal(PluginRecipient(rd.Recipient))
		if err != nil {
			return nil, nil, err
		}
		// A per_digest inbox: the event writes no inbox row of its own but
		// an item of the recipient's inbox digest window, and its
		// deliveries name no inbox row (a key that could not be rendered
		// keeps the event's own row: nothing is lost).
		perDigest := dec.InboxDigest != nil && dec.InboxDigest.Err == ""
		first := len(dels)
		if perDigest {
			d, err := inboxItem(e, nid.String(), rd, dec, recipient)
			if err != nil {
				return nil, nil, err
			}
			dels = append(dels, d)
		} else {
			notes = append(notes, note)
		}
		for _, cd := range rd.Channels {
			if cd.Digest != nil {
				if item == nil {
					if item, err = json.Marshal(ev); err != nil {
						return nil, nil, err
					}
				}
				dels = append(dels, r.digestItem(rs, e, nid.String(), rd, cd, dec.Severity, recipient, item, now))
				continue
			}
			content, err := rs.RenderPrepared(pe, rd.Recipient, cd.Channel)
			var re *rules.RenderError
			failed := errors.As(err, &re) && !re.RecipientFree
			if err != nil && !failed {
				return nil, nil, fmt.Errorf("render %s for %s: %w", cd.Channel, rd.Recipient.UserID, err)
			}
			body, err := json.Marshal(sdk.Content{Subject: content.Subject, Title: content.Title, Body: content.Body,
				HTML: content.HTML, Data: content.Data})
			if err != nil {
				return nil, nil, err
			}
			bestEffort, maxAttempts := sending(rs, cd.Channel)
			d := store.NewDelivery{NotificationID: nid.String(), TenantID: e.TenantID, EventID: e.EventID, EventType: e.Type,
				UserID: rd.Recipient.UserID, UserType: rd.Recipient.UserType, Channel: cd.Channel, Severity: dec.Severity,
				Status: store.StatusPending, BestEffort: bestEffort, MaxAttempts: maxAttempts, NextAttemptAt: now,
				Recipient: recipient, Content: body}
			if th := cd.Throttle; th != nil && th.Err == "" && !failed {
				d.Throttle = &store.ThrottleItem{TenantID: e.TenantID, UserID: rd.Recipient.UserID, Channel: cd.Channel, EventType: e.Type,
					Key: th.Key, Limit: th.Limit, Per: th.Per}
				d.LastError = th.Reason() // kept only when it goes over
				if th.Folds() {
					if item == nil {
						if item, err = json.Marshal(ev); err != nil {
							return nil, nil, err
						}
					}
					d.Throttle.Fold = item
				}
			}
			switch {
			case cd.Throttle != nil && cd.Throttle.Err != "":
				d.Status, d.LastError, d.Content = store.StatusFailed, cd.Throttle.String(), nil
			case failed:
				// This recipient's own data is missing: only this delivery
				// fails, with the template field and the missing key.
				d.Status, d.LastError, d.Content = store.StatusFailed, re.Error(), nil
			case cd.Escalation != nil:
				// It waits for the in-app notification just written to be
				// read or acted on; released (or cancelled) by the
				// maintenance stage, cancelled at once by the inbox.
				d.Status, d.NextAttemptAt, d.Hold = store.StatusWaiting, cd.Escalation.SendAt, store.HoldEscalation
				d.EscalateUnless = cd.Escalation.Unless
			case cd.Deferred:
				d.Status, d.NextAttemptAt = store.StatusDeferred, cd.DeferUntil
			}
			dels = append(dels, d)
		}
		if perDigest {
			for j := first; j < len(dels); j++ {
				dels[j].Unanchored, dels[j].CreatedAt = true, e.CreatedAt
			}
		}
	}
	for _, p := range dec.Posts {
		d, err := r.post(rs, pe, e, dec.Severity, p, now)
		if err != nil {
			return nil, nil, err
		}
		dels = append(dels, d)
	}
	return notes, dels, nil
}

// post is the delivery of one post to a place: one per event, place and
// channel, whoever else the event reaches. A post that cannot be addressed
// (unknown group, no destination for the channel, a to template that
// failed) or rendered (its template reads a person's field) is written
// FAILED with the reason; the event's other deliveries go on.
func (r *Relay) post(rs *rules.RuleSet, pe *rules.PreparedEvent, e store.EventRow, severity string, p rules.PostDecision, now time.Time) (store.NewDelivery, error) {
	// A post has no inbox row: its notification id names the post alone.
	pid, err := uuid.NewV7()
	if err != nil {
		return store.NewDelivery{}, err
	}
	bestEffort, maxAttempts := sending(rs, p.Channel)
	d := store.NewDelivery{NotificationID: pid.String(), TenantID: e.TenantID, EventID: e.EventID, EventType: e.Type,
		UserID: p.To, Channel: p.Channel, Severity: severity, Status: store.StatusPending, BestEffort: bestEffort,
		MaxAttempts: maxAttempts, NextAttemptAt: now, CreatedAt: e.CreatedAt, Place: true}
	if p.Error != "" {
		d.Status, d.LastError = store.StatusFailed, "post to a place: "+p.Error
		return d, nil
	}
	place := rs.PlaceRecipient(p.To)
	rec := sdk.Recipient{UserID: place.UserID, Locale: place.Locale, TimeZone: place.TimeZone,
		Attributes: map[string]string{sdk.AttrPlace: p.To, sdk.AttrDestination: p.Address}}
	if d.Recipient, err = json.Marshal(rec); err != nil {
		return d, err
	}
	content, err := rs.RenderPrepared(pe, place, p.Channel)
	var re *rules.RenderError
	if errors.As(err, &re) {
		d.Status, d.LastError, d.Recipient = store.StatusFailed, "post to "+p.To+": "+re.Error(), nil
		return d, nil
	}
	if err != nil {
		return d, fmt.Errorf("render %s for place %s: %w", p.Channel, p.To, err)
	}
	d.Content, err = json.Marshal(sdk.Content{Subject: content.Subject, Title: content.Title, Body: content.Body,
		HTML: content.HTML, Data: content.Data})
	return d, err
}

// sending is how a delivery on channel ch goes out: whether it is best
// effort, and how many attempts it may take (the channel's retry policy;
// the class in force already made a best-effort channel's a single try,
// channel.Config.Resolve).
func sending(rs *rules.RuleSet, ch string) (bestEffort bool, maxAttempts int) {
	cc, _ := rs.Channel(ch)
	maxAttempts = cc.Retry.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = channel.DefaultRetry.MaxAttempts
	}
	return cc.Resolved.BestEffort, maxAttempts
}

// digestItem is the delivery of a channel collected into a digest: WAITING
// in its window (OpenDigestWindows assigns it before the batch is written)
// with the event as its content, or FAILED alone when its digest key could
// not be rendered.
func (r *Relay) digestItem(rs *rules.RuleSet, e store.EventRow, nid string, rd rules.RecipientDecision, cd rules.ChannelDecision,
	severity string, recipient, item json.RawMessage, now time.Time) store.NewDelivery {
	bestEffort, maxAttempts := sending(rs, cd.Channel)
	d := store.NewDelivery{NotificationID: nid, TenantID: e.TenantID, EventID: e.EventID, EventType: e.Type,
		UserID: rd.Recipient.UserID, UserType: rd.Recipient.UserType, Channel: cd.Channel, Severity: severity,
		Status: store.StatusWaiting, Hold: store.HoldDigest, BestEffort: bestEffort, MaxAttempts: maxAttempts,
		NextAttemptAt: now, Recipient: recipient, Content: item, DigestKey: cd.Digest.Key}
	if cd.Digest.ClosesAt != nil {
		d.NextAttemptAt = *cd.Digest.ClosesAt // a scheduled close; openDigests reads it
	}
	if cd.Digest.Err != "" {
		d.Status, d.Hold, d.Content, d.LastError = store.StatusFailed, "", nil, cd.Digest.String()
	}
	return d
}

// inboxDigestItem is the content of an item of a per_digest inbox: the
// event, as a channel's digest item holds it, and its project, which the
// inbox row written at the flush is filed under.
type inboxDigestItem struct {
	rules.Event
	ProjectID string `json:"project_id,omitempty"`
}

// inboxItem is the item a per_digest inbox collects for one recipient of
// e: a delivery WAITING (hold digest) on the pseudo-channel channel.Inbox, in
// the window of the digest key (and the event's project, so that one
// inbox row never mixes projects), with the event as its content. The
// flush writes the window's inbox row from its items; a cancel of the
// event cancels the item as it does a channel's.
func inboxItem(e store.EventRow, nid string, rd rules.RecipientDecision, dec rules.Decision, recipient json.RawMessage) (store.NewDelivery, error) {
	content, err := json.Marshal(inboxDigestItem{Event: toRulesEvent(e), ProjectID: e.ProjectID})
	if err != nil {
		return store.NewDelivery{}, err
	}
	key := dec.InboxDigest.Key
	if e.ProjectID != "" && e.ProjectID != store.DefaultProject {
		key = "project " + e.ProjectID + ": " + key
	}
	d := store.NewDelivery{NotificationID: nid, TenantID: e.TenantID, EventID: e.EventID, EventType: e.Type,
		UserID: rd.Recipient.UserID, UserType: rd.Recipient.UserType, Channel: channel.Inbox, Severity: dec.Severity,
		Status: store.StatusWaiting, Hold: store.HoldDigest, MaxAttempts: 1, Recipient: recipient, Content: content,
		DigestKey: key}
	if rd.InboxDigestClosesAt != nil {
		d.NextAttemptAt = *rd.InboxDigestClosesAt // a scheduled close; openDigests reads it
	}
	return d, nil
}

// countThrottled counts the batch's throttled deliveries against their
// throttles and writes those over the limit SKIPPED (last_error
// "throttled: N per W"), or, when the throttle folds them, WAITING as
// items of a digest that closes when the throttle window ends (last_error
// "throttled: N per W, folded into digest K, sent at T"; openDigests
// gives them their window).
func countThrottled(ctx context.Context, tx pgx.Tx, dels []store.NewDelivery, now time.Time) error {
	var (
		idx   []int
		items []store.ThrottleItem
	)
	for i, d := range dels {
		if d.Throttle != nil {
			idx, items = append(idx, i), append(items, *d.Throttle)
		}
	}
	if len(items) == 0 {
		return nil
	}
	within, err := store.CountThrottled(ctx, tx, items, now)
	if err != nil {
		return err
	}
	for j, i := range idx {
		d := &dels[i]
		switch th := d.Throttle; {
		case within[j]:
			d.LastError = ""
		case th.Fold != nil:
			end := th.WindowEnd(now)
			d.Status, d.Hold, d.Content, d.DigestKey, d.NextAttemptAt = store.StatusWaiting, store.HoldDigest, th.Fold, th.Key, end
			d.LastError += ", sent at " + end.UTC().Format(time.RFC3339)
		default:
			d.Status = store.StatusSkipped
		}
	}
	return nil
}

// openDigests counts the batch's digest items into their windows and
// gives each its window and the time it closes.
func openDigests(ctx context.Context, tx pgx.Tx, rs *rules.RuleSet, dels []store.NewDelivery) error {
	var (
		idx   []int
		items []store.DigestItem
	)
	for i, d := range dels {
		if d.Hold != store.HoldDigest {
			continue
		}
		it := store.DigestItem{TenantID: d.TenantID, UserID: d.UserID, Channel: d.Channel, EventType: d.EventType, Key: d.DigestKey}
		if d.Throttle != nil {
			// Over a throttle's limit: the window closes with the
			// throttle's (countThrottled set when).
			it.ClosesAt, it.MaxItems = d.NextAttemptAt, rules.MaxDigestItems
		} else {
			spec, ok := rs.Digest(d.EventType)
			if !ok {
				return fmt.Errorf("event type %s has no digest", d.EventType)
			}
			it.Window, it.MaxItems = spec.Window, spec.MaxItems
			if spec.Schedule != "" {
				it.ClosesAt = d.NextAttemptAt // the recipient's next occurrence (digestItem)
			}
		}
		idx = append(idx, i)
		items = append(items, it)
	}
	if len(items) == 0 {
		return nil
	}
	ids, closes, err := store.OpenDigestWindows(ctx, tx, items)
	if err != nil {
		return err
	}
	for j, i := range idx {
		dels[i].DigestWindow, dels[i].NextAttemptAt = ids[j], closes[j]
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// PluginRecipient is the recipient as the relay hands it to plugins (in
// every delivery's Recipient).
func PluginRecipient(r directory.Recipient) sdk.Recipient {
	return sdk.Recipient{UserID: r.UserID, UserType: r.UserType, Email: r.Email, Phone: r.Phone,
		Locale: r.Locale, TimeZone: r.TimeZone, Attributes: personAttributes(r.Attributes),
		DeviceTokens: deviceTokens(r), Devices: sdkDevices(r)}
}

// personAttributes is a person's directory attributes without the ones
// whose names start with "herald." (sdk.AttrPlace, sdk.AttrDestination):
// those are the host's, and a directory entry must not pass a person off
// as a place.
func personAttributes(attrs map[string]string) map[string]string {
	for k := range attrs {
		if strings.HasPrefix(k, "herald.") {
			out := make(map[string]string, len(attrs))
			for k, v := range attrs {
				if !strings.HasPrefix(k, "herald.") {
					out[k] = v
				}
			}
			return out
		}
	}
	return attrs
}

// deviceTokens is the recipient's DeviceTokens for plugins built before
// Devices: the tokens of every device that is not a web push subscription.
func deviceTokens(r directory.Recipient) []string {
	toks := append([]string(nil), r.DeviceTokens...)
	for _, d := range r.Devices {
		if d.Kind != directory.DeviceWebPush {
			toks = append(toks, d.Token)
		}
	}
	return toks
}

// sdkDevices is the recipient's devices for plugins: tokens of no declared
// kind first, then the typed devices; a web push subscription's Token is
// its endpoint.
func sdkDevices(r directory.Recipient) []sdk.Device {
	var out []sdk.Device
	for _, t := range r.DeviceTokens {
		out = append(out, sdk.Device{Token: t})
	}
	for _, d := range r.Devices {
		out = append(out, sdk.Device{Kind: d.Kind, Token: d.Address(), Endpoint: d.Endpoint, P256dh: d.P256dh, Auth: d.Auth})
	}
	return out
}
