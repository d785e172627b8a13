package digest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/digest"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk/producer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// benchRules is the shape of `herald bench --scenario digest`: each event
// goes to one team, and every delivery is collected per recipient and
// team.
const benchRules = `
defaults { time_zone = "UTC" }
channel "EMAIL" { providers = [{ plugin = "sink" }] }
event "BENCH" {
  audience { group = "team:{{ .payload.team }}" }
  mandatory   = ["EMAIL"]
  quiet_hours = "ignore"
  digest {
    channels  = ["EMAIL"]
    key       = "team:{{ .payload.team }}"
    window    = "1h"
    max_items = 1000
  }
  inbox {
    title = "Benchmark event {{ .payload.n }}"
    body  = "Event {{ .payload.n }} for team {{ .payload.team }}"
  }
}
`

// BenchmarkFlush collects 5 items into each of HERALD_BENCH_WINDOWS
// windows (default 2,000; 50 recipients a team, as `herald bench
// --scenario digest`), closes them all at once and times the flusher
// (digest.DefaultConfig, or HERALD_BENCH_FLUSH_WORKERS and
// HERALD_BENCH_FLUSH_BATCH) draining them: windows/s, and the CPU the
// flush took per 1,000 windows in PostgreSQL (its sessions' backends, from
// /proc) and in this process. On a machine others load, the CPU figures
// vary far less than the rate.
func BenchmarkFlush(b *testing.B) {
	windows := envInt(b, "HERALD_BENCH_WINDOWS", 2000)
	cfg := digest.DefaultConfig()
	cfg.Workers = envInt(b, "HERALD_BENCH_FLUSH_WORKERS", cfg.Workers)
	cfg.BatchSize = envInt(b, "HERALD_BENCH_FLUSH_BATCH", cfg.BatchSize)
	const perTeam, perWindow = 50, 5
	teams := max(windows/perTeam, 1)
	ctx := context.Background()
	var total, pgCPU, goCPU time.Duration
	var flushed int
	for range b.N {
		b.StopTimer()
		db, rs := benchSetup(b, teams, perTeam, perWindow)
		if _, err := db.Pool.Exec(ctx, `UPDATE digest_windows SET closes_at = now()`); err != nil {
			b.Fatal(err)
		}
		// As the daemon's maintenance (store.AnalyzeStale) and autovacuum
		// keep them within the minute the windows stay open.
		if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE digest_windows, deliveries`); err != nil {
			b.Fatal(err)
		}
		// The flusher's own pool: one session per worker, whose backends'
		// CPU time is read before and after.
		pcfg, err := pgxpool.ParseConfig(db.URL)
		if err != nil {
			b.Fatal(err)
		}
		pcfg.MinConns, pcfg.MaxConns = int32(cfg.Workers), int32(cfg.Workers)
		var mu sync.Mutex
		var pids []int
		pcfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			mu.Lock()
			defer mu.Unlock()
			pids = append(pids, int(c.PgConn().PID()))
			return nil
		}
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			b.Fatal(err)
		}
		testenv.Eventually(b, time.Minute, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(pids) == cfg.Workers
		}, "the flusher's pool to open %d sessions", cfg.Workers)
		f := digest.New(pool, func() *rules.RuleSet { return rs }, nil, hclog.NewNullLogger(), cfg)
		pg0, go0 := procCPU(b, pids), selfCPU(b)
		b.StartTimer()
		began := time.Now()
		n, err := f.Drain(ctx)
		if err != nil {
			b.Fatal(err)
		}
		total += time.Since(began)
		b.StopTimer()
		pgCPU += procCPU(b, pids) - pg0
		goCPU += selfCPU(b) - go0
		pool.Close()
		flushed += n
		if n != teams*perTeam {
			b.Fatalf("flushed %d windows, want %d", n, teams*perTeam)
		}
	}
	b.ReportMetric(float64(flushed)/total.Seconds(), "windows/s")
	b.ReportMetric(pgCPU.Seconds()*1e3/float64(flushed)*1000, "pg-cpu-ms/1k-windows")
	b.ReportMetric(goCPU.Seconds()*1e3/float64(flushed)*1000, "go-cpu-ms/1k-windows")
}

// procCPU is the user and system CPU time the processes pids used so far.
func procCPU(b *testing.B, pids []int) time.Duration {
	var ticks int64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Fatalf("backend CPU: %v", err)
		}
		// Fields after the command's closing parenthesis: utime and stime
		// are the 12th and 13th.
		f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		for _, s := range f[11:13] {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				b.Fatalf("backend CPU: %v", err)
			}
			ticks += n
		}
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// selfCPU is the user and system CPU time this process used so far.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

// benchSetup makes teams teams of perTeam recipients and relays perWindow
// events to each team, so every recipient has one window of perWindow
// items.
func benchSetup(b *testing.B, teams, perTeam, perWindow int) (*testenv.DB, *rules.RuleSet) {
	b.Helper()
	db, rs := setupRules(b, 0, benchRules)
	ctx := context.Background()
	dir := &directory.Directory{}
	for g := range teams {
		key := fmt.Sprintf("team:%d", g)
		dir.Groups = append(dir.Groups, directory.Group{Key: key, Type: "team"})
		for u := range perTeam {
			id := fmt.Sprintf("u%d-%d", g, u)
			dir.Recipients = append(dir.Recipients, directory.Recipient{UserID: id, UserType: "STAFF", Email: id + "@example.com", Active: true})
			dir.Members = append(dir.Members, directory.Member{Group: key, UserID: id, Role: "STAFF"})
		}
	}
	if err := store.ImportDirectory(ctx, db.Pool, "t1", dir); err != nil {
		b.Fatal(err)
	}
	for n := range perWindow {
		for g := range teams {
			err := producer.Enqueue(ctx, db.Pool, producer.Event{TenantID: "t1", EventID: fmt.Sprintf("e%d-%d", g, n), Type: "BENCH",
				Payload: json.RawMessage(fmt.Sprintf(`{"team": %d, "n": %d}`, g, n))})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	relayAll(b, db, rs)
	return db, rs
}
