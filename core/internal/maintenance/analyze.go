package maintenance

import (
	"context"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
)

// AnalyzeEvery is how often the stage refreshes stale planner statistics
// (store.AnalyzeStale): the deliveries tables grow and shrink fast, and a
// plan made for an empty table scans a full one.
const AnalyzeEvery = 5 * time.Second

// analyze refreshes stale planner statistics when AnalyzeEvery has passed
// since the last time.
func (m *Maintenance) analyze(ctx context.Context) {
	if time.Since(m.analyzed) < AnalyzeEvery {
		return
	}
	m.analyzed = time.Now()
	tables, err := store.AnalyzeStale(ctx, m.db)
	if err != nil && ctx.Err() == nil {
		m.log.Warn("refreshing planner statistics failed", "error", err)
	}
	if len(tables) > 0 {
		m.log.Debug("planner statistics refreshed", "tables", tables)
	}
}
