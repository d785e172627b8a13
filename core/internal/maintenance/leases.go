package maintenance

import (
	"context"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/store"
)

// LostAttempts is the retry policy of attempts lost mid-send, whose
// SENDING lease ran out because the daemon or the plugin died: the
// delivery goes back to RETRY at once (Initial 0), and the lost attempt
// does not spend one of its own tries; after MaxAttempts lost attempts it
// is FAILED. Every lost attempt waits policy.Next(1, 0): the SQL moves all
// expired rows in one statement.
var LostAttempts = channel.RetryPolicy{MaxAttempts: 3}

// expireLeases moves the deliveries whose lease ran out back to RETRY.
func (m *Maintenance) expireLeases(ctx context.Context) {
	lost, err := store.ExpireLeases(ctx, m.db, LostAttempts.MaxAttempts, LostAttempts.Next(1, 0))
	if err != nil && ctx.Err() == nil {
		m.log.Warn("expire leases", "error", err)
	}
	if lost > 0 {
		m.log.Warn("attempts lost mid-send moved to RETRY", "count", lost)
	}
}
