package admin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestStatsPrunePartitions runs EXPLAIN on the statistics' real query over
// notifications partitioned by month: a range of one month reads that
// month's partition only, a range of two months two, with or without a
// tenant.
func TestStatsPrunePartitions(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Now().UTC()
	if _, err := db.Pool.Exec(ctx, `SELECT herald_ensure_partitions('notifications', $1, $2)`, now.AddDate(0, -6, 0), now); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO notifications (tenant_id, event_id, user_id, event_type, created_at)
		SELECT 't' || (i % 3), 'e' || i, 'u' || (i % 50), 'T', now() - (i % 180) * interval '1 day' FROM generate_series(1, 6000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE notifications`); err != nil {
		t.Fatal(err)
	}
	var months []string
	rows, err := db.Pool.Query(ctx, `SELECT partition_name FROM herald_partitions('notifications') ORDER BY upper_bound`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		months = append(months, n)
	}
	if len(months) < 7 {
		t.Fatalf("partitions: %v", months)
	}
	month := func(back int) (time.Time, string) {
		m := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, -back, 0)
		return m, "notifications_y" + m.Format("2006") + "m" + m.Format("01")
	}
	from3, p3 := month(3)
	_, p2 := month(2)
	for _, tc := range []struct {
		name string
		f    filters
		want []string
	}{
		{"one month", filters{from: from3, to: from3.AddDate(0, 1, 0)}, []string{p3}},
		{"one month, one tenant", filters{tenant: "t1", from: from3, to: from3.AddDate(0, 1, 0)}, []string{p3}},
		{"two months", filters{from: from3.Add(24 * time.Hour), to: from3.AddDate(0, 1, 5)}, []string{p3, p2}},
	} {
		sql, args := statsQuery(tc.f)
		rows, err := db.Pool.Query(ctx, "EXPLAIN (COSTS OFF) "+sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var l string
			if err := rows.Scan(&l); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, l)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		text := strings.Join(plan, "\n")
		for _, m := range months {
			read := strings.Contains(text, " "+m+" ") || strings.Contains(text, " "+m+"\n") || strings.HasSuffix(text, " "+m)
			wanted := false
			for _, w := range tc.want {
				wanted = wanted || w == m
			}
			if read != wanted {
				t.Errorf("%s: partition %s read %v, want %v:\n%s", tc.name, m, read, wanted, text)
			}
		}
	}
}
