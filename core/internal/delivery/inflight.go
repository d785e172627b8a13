package delivery

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
)

// inflight keeps one attempt of a delivery from being sent by two
// listeners at the same time. A broker message can be duplicated (the
// publisher's stale reclaim republishes a delivery whose message is still
// queued or being sent; the broker redelivers a message whose consumer
// lost its channel mid-send), and the database guard only keeps the second
// copy from being recorded, not from being sent.
//
// Within the daemon a set of in-flight attempts does it. Across daemons a
// session-level PostgreSQL advisory lock per attempt does, taken on one of
// a few connections the daemon keeps for this alone: advisory locks write
// no WAL, and PostgreSQL drops them when the daemon dies, so the broker's
// redelivery of the dead daemon's messages is sent normally. Taking the
// locks of a message and checking in the database that its attempts are
// still due is one round trip; dropping the locks of recorded attempts is
// batched. If a connection fails, the guard degrades to the local set for
// that message (the record stays exactly-once either way) and reconnects
// on the next one.
type inflight struct {
	connConfig *pgx.ConnConfig
	log        hclog.Logger

	mu sync.Mutex
	// local maps each attempt held in this daemon to the guard connection
	// whose session holds its lock (-1: none, this daemon only).
	local map[string]int

	conns  [guardConns]guardConn
	next   atomic.Uint32
	closed atomic.Bool // after close, no new session is opened

	laterMu  sync.Mutex
	later    []string // recorded attempts whose locks the next flush drops
	flushing bool     // a flush is scheduled
}

// guardConn is one lock session.
type guardConn struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

// guardConns is how many lock sessions a daemon keeps: one serialised
// every listener of the daemon behind it.
const guardConns = 4

// releaseDelay is how long releaseLater gathers keys before dropping them
// with one statement per session; releaseBatch drops them at once when
// that many wait.
const (
	releaseDelay = 20 * time.Millisecond
	releaseBatch = 2000
)

func newInflight(cfg *pgx.ConnConfig, log hclog.Logger) *inflight {
	return &inflight{connConfig: cfg, log: log, local: map[string]int{}}
}

// errGuardClosed is withConn's answer after close: the sessions and their
// locks are gone.
var errGuardClosed = errors.New("in-flight guard closed")

// attemptKey names one attempt of one delivery.
// (an erase takes the same keys: store.AttemptLockKey).
func attemptKey(id string, attempt int) string { return store.AttemptLockKey(id, attempt) }

// lockSeed keeps Herald's advisory-lock keys apart from other users of the
// same database.
const lockSeed = store.AttemptLockSeed

