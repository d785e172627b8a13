package delivery

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
)

// Liveness is a daemon's presence in PostgreSQL: a session-level advisory
// lock (store.LivenessLockClass, id) held on a connection of its own for
// as long as the daemon runs. The relay's handoff rows carry the id as
// their owner, and a publisher takes over the handoffs of an owner whose
// lock is free (store.ClaimHandoffs) at once, instead of after the grace
// period. PostgreSQL drops the lock when the session ends: for a killed
// daemon that is when the kernel closes its socket; for one cut off by
// the network, when the server's TCP keepalives give up (livenessKeepalive:
// about 8 s). A daemon that lives, however slow, keeps its lock, and its
// handoffs are left to it until their grace period.
//
// If the session is lost while the daemon lives (a database restart), Run
// takes the lock again on a new one; meanwhile other daemons may take its
// handoffs over and publish their deliveries a second time, which the
// listeners' attempt check makes harmless. When the lock is not held again
// within LostTimeout, Run fails with ErrLivenessLost: a daemon whose every
// handoff is anyone's is limping, and its supervisor stops it.
type Liveness struct {
	// LostTimeout is how long Run keeps trying to take a lost lock again
	// before it returns ErrLivenessLost (0: for as long as it runs). Set it
	// before Run.
	LostTimeout time.Duration

	cfg *pgx.ConnConfig
	log hclog.Logger
	id  atomic.Int32

	mu   sync.Mutex
	conn *pgx.Conn
}

// livenessKeepalive are the server-side TCP keepalive settings of the
// liveness session: a daemon the network cut off loses its lock after
// about idle + interval × count seconds.
var livenessKeepalive = map[string]string{
	"tcp_keepalives_idle":     "5",
	"tcp_keepalives_interval": "1",
	"tcp_keepalives_count":    "3",
}

// ErrLivenessLost is Run's failure when the liveness lock was lost and not
// taken again within LostTimeout; it prompts the daemon to stop.
var ErrLivenessLost = errors.New("liveness lock lost and not taken again")

// livenessPing is how often Run checks the session.
const livenessPing = time.Second

// NewLiveness connects a session for cfg's database and takes a liveness
// lock on a free random id.
func NewLiveness(ctx context.Context, cfg *pgx.ConnConfig, log hclog.Logger) (*Liveness, error) {
	l := &Liveness{cfg: cfg.Copy(), log: log.Named("liveness")}
	if l.cfg.RuntimeParams == nil {
		l.cfg.RuntimeParams = map[string]string{}
	}
	for k, v := range livenessKeepalive {
		l.cfg.RuntimeParams[k] = v
	}
	l.cfg.RuntimeParams["application_name"] = "herald liveness"
	if err := l.acquire(ctx, 0); err != nil {
		return nil, err
	}
	l.log.Debug("liveness lock held", "id", l.ID())
	return l, nil
}

// ID is the daemon's id, the owner its handoff rows carry.
func (l *Liveness) ID() int32 {
	if l == nil {
		return 0
	}
	return l.id.Load()
}

// acquire connects a session and takes the lock on id, or on a new random
// id when id is 0 or taken. l.mu must not be held.
func (l *Liveness) acquire(ctx context.Context, id int32) error {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return fmt.Errorf("liveness: connect: %w", err)
	}
	for range 16 {
		if id == 0 {
			id = rand.Int32N(1<<31-1) + 1
		}
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, store.LivenessLockClass, id).Scan(&ok); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return fmt.Errorf("liveness: lock: %w", err)
		}
		if ok {
			l.mu.Lock()
			old := l.conn
			l.conn = conn
			l.mu.Unlock()
			if old != nil {
				_ = old.Close(context.WithoutCancel(ctx))
			}
			l.id.Store(id)
			return nil
		}
		id = 0 // another daemon holds it: draw again
	}
	_ = conn.Close(context.WithoutCancel(ctx))
	return errors.New("liveness: no free id after 16 draws")
}

// Run checks the session every second until ctx ends and takes the lock
// again on a new session when it was lost. It keeps the session open when
// it returns: Close drops it once every stage has stopped. It returns
// ErrLivenessLost (wrapped with the last error) when the lock stayed lost
// for LostTimeout.
func (l *Liveness) Run(ctx context.Context) error {
	t := time.NewTicker(livenessPing)
	defer t.Stop()
	var lostAt time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		l.mu.Lock()
		conn := l.conn
		l.mu.Unlock()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := errors.New("no session")
		if conn != nil {
			err = conn.Ping(pctx)
		}
		cancel()
		if err == nil || ctx.Err() != nil {
			continue
		}
		if lostAt.IsZero() {
			lostAt = time.Now()
			l.log.Warn("liveness session lost; other daemons may take this daemon's handoffs over until it is back", "id", l.ID(), "error", err)
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = l.acquire(actx, l.ID())
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if lost := time.Since(lostAt); l.LostTimeout > 0 && lost >= l.LostTimeout {
				return fmt.Errorf("%w for %s (supervisor.liveness_timeout %s): %w", ErrLivenessLost, lost.Round(time.Second), l.LostTimeout, err)
			}
			l.log.Warn("liveness lock not taken again; retrying", "error", err)
			continue
		}
		lostAt = time.Time{}
		l.log.Info("liveness lock held again", "id", l.ID())
	}
}

// Close ends the session: the daemon's remaining handoffs (none after an
// orderly stop) become anyone's at once.
func (l *Liveness) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.conn.Close(ctx)
		l.conn = nil
	}
}
