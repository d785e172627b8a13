// Package digest flushes digest windows (and sweeps the throttle counters
// of ended windows): a supervised stage of herald serve
// that, once a window is due (its time is up or it holds max_items items),
// renders one message from the items still waiting in it and writes it as
// one delivery, in the transaction that marks the items DIGESTED
// (store.FlushDigests). Several daemons flush side by side: each window is
// claimed by one.
package digest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/config/field"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/metrics"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/sdk"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config tunes the digest flusher of `herald serve`.
type Config struct {
	// Workers is how many flush loops run side by side in one daemon: the
	// first flushes whenever a window falls due, the others join while
	// claims come back full (a wave of windows falling due together, such
	// as every recipient's window opened by one burst of events). Windows
	// are claimed FOR UPDATE SKIP LOCKED, so workers (and daemons) never
	// flush one window twice.
	Workers int `koanf:"workers"`
	// BatchSize is how many due windows one flush transaction claims; its
	// digests are handed to the publisher as it commits.
	BatchSize int `koanf:"batch_size"`
	// PollInterval is the longest the flusher sleeps between looks for due
	// windows (it sleeps until the next window falls due when that is
	// sooner; a window that fills up wakes it at once).
	PollInterval time.Duration `koanf:"poll_interval"`
	// Metrics records the flushed windows and their lag (nil: none).
	Metrics *metrics.Metrics
}

// DefaultConfig returns the flusher's default settings.
func DefaultConfig() Config {
	return Config{Workers: 2, BatchSize: 500, PollInterval: time.Second}
}

// MaxBatchSize bounds Config.BatchSize: a window holds up to the rules'
// largest max_items, and one transaction loads every item of its windows.
const MaxBatchSize = 5000

// Validate checks the settings; it returns field.Errors naming the keys.
func (c Config) Validate() error {
	var errs field.Errors
	errs.Positive("workers", c.Workers)
	if c.Workers > 64 {
		errs.Add("workers", "must be at most 64, got %d", c.Workers)
	}
	errs.Positive("batch_size", c.BatchSize)
	if c.BatchSize > MaxBatchSize {
		errs.Add("batch_size", "must be at most %d, got %d", MaxBatchSize, c.BatchSize)
	}
	errs.PositiveDuration("poll_interval", c.PollInterval)
	return errs.Err()
}

// setDefaults gives every setting left zero its default.
func (c *Config) setDefaults() {
	d := DefaultConfig()
	if c.Workers <= 0 {
		c.Workers = d.Workers
	}
	if c.BatchSize <= 0 {
		c.BatchSize = d.BatchSize
	}
	if c.PollInterval <= 0 {
		c.PollInterval = d.PollInterval
	}
}

// Flusher flushes due digest windows.
type Flusher struct {
	pool  *pgxpool.Pool
	rules func() *rules.RuleSet
	log   hclog.Logger
	cfg   Config
	// sent is called after each flush transaction that wrote digest
	// deliveries (the publisher's kick), so that they go out while later
	// windows are still flushing.
	sent func()
	// Notifier, when set, carries the inbox rows of per_digest windows to
	// their users' open sessions once the flush committed (live.Server).
	Notifier Notifier
	kick     chan struct{}
	// surge wakes the workers after the first: a claim came back full.
	surge chan struct{}
}

// Notifier carries a frame to a user's live sessions (live.Server).
type Notifier interface {
	Notify(ctx context.Context, tenant, user string, frame []byte)
}

// Frame is what a user's live sessions receive when a per_digest window
// wrote their inbox row: a "notification" frame, as the WEBSOCKET channel
// sends one, with Digest set.
type Frame struct {
	Type           string          `json:"type"`
	NotificationID string          `json:"notification_id"`
	EventType      string          `json:"event_type"`
	Title          string          `json:"title,omitempty"`
	Body           string          `json:"body,omitempty"`
	Data           json.RawMessage `json:"data,omitempty"`
	Severity       string          `json:"severity,omitempty"`
	// Digest marks the row of a per_digest inbox.
	Digest bool `json:"digest"`
}