// take returns the keys this caller now holds (a key held by another
// listener, here or in another daemon, is left out) and, when refs (the
// attempts the keys name, in the same order) are given, also checks in the
// database which of them are still due, after the locks are taken, in the
// same round trip. checked is false when the check could not run: the caller checks
// itself.
func (f *inflight) take(ctx context.Context, keys []string, refs []store.Ref) (held []string, due map[string]bool, checked bool) {
	f.mu.Lock()
	mine := make([]string, 0, len(keys))
	var mineRefs []store.Ref
	for i, k := range keys {
		if _, busy := f.local[k]; !busy {
			f.local[k] = -1
			mine = append(mine, k)
			if refs != nil {
				mineRefs = append(mineRefs, refs[i])
			}
		}
	}
	f.mu.Unlock()
	if len(mine) == 0 {
		return nil, map[string]bool{}, refs != nil
	}
	ci := int(f.next.Add(1) % guardConns)
	var got []string
	err := f.withConn(ctx, ci, func(c *pgx.Conn) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT k FROM unnest($1::text[]) AS k WHERE pg_try_advisory_lock(hashtextextended(k, $2))`, mine, lockSeed)
		if refs != nil {
			// The batch is one implicit transaction, but each statement
			// reads with a snapshot of its own: the check sees every
			// record made before the locks were taken.
			sql, args := store.SendableQuery(mineRefs)
			b.Queue(sql, args...)
		}
		br := c.SendBatch(ctx, b)
		rows, err := br.Query()
		if err == nil {
			got, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err == nil && refs != nil {
			if rows, err = br.Query(); err == nil {
				due, err = store.ReadSendable(rows)
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return err
	})
	if err != nil {
		f.log.Warn("in-flight lock unavailable; guarding this daemon only", "error", err)
		return mine, nil, false
	}
	gotSet := make(map[string]bool, len(got))
	for _, k := range got {
		gotSet[k] = true
	}
	f.mu.Lock()
	for _, k := range mine {
		if gotSet[k] {
			f.local[k] = ci
		} else {
			delete(f.local, k)
		}
	}
	f.mu.Unlock()
	return got, due, refs != nil
}

// release drops keys taken by take, once their outcome is recorded (or
// their message is given back to the broker).
func (f *inflight) release(ctx context.Context, keys []string) {
	if len(keys) == 0 {
		return
	}
	bySession := map[int][]string{}
	f.mu.Lock()
	for _, k := range keys {
		if ci, ok := f.local[k]; ok && ci >= 0 {
			bySession[ci] = append(bySession[ci], k)
		}
	}
	f.mu.Unlock()
	for ci, ks := range bySession {
		err := f.withConn(ctx, ci, func(c *pgx.Conn) error {
			_, err := c.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended(k, $2)) FROM unnest($1::text[]) AS k`, ks, lockSeed)
			return err
		})
		if err != nil && !errors.Is(err, errGuardClosed) {
			// The session is gone, and its locks with it.
			f.log.Warn("in-flight unlock failed", "error", err)
		}
	}
	f.mu.Lock()
	for _, k := range keys {
		delete(f.local, k)
	}
	f.mu.Unlock()
}

// releaseLater drops keys whose attempts are recorded, gathered with
// others into one statement per session. Until then they stay held here
// and in PostgreSQL, which costs nothing: a copy of a recorded attempt is
// skipped by the database check anyway.
func (f *inflight) releaseLater(keys []string) {
	if len(keys) == 0 {
		return
	}
	f.laterMu.Lock()
	f.later = append(f.later, keys...)
	now := len(f.later) >= releaseBatch
	schedule := !now && !f.flushing
	if schedule {
		f.flushing = true
	}
	f.laterMu.Unlock()
	switch {
	case now:
		f.flushLater(context.Background())
	case schedule:
		time.AfterFunc(releaseDelay, func() { f.flushLater(context.Background()) })
	}
}

// flushLater drops every key releaseLater gathered.
func (f *inflight) flushLater(ctx context.Context) {
	f.laterMu.Lock()
	keys := f.later
	f.later, f.flushing = nil, false
	f.laterMu.Unlock()
	f.release(ctx, keys)
}

// withConn runs fn on lock session ci, (re)connecting as needed. A
// connection that fails is closed: its session, and every lock it held,
// ends with it.
func (f *inflight) withConn(ctx context.Context, ci int, fn func(*pgx.Conn) error) error {
	g := &f.conns[ci]
	g.mu.Lock()
	defer g.mu.Unlock()
	if f.closed.Load() {
		return errGuardClosed
	}
	if g.conn == nil || g.conn.IsClosed() {
		c, err := pgx.ConnectConfig(ctx, f.connConfig.Copy())
		if err != nil {
			return err
		}
		g.conn = c
	}
	if err := fn(g.conn); err != nil {
		_ = g.conn.Close(context.WithoutCancel(ctx))
		g.conn = nil
		return err
	}
	return nil
}

// close drops what waits for release and ends the lock sessions.
func (f *inflight) close(ctx context.Context) {
	f.flushLater(ctx)
	f.closed.Store(true)
	for i := range f.conns {
		g := &f.conns[i]
		g.mu.Lock()
		if g.conn != nil {
			_ = g.conn.Close(ctx)
			g.conn = nil
		}
		g.mu.Unlock()
	}
}
