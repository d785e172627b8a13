package store

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Listen calls wake once it listens on the PostgreSQL notification channel
// and again for every notification, until ctx ends. A lost connection is
// re-established after a second; meanwhile callers rely on their polling.
func Listen(ctx context.Context, pool *pgxpool.Pool, channel string, log hclog.Logger, wake func()) {
	for ctx.Err() == nil {
		err := func() error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
				return err
			}
			// A connection going back to the pool must not keep listening.
			defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "UNLISTEN "+channel) }()
			wake()
			for {
				if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
					return err
				}
				wake()
			}
		}()
		if ctx.Err() != nil {
			return
		}
		log.Warn("listen for notifications failed; polling until it is back", "channel", channel, "error", err)
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}
