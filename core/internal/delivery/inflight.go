package delivery

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
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
// session-level PostgreSQL advisory lock per attempt does, taken on one
// connection the daemon keeps for this alone: advisory locks write no WAL,
// cost one round trip per message to take and one to drop, and PostgreSQL
// drops them when the daemon dies, so the broker's redelivery of the dead
// daemon's messages is sent normally. If that connection fails, the guard
// degrades to the local set (the record stays exactly-once either way) and
// reconnects on the next message.
type inflight struct {
	connConfig *pgx.ConnConfig
	log        hclog.Logger

	mu    sync.Mutex
	local map[string]bool

	connMu sync.Mutex
	conn   *pgx.Conn
	closed bool // after close, no new session is opened

	laterMu  sync.Mutex
	later    []string // recorded attempts whose locks the next flush drops
	flushing bool     // a flush is scheduled
}

// releaseDelay is how long releaseLater gathers keys before dropping them
// with one statement; releaseBatch drops them at once when that many wait.
const (
	releaseDelay = 20 * time.Millisecond
	releaseBatch = 2000
)

func newInflight(cfg *pgx.ConnConfig, log hclog.Logger) *inflight {
	return &inflight{connConfig: cfg, log: log, local: map[string]bool{}}
}

// errGuardClosed is withConn's answer after close: the session and its
// locks are gone.
var errGuardClosed = errors.New("in-flight guard closed")

// attemptKey names one attempt of one delivery.
func attemptKey(id string, attempt int) string { return id + "/" + strconv.Itoa(attempt) }

// lockSeed keeps Herald's advisory-lock keys apart from other users of the
// same database.
const lockSeed = 0x6865726c64 // "herld"

// acquire returns the keys this caller now holds; a key held by another
// listener (here or in another daemon) is left out.
func (f *inflight) acquire(ctx context.Context, keys []string) []string {
	f.mu.Lock()
	mine := make([]string, 0, len(keys))
	for _, k := range keys {
		if !f.local[k] {
			f.local[k] = true
			mine = append(mine, k)
		}
	}
	f.mu.Unlock()
	if len(mine) == 0 {
		return nil
	}
	var got []string
	err := f.withConn(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `SELECT k FROM unnest($1::text[]) AS k
			WHERE pg_try_advisory_lock(hashtextextended(k, $2))`, mine, lockSeed)
		if err != nil {
			return err
		}
		got, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		f.log.Warn("in-flight lock unavailable; guarding this daemon only", "error", err)
		return mine
	}
	if len(got) < len(mine) {
		held := map[string]bool{}
		for _, k := range got {
			held[k] = true
		}
		f.mu.Lock()
		for _, k := range mine {
			if !held[k] {
				delete(f.local, k)
			}
		}
		f.mu.Unlock()
	}
	return got
}

// release drops keys taken by acquire, once their outcome is recorded (or
// their message is given back to the broker).
func (f *inflight) release(ctx context.Context, keys []string) {
	if len(keys) == 0 {
		return
	}
	err := f.withConn(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended(k, $2)) FROM unnest($1::text[]) AS k`, keys, lockSeed)
		return err
	})
	if err != nil && !errors.Is(err, errGuardClosed) {
		// The connection is gone, and its locks with it.
		f.log.Warn("in-flight unlock failed", "error", err)
	}
	f.mu.Lock()
	for _, k := range keys {
		delete(f.local, k)
	}
	f.mu.Unlock()
}

// releaseLater drops keys whose attempts are recorded, gathered with
// others into one statement. Until then they stay held here and in
// PostgreSQL, which costs nothing: a copy of a recorded attempt is skipped
// by the database guard anyway.
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

// withConn runs fn on the lock connection, (re)connecting as needed. A
// connection that fails is closed: its session, and every lock it held,
// ends with it.
func (f *inflight) withConn(ctx context.Context, fn func(*pgx.Conn) error) error {
	f.connMu.Lock()
	defer f.connMu.Unlock()
	if f.closed {
		return errGuardClosed
	}
	if f.conn == nil || f.conn.IsClosed() {
		c, err := pgx.ConnectConfig(ctx, f.connConfig.Copy())
		if err != nil {
			return err
		}
		f.conn = c
	}
	if err := fn(f.conn); err != nil {
		_ = f.conn.Close(context.WithoutCancel(ctx))
		f.conn = nil
		return err
	}
	return nil
}

// close drops what waits for release and ends the lock session.
func (f *inflight) close(ctx context.Context) {
	f.flushLater(ctx)
	f.connMu.Lock()
	defer f.connMu.Unlock()
	f.closed = true
	if f.conn != nil {
		_ = f.conn.Close(ctx)
		f.conn = nil
	}
}
