package maintenance

import (
	"context"

	"github.com/heraldhq/herald/core/internal/store"
)

// releaseDeferred moves DEFERRED deliveries whose quiet hours ended to
// PENDING.
func (m *Maintenance) releaseDeferred(ctx context.Context) {
	if _, err := store.ReleaseDeferred(ctx, m.db); err != nil && ctx.Err() == nil {
		m.log.Warn("release deferred", "error", err)
	}
}
