package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestRetentionStatus: `herald retention status` lists the monthly
// partitions with the day retention drops each, marks those already due,
// and says "never" without retention; a bad retention is refused naming
// the field.
func TestRetentionStatus(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Now().UTC()
	if _, err := db.Pool.Exec(ctx, `SELECT herald_ensure_partitions('delivery_attempts', $1, $1)`, now.AddDate(0, -3, 0)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runRetentionStatus(ctx, &out, db.Pool, store.Retention{DeliveryAttempts: 30 * 24 * time.Hour}, now); err != nil {
		t.Fatal(err)
	}
	old := now.AddDate(0, -3, 0)
	oldMonth := time.Date(old.Year(), old.Month(), 1, 0, 0, 0, 0, time.UTC)
	cur := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	for _, want := range []string{
		"delivery_attempts: kept 720h0m0s",
		"delivery_attempts_y" + oldMonth.Format("2006") + "m" + oldMonth.Format("01"),
		oldMonth.AddDate(0, 1, 30).Format(time.RFC3339) + " (due: next round)",
		cur.AddDate(0, 1, 30).Format(time.RFC3339) + "\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, &out)
		}
	}

	// Through the command, with the config file's retention.
	dir := t.TempDir()
	cfg := filepath.Join(dir, "herald.hcl")
	write := func(body string) {
		if err := os.WriteFile(cfg, []byte("database { url = \""+db.URL+"\" }\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	root := NewRoot()
	out.Reset()
	root.SetOut(&out)
	root.SetArgs([]string{"retention", "status", "--config", cfg})
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "kept forever (retention.delivery_attempts not set)") || !strings.Contains(out.String(), " never\n") {
		t.Errorf("status without retention:\n%s", &out)
	}
	write("retention { delivery_attempts = \"2h\" }\n")
	root = NewRoot()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"retention", "status", "--config", cfg})
	if err := root.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "retention.delivery_attempts") {
		t.Errorf("retention of 2h: want an error naming retention.delivery_attempts, got %v", err)
	}
}

// TestRetentionSweepsStatusAndApply: `herald retention status` lists the
// sweeps the config asks for (table, tenant, key, period, rows past it
// now), `herald retention apply` runs them, and status then counts none.
func TestRetentionSweepsStatusAndApply(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO event_outbox (tenant_id, event_id, event_type, status, created_at)
		SELECT t, t || '-' || i, 'T', 'PROCESSED', now() - i * interval '1 day' - interval '1 hour'
		FROM generate_series(0, 39) i, unnest(ARRAY['acme', 'zeta']) t`); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "herald.hcl")
	if err := os.WriteFile(cfg, []byte("database { url = \""+db.URL+"\" }\n"+`retention {
  events = "720h"
  tenant "acme" { events = "168h" }
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		root := NewRoot()
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(args, "--config", cfg))
		if err := root.ExecuteContext(ctx); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, &out)
		}
		return out.String()
	}
	status := run("retention", "status")
	for _, re := range []string{
		`sweeps \(deleted in batches every round\): 2`,
		`event_outbox +acme +retention\.tenant\.acme\.events +168h0m0s +33\n`,
		`event_outbox +zeta +retention\.events +720h0m0s +10\n`,
	} {
		if !regexp.MustCompile(re).MatchString(status) {
			t.Errorf("status lacks %s:\n%s", re, status)
		}
	}
	apply := run("retention", "apply")
	for _, want := range []string{
		"swept event_outbox of tenant acme (retention.tenant.acme.events = 168h0m0s): 33 rows in 1 statements",
		"swept event_outbox of tenant zeta (retention.events = 720h0m0s): 10 rows in 1 statements",
		"43 rows swept",
	} {
		if !strings.Contains(apply, want) {
			t.Errorf("apply lacks %q:\n%s", want, apply)
		}
	}
	if status := run("retention", "status"); !regexp.MustCompile(`acme +retention\.tenant\.acme\.events +168h0m0s +0\n`).MatchString(status) {
		t.Errorf("status after apply:\n%s", status)
	}
}

// TestRetentionStatusCountsRows: a partition that holds rows shows them
// before any ANALYZE (pg_class.reltuples, the planner's estimate, is 0
// or -1 until then); past the counting cap it says so, and after ANALYZE
// gives the estimate, marked as one.
func TestRetentionStatusCountsRows(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Now().UTC()
	old := now.AddDate(0, -2, 0)
	oldMonth := time.Date(old.Year(), old.Month(), 1, 0, 0, 0, 0, time.UTC)
	if _, err := db.Pool.Exec(ctx, `SELECT herald_ensure_partitions('delivery_attempts', $1, $2)`, oldMonth, now); err != nil {
		t.Fatal(err)
	}
	oldPart := "delivery_attempts_y" + oldMonth.Format("2006") + "m" + oldMonth.Format("01")
	curPart := "delivery_attempts_y" + now.Format("2006") + "m" + now.Format("01")
	insert := func(n int, at time.Time) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, `INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, started_at, delivery_created_at)
			SELECT 'acme', gen_random_uuid(), 1, 'sent', $2, $2 FROM generate_series(1, $1)`, n, at); err != nil {
			t.Fatal(err)
		}
	}
	insert(7, oldMonth.Add(time.Hour))
	insert(partitionCountCap+1, now)
	rowsOf := func(part string) string {
		t.Helper()
		var out bytes.Buffer
		if err := runRetentionStatus(ctx, &out, db.Pool, store.Retention{}, now); err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^` + part + `\s+\S+\s+\S+\s+(\S+(?: \(est\.\))?)\s`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("status lacks %s:\n%s", part, &out)
		}
		return m[1]
	}
	if got := rowsOf(oldPart); got != "7" {
		t.Errorf("%s before ANALYZE: rows %q, want 7", oldPart, got)
	}
	if got, want := rowsOf(curPart), "100000+"; got != want {
		t.Errorf("%s before ANALYZE: rows %q, want %q", curPart, got, want)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE delivery_attempts`); err != nil {
		t.Fatal(err)
	}
	if got := rowsOf(oldPart); got != "7" {
		t.Errorf("%s after ANALYZE: rows %q, want 7", oldPart, got)
	}
	if got := rowsOf(curPart); !regexp.MustCompile(`^~\d{6} \(est\.\)$`).MatchString(got) {
		t.Errorf("%s after ANALYZE: rows %q, want ~N (est.) with N about %d", curPart, got, partitionCountCap+1)
	}
}
