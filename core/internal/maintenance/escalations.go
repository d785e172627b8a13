package maintenance

import (
	"context"

	"github.com/heraldhq/herald/core/internal/store"
)

// escalationBatch is how many due escalations one statement releases; a
// round goes on while statements come back full.
const escalationBatch = 500

// releaseEscalations settles the due escalations (WAITING, hold
// 'escalation'): each whose in-app notification was read or acted on (as
// its escalate_unless says) is CANCELLED with the reason, every other goes
// to PENDING and is published like any delivery. Quiet hours were judged
// for the due time when the relay wrote the row (its next_attempt_at is
// already the end of the window when the channel defers), so nothing is
// decided here but read or not.
func (m *Maintenance) releaseEscalations(ctx context.Context) {
	for ctx.Err() == nil {
		r, err := store.ReleaseEscalations(ctx, m.db, escalationBatch)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("release escalations", "error", err)
			}
			return
		}
		if r.Pending+r.Cancelled > 0 {
			m.log.Debug("escalations released", "sent", r.Pending, "cancelled", r.Cancelled)
		}
		if r.Pending+r.Cancelled < escalationBatch {
			return
		}
	}
}
