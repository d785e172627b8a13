package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ThrottleItem is one delivery that counts against a throttle.
type ThrottleItem struct {
	TenantID, UserID, Channel, EventType string
	// Key is the rendered throttle key (never empty).
	Key   string
	Limit int
	Per   time.Duration
	// Fold, when set, is the event as a digest item: the relay folds a
	// delivery over the limit into a digest window closing when the
	// throttle window ends, with Fold as its content (not stored here).
	Fold json.RawMessage
}

// WindowEnd is when the throttle window holding now ends: windows are now
// truncated to Per, so every daemon agrees on them.
func (t ThrottleItem) WindowEnd(now time.Time) time.Time {
	return now.Truncate(t.Per).Add(t.Per)
}

func (t ThrottleItem) counterKey() string {
	return t.TenantID + "\x00" + t.UserID + "\x00" + t.Channel + "\x00" + t.EventType + "\x00" + t.Key
}

// CountThrottled counts items against their throttles' counters of the
// current window (now truncated to Per), in tx, and reports for each
// whether it is within its limit. Items of one counter are counted in
// their order; counters are written in key order so that concurrent relays
// never deadlock on them, and the row lock makes a concurrent relay wait
// for this one's count.
func CountThrottled(ctx context.Context, tx pgx.Tx, items []ThrottleItem, now time.Time) ([]bool, error) {
	within := make([]bool, len(items))
	groups := map[string][]int{}
	var keys []string
	for i, it := range items {
		k := it.counterKey()
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], i)
	}
	slices.SortFunc(keys, strings.Compare)
	n := len(keys)
	tenants, users, chans, types, tkeys := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	starts, ends, adds := make([]time.Time, n), make([]time.Time, n), make([]int32, n)
	for j, k := range keys {
		it := items[groups[k][0]]
		tenants[j], users[j], chans[j], types[j], tkeys[j] = it.TenantID, it.UserID, it.Channel, it.EventType, it.Key
		starts[j] = now.Truncate(it.Per)
		ends[j] = it.WindowEnd(now)
		adds[j] = int32(len(groups[k]))
	}
	rows, err := tx.Query(ctx, `INSERT INTO throttle_counters AS c (tenant_id, user_id, channel, event_type, throttle_key, window_start, window_end, sent)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[], $8::int[])
		ORDER BY 1, 2, 3, 4, 5, 6
		ON CONFLICT (tenant_id, user_id, channel, event_type, throttle_key, window_start) DO UPDATE SET sent = c.sent + EXCLUDED.sent
		RETURNING tenant_id, user_id, channel, event_type, throttle_key, sent`,
		tenants, users, chans, types, tkeys, starts, ends, adds)
	if err != nil {
		return nil, fmt.Errorf("count throttled: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var it ThrottleItem
		var total int
		if err := rows.Scan(&it.TenantID, &it.UserID, &it.Channel, &it.EventType, &it.Key, &total); err != nil {
			return nil, fmt.Errorf("count throttled: %w", err)
		}
		g := groups[it.counterKey()]
		before := total - len(g)
		for i, idx := range g {
			within[idx] = before+i < items[idx].Limit
		}
	}
	return within, rows.Err()
}

// SweepThrottleCounters deletes the counters of windows that ended.
func SweepThrottleCounters(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	tag, err := pool.Exec(ctx, `DELETE FROM throttle_counters WHERE window_end < now() - interval '1 minute'`)
	if err != nil {
		return 0, fmt.Errorf("sweep throttle counters: %w", err)
	}
	return tag.RowsAffected(), nil
}