// New returns a flusher rendering with the current rules and calling sent
// after each flush that wrote deliveries; settings left zero in cfg take
// their defaults.
func New(pool *pgxpool.Pool, ruleset func() *rules.RuleSet, sent func(), log hclog.Logger, cfg Config) *Flusher {
	if sent == nil {
		sent = func() {}
	}
	cfg.setDefaults()
	return &Flusher{pool: pool, rules: ruleset, log: log.Named("digest"), cfg: cfg, sent: sent,
		kick: make(chan struct{}, 1), surge: make(chan struct{}, cfg.Workers)}
}

// Kick wakes the flusher (a window may have filled up).
func (f *Flusher) Kick() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Run flushes until ctx ends with Config.Workers workers: the first
// sleeps until the next window is due (at most PollInterval), the others
// join while claims come back full. A failed flush is logged and tried
// again.
func (f *Flusher) Run(ctx context.Context) error {
	done := make(chan struct{})
	for i := range f.cfg.Workers {
		go func() {
			defer func() { done <- struct{}{} }()
			if i == 0 {
				f.loop(ctx)
			} else {
				f.surgeLoop(ctx)
			}
		}()
	}
	for range f.cfg.Workers {
		<-done
	}
	return nil
}

func (f *Flusher) loop(ctx context.Context) {
	var swept time.Time
	for ctx.Err() == nil {
		if time.Since(swept) > time.Minute {
			// Throttle counters of windows that ended are no longer read.
			if _, err := store.SweepThrottleCounters(ctx, f.pool); err != nil && ctx.Err() == nil {
				f.log.Warn("sweep throttle counters", "error", err)
			}
			swept = time.Now()
		}
		res, err := f.FlushOnce(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			f.log.Warn("digest flush failed; it will be retried", "error", err)
			sleep(ctx, f.cfg.PollInterval, f.kick)
			continue
		}
		if res.Windows >= f.cfg.BatchSize {
			f.signalSurge()
			continue
		}
		wait := f.cfg.PollInterval
		var next time.Time
		if err := f.pool.QueryRow(ctx, `SELECT coalesce(min(closes_at), 'infinity') FROM digest_windows`).Scan(&next); err == nil {
			if d := time.Until(next); d < wait {
				wait = max(d, 10*time.Millisecond)
			}
		}
		sleep(ctx, wait, f.kick)
	}
}

// signalSurge wakes the idle extra workers.
func (f *Flusher) signalSurge() {
	for range f.cfg.Workers - 1 {
		select {
		case f.surge <- struct{}{}:
		default:
			return
		}
	}
}

// surgeLoop is a worker after the first: it flushes while claims come
// back full (a backlog of due windows), and otherwise waits for the next
// surge. When windows fall due one at a time, one worker flushes each as
// it comes: more would only race for it.
func (f *Flusher) surgeLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.surge:
		}
		for ctx.Err() == nil {
			res, err := f.FlushOnce(ctx)
			if err != nil {
				if ctx.Err() == nil {
					f.log.Warn("digest flush failed; it will be retried", "error", err)
					sleep(ctx, f.cfg.PollInterval, f.kick)
				}
				break
			}
			if res.Windows < f.cfg.BatchSize {
				break
			}
		}
	}
}

