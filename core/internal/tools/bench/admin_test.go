package bench

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestRunAdminSmall runs the superadmin benchmark at 20,000 rows: every
// shape is measured, returns rows and is answered 200, and the report
// judges each shape.
func TestRunAdminSmall(t *testing.T) {
	db := testenv.Postgres(t) // fails (or skips with -short) when PostgreSQL does not answer
	db.Pool.Close()
	adminURL := testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL)
	const requests = 20
	res, err := RunAdmin(context.Background(), Env{AdminDatabaseURL: adminURL, Log: t.Logf},
		AdminScenario{Rows: 20000, Requests: requests, Warmup: 2, StatsRequests: 3})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"no filter", "tenant", "tenant+user", "tenant+severity=critical", "status=unread",
		"severity=critical+status=unread", "tenant+one day", "tenant+project", "tenant+severity=critical, pages 2-6"}
	if len(res.Shapes) != len(names) {
		t.Fatalf("%d shapes, want %d: %+v", len(res.Shapes), len(names), res.Shapes)
	}
	total := 0
	for i, s := range res.Shapes {
		if s.Name != names[i] {
			t.Errorf("shape %d is %q, want %q", i, s.Name, names[i])
		}
		if s.Latency.Count != requests || s.Items == 0 || s.Failed != 0 || s.Example == "" || s.Latency.P99 <= 0 {
			t.Errorf("%s: %d requests (want %d), %d rows, %d failed (%s), example %q, p99 %.2f ms",
				s.Name, s.Latency.Count, requests, s.Items, s.Failed, s.Detail, s.Example, s.Latency.P99)
		}
		total += s.Latency.Count
	}
	if res.Overall.Count != total {
		t.Errorf("overall counts %d requests, the shapes %d", res.Overall.Count, total)
	}
	if res.Stats.Latency.Count != 3 || res.Stats.Items == 0 || res.Stats.Failed != 0 {
		t.Errorf("stats: %+v", res.Stats)
	}
	if res.Failed != 0 || res.Load <= 0 || res.TableBytes <= 0 || res.Scenario.Rows != 20000 || res.Scenario.Tenants != 20 {
		t.Errorf("result: %d failed, load %s, %d bytes, scenario %+v", res.Failed, res.Load, res.TableBytes, res.Scenario)
	}

	rep := Report{Admin: &res}
	rep.Evaluate()
	judged := 0
	for _, tg := range rep.Targets {
		if strings.HasPrefix(tg.Name, "superadmin list p99, ") {
			judged++
		}
	}
	if judged != len(names) {
		t.Errorf("%d superadmin targets, want %d: %+v", judged, len(names), rep.Targets)
	}
	if err := rep.Err(); err != nil {
		t.Errorf("report: %v", err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	for _, n := range append(names, "stats, last 30 days", "every list request") {
		if !strings.Contains(out.String(), n) {
			t.Errorf("printed report lacks %q:\n%s", n, out.String())
		}
	}
	if strings.Contains(out.String(), "exactly-once") {
		t.Errorf("a report without pipeline runs speaks of the exactly-once check:\n%s", out.String())
	}
}

// TestLoadNotifications checks the generated rows against what the
// scenario promises: tenants, users, projects, severities, statuses,
// created_at span and its runs of equal values.
func TestLoadNotifications(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	sc := AdminScenario{Rows: 20000}
	sc.setDefaults()
	for i := range sc.Tenants {
		if err := store.EnsureTenant(ctx, db.Pool, adminTenant(i), ""); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := loadNotifications(ctx, db.Pool, sc, now); err != nil {
		t.Fatal(err)
	}
	var (
		rows, tenants, maxUsers, critical, warning, info, archived, read, unread, projectRows, projectTenants, runs int
		oldest, newest                                                                                              time.Time
		idsOrdered                                                                                                  bool
	)
	err := db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT tenant_id),
			(SELECT max(n) FROM (SELECT count(DISTINCT user_id) AS n FROM notifications GROUP BY tenant_id) u),
			count(*) FILTER (WHERE severity = 'critical'), count(*) FILTER (WHERE severity = 'warning'),
			count(*) FILTER (WHERE severity = 'info'),
			count(*) FILTER (WHERE archived_at IS NOT NULL), count(*) FILTER (WHERE read_at IS NOT NULL AND archived_at IS NULL),
			count(*) FILTER (WHERE read_at IS NULL AND archived_at IS NULL),
			count(*) FILTER (WHERE project_id <> 'default'), count(DISTINCT tenant_id) FILTER (WHERE project_id <> 'default'),
			count(DISTINCT created_at), min(created_at), max(created_at),
			bool_and(to_hex((extract(epoch FROM created_at) * 1000)::bigint) = ltrim(left(replace(notification_id::text, '-', ''), 12), '0'))
		FROM notifications`).Scan(&rows, &tenants, &maxUsers, &critical, &warning, &info, &archived, &read, &unread,
		&projectRows, &projectTenants, &runs, &oldest, &newest, &idsOrdered)
	if err != nil {
		t.Fatal(err)
	}
	if rows != sc.Rows || tenants != sc.Tenants || maxUsers > sc.UsersPerTenant {
		t.Errorf("%d rows, %d tenants, at most %d users a tenant; want %d, %d, ≤ %d", rows, tenants, maxUsers, sc.Rows, sc.Tenants, sc.UsersPerTenant)
	}
	share := func(n int) float64 { return float64(n) / float64(rows) }
	for _, c := range []struct {
		what string
		n    int
		want float64
	}{
		{"info", info, 0.80}, {"warning", warning, 0.15}, {"critical", critical, 0.05},
		{"archived", archived, 0.10}, {"read", read, 0.60}, {"unread", unread, 0.30},
		// The first 4 of 20 tenants give 60 % of their rows to other projects.
		{"not in the default project", projectRows, 0.6 * 4 / 20},
	} {
		if got := share(c.n); math.Abs(got-c.want) > 0.02 {
			t.Errorf("%s: %.3f of the rows, want %.2f ± 0.02", c.what, got, c.want)
		}
	}
	if projectTenants != adminProjectTenants {
		t.Errorf("%d tenants have rows outside the default project, want %d", projectTenants, adminProjectTenants)
	}
	span := time.Duration(sc.Days) * 24 * time.Hour
	if newest.After(now) || oldest.Before(now.Add(-span)) || newest.Sub(oldest) < span*99/100 {
		t.Errorf("created_at from %s to %s, want %s before %s up to it", oldest, newest, span, now)
	}
	if want := sc.Rows/adminBatch + 1; runs != want {
		t.Errorf("%d distinct created_at, want %d (runs of %d)", runs, want, adminBatch)
	}
	if !idsOrdered {
		t.Error("notification ids do not carry their created_at's milliseconds (version 7)")
	}
}