// Drain flushes with Config.Workers workers side by side until none finds
// a due window, and returns how many windows they flushed: what Run does
// to a backlog, for tests and benchmarks.
func (f *Flusher) Drain(ctx context.Context) (int, error) {
	type result struct {
		n   int
		err error
	}
	out := make(chan result, f.cfg.Workers)
	for range f.cfg.Workers {
		go func() {
			var r result
			for {
				res, err := f.FlushOnce(ctx)
				r.n += res.Windows
				if err != nil || res.Windows == 0 {
					r.err = err
					out <- r
					return
				}
			}
		}()
	}
	var n int
	var errs []error
	for range f.cfg.Workers {
		r := <-out
		n += r.n
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	return n, errors.Join(errs...)
}

// FlushOnce flushes one batch of due windows.
func (f *Flusher) FlushOnce(ctx context.Context) (store.FlushResult, error) {
	rs := f.rules()
	if rs == nil {
		return store.FlushResult{}, errors.New("no rules loaded")
	}
	res, err := store.FlushDigests(ctx, f.pool, f.cfg.BatchSize, func(w store.DueWindow, items []store.WaitingItem) store.NewDelivery {
		return Build(rs, w, items)
	})
	if err != nil {
		return res, err
	}
	done := time.Now()
	for _, w := range res.Flushed {
		outcome := metrics.OutcomeEmpty
		switch w.Status {
		case store.StatusPending:
			outcome = metrics.OutcomeSent
		case store.StatusFailed:
			outcome = metrics.OutcomeFailed
		}
		f.cfg.Metrics.DigestFlushed(w.Channel, outcome, done.Sub(w.ClosesAt))
	}
	if f.Notifier != nil && len(res.Inbox) > 0 {
		go f.announce(context.WithoutCancel(ctx), res.Inbox)
	}
	if res.Digests > 0 {
		f.log.Debug("digests flushed", "windows", res.Windows, "digests", res.Digests, "items", res.Items)
		f.sent()
	}
	return res, nil
}

// announce tells each user's live sessions about their new digest inbox
// row (best effort, after the commit: the row is in the inbox either way).
func (f *Flusher) announce(ctx context.Context, rows []store.DigestInboxRow) {
	for _, r := range rows {
		b, err := json.Marshal(Frame{Type: "notification", NotificationID: r.NotificationID, EventType: r.EventType, Title: r.Title,
			Body: r.Body, Data: r.Data, Severity: r.Severity, Digest: true})
		if err != nil {
			continue
		}
		f.Notifier.Notify(ctx, r.TenantID, r.UserID, b)
	}
}

// Build renders the digest delivery of window w from its items with rs:
// PENDING with the rendered content, or FAILED naming why it cannot be
// rendered (the rule or its template is gone or broken), so that a bad
// window never holds up the others. A per_digest inbox window
// (channel.Inbox) renders the inbox template; when that fails its row
// still gets a plain content (the event type, the count of items), since
// an inbox row cannot be FAILED and no item may be lost.
func Build(rs *rules.RuleSet, w store.DueWindow, items []store.WaitingItem) store.NewDelivery {
	content, err := render(rs, w, items)
	if err != nil {
		d := store.NewDelivery{Status: store.StatusFailed, LastError: fmt.Sprintf("digest %s: %v", w.Key, err)}
		if w.Channel == channel.Inbox {
			d.Content = plainInbox(w, items)
		}
		return d
	}
	return store.NewDelivery{Status: store.StatusPending, Content: content}
}

// plainInbox is the content of a digest inbox row whose template cannot
// be rendered: the event type, how many events, and their ids as data.
func plainInbox(w store.DueWindow, items []store.WaitingItem) json.RawMessage {
	var data rules.DigestData
	data.Digest.Count = len(items)
	for _, it := range items {
		data.Digest.EventIDs = append(data.Digest.EventIDs, it.EventID)
	}
	d, _ := json.Marshal(data)
	b, _ := json.Marshal(sdk.Content{Title: w.EventType, Body: fmt.Sprintf("%d new %s", len(items), w.EventType), Data: d})
	return b
}

func render(rs *rules.RuleSet, w store.DueWindow, items []store.WaitingItem) (json.RawMessage, error) {
	evs := make([]rules.Event, len(items))
	for i, it := range items {
		if err := json.Unmarshal(it.Content, &evs[i]); err != nil {
			return nil, fmt.Errorf("item %s: %w", it.DeliveryID, err)
		}
	}
	var r sdk.Recipient
	if err := json.Unmarshal(items[len(items)-1].Recipient, &r); err != nil {
		return nil, fmt.Errorf("recipient: %w", err)
	}
	rec := directory.Recipient{UserID: r.UserID, UserType: r.UserType, Email: r.Email, Phone: r.Phone, Locale: r.Locale,
		TimeZone: r.TimeZone, Attributes: r.Attributes, Active: true}
	ch := w.Channel
	if ch == channel.Inbox {
		ch = "" // the inbox template
	}
	out, err := rs.RenderDigest(evs, rec, ch)
	if err != nil {
		return nil, err
	}
	return json.Marshal(sdk.Content{Subject: out.Subject, Title: out.Title, Body: out.Body, HTML: out.HTML, Data: out.Data})
}

func sleep(ctx context.Context, d time.Duration, kick <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-kick:
	case <-t.C:
	}
}
