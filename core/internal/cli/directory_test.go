package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/progress"
	"github.com/heraldhq/herald/core/internal/testenv"
)

func countRows(t testing.TB, pool *pgxpool.Pool, tenant string) string {
	t.Helper()
	var r, g, m, p, s, d int
	err := pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM recipients WHERE tenant_id = $1), (SELECT count(*) FROM groups WHERE tenant_id = $1),
		(SELECT count(*) FROM group_members WHERE tenant_id = $1), (SELECT count(*) FROM user_preferences WHERE tenant_id = $1),
		(SELECT count(*) FROM group_settings WHERE tenant_id = $1), (SELECT count(*) FROM recipient_devices WHERE tenant_id = $1)`,
		tenant).Scan(&r, &g, &m, &p, &s, &d)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("recipients %d, groups %d, members %d, preferences %d, settings %d, devices %d", r, g, m, p, s, d)
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return -1
}

// TestDirectoryImportAllOrNothing: a file with problems imports nothing
// and lists every problem; with --partial the good entries are imported,
// the refused ones listed, and the exit status is still 1; importing again
// changes nothing; references may name what the tenant's directory has.
func TestDirectoryImportAllOrNothing(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{
  "recipients": [
    {"user_id": "s1", "user_type": "STAFF", "email": "s1@example.com", "device_tokens": ["t1"]},
    {"user_id": "s2", "user_type": "STAFF", "time_zone": "Europe/Roma"}
  ],
  "groups": [{"key": "restaurant:5", "type": "restaurant"}],
  "members": [{"group": "restaurant:5", "user_id": "s1", "role": "MANAGER"}, {"group": "restaurant:5", "user_id": "s2"}]
}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := runDirectoryImport(ctx, &stdout, &stderr, db.Pool, "acme", bad, "", false)
	if exitCode(err) != 1 {
		t.Fatalf("exit %d (%v), stderr:\n%s", exitCode(err), err, &stderr)
	}
	for _, want := range []string{
		`bad.json:4: recipients[1] (user s2): time_zone: unknown zone "Europe/Roma"`,
		`bad.json:7: members[1] (group restaurant:5, user s2): user_id: refers to recipients[1] (user s2) (line 4), which has errors`,
		"2 problems in 2 of 5 entries: nothing imported",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, &stderr)
		}
	}
	if got, want := countRows(t, db.Pool, "acme"), "recipients 0, groups 0, members 0, preferences 0, settings 0, devices 0"; got != want {
		t.Fatalf("after a refused import: %s, want %s", got, want)
	}

	stdout.Reset()
	stderr.Reset()
	err = runDirectoryImport(ctx, &stdout, &stderr, db.Pool, "acme", bad, "", true)
	if exitCode(err) != 1 || !strings.Contains(stderr.String(), "refused 2 of 5 entries") || !strings.Contains(stdout.String(), "imported 1 recipients, 1 groups, 1 members") {
		t.Fatalf("--partial: exit %d, stdout %q, stderr:\n%s", exitCode(err), &stdout, &stderr)
	}
	want := "recipients 1, groups 1, members 1, preferences 0, settings 0, devices 1"
	if got := countRows(t, db.Pool, "acme"); got != want {
		t.Fatalf("after --partial: %s, want %s", got, want)
	}

	// The group and s1 are in the database now: a file may refer to them.
	more := filepath.Join(dir, "more.jsonl")
	if err := os.WriteFile(more, []byte(`{"recipient": {"user_id": "s3", "user_type": "STAFF"}}
{"member": {"group": "restaurant:5", "user_id": "s3", "role": "CHEF"}}
{"preference": {"user_id": "s1", "channel": "SMS", "enabled": false}}
{"setting": {"group": "restaurant:9", "channel": "SMS", "enabled": false}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	err = runDirectoryImport(ctx, &stdout, &stderr, db.Pool, "acme", more, "", false)
	if exitCode(err) != 1 || !strings.Contains(stderr.String(), `more.jsonl:4: settings[0] (group restaurant:9, channel SMS): group: group "restaurant:9" is not declared in this file or the tenant's directory (groups)`) {
		t.Fatalf("undeclared group: exit %d, stderr:\n%s", exitCode(err), &stderr)
	}
	if err := os.WriteFile(more, []byte(`{"recipient": {"user_id": "s3", "user_type": "STAFF"}}
{"member": {"group": "restaurant:5", "user_id": "s3", "role": "CHEF"}}
{"preference": {"user_id": "s1", "channel": "SMS", "enabled": false}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		stderr.Reset()
		if err := runDirectoryImport(ctx, &stdout, &stderr, db.Pool, "acme", more, "", false); err != nil {
			t.Fatalf("import %d: %v\n%s", i, err, &stderr)
		}
		if got, want := countRows(t, db.Pool, "acme"), "recipients 2, groups 1, members 2, preferences 1, settings 0, devices 1"; got != want {
			t.Fatalf("import %d: %s, want %s", i, got, want)
		}
	}
	// Another tenant sees none of it.
	if got, want := countRows(t, db.Pool, "other"), "recipients 0, groups 0, members 0, preferences 0, settings 0, devices 0"; got != want {
		t.Fatalf("other tenant: %s", got)
	}
}

// writeLargeJSONL writes n recipients, one group of all of them and a
// preference each, in JSONL.
func writeLargeJSONL(t testing.TB, path string, n int) {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(`{"group": {"key": "site:1", "type": "site", "max_recipients": 100}}` + "\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `{"recipient": {"user_id": "u%06d", "user_type": "STAFF", "email": "u%06d@example.com", "phone": "+3906%08d", "time_zone": "Europe/Rome", "quiet_hours": {"start": "22:00", "end": "07:00"}, "device_tokens": ["tok-%d"]}}`+"\n", i, i, i, i)
		fmt.Fprintf(&b, `{"member": {"group": "site:1", "user_id": "u%06d", "role": "STAFF"}}`+"\n", i)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDirectoryImportLargeJSONL: 10,000 recipients in JSONL import in one
// go, with the progress line on stderr (not a terminal: plain lines).
func TestDirectoryImportLargeJSONL(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	path := filepath.Join(t.TempDir(), "large.jsonl")
	writeLargeJSONL(t, path, 10_000)
	var stdout, stderr bytes.Buffer
	start := time.Now()
	if err := runDirectoryImport(context.Background(), &stdout, &stderr, db.Pool, "big", path, "", false); err != nil {
		t.Fatalf("%v\n%s", err, &stderr)
	}
	t.Logf("10,000 recipients (30,001 rows) in %v", time.Since(start))
	if got, want := countRows(t, db.Pool, "big"), "recipients 10000, groups 1, members 10000, preferences 0, settings 0, devices 10000"; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
	if !strings.Contains(stderr.String(), "bytes checked") || !strings.Contains(stderr.String(), "30,001/30,001 rows imported") {
		t.Errorf("no progress lines on stderr:\n%s", &stderr)
	}
}

// BenchmarkDirectoryImport100k imports 100,000 recipients (and as many
// memberships and devices) from JSONL, checked and upserted in one
// transaction: run with -bench DirectoryImport100k -benchtime 1x.
func BenchmarkDirectoryImport100k(b *testing.B) {
	db := testenv.Postgres(b)
	path := filepath.Join(b.TempDir(), "large.jsonl")
	writeLargeJSONL(b, path, 100_000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var stdout, stderr bytes.Buffer
		if err := runDirectoryImport(context.Background(), &stdout, &stderr, db.Pool, "big", path, "", false); err != nil {
			b.Fatalf("%v\n%s", err, &stderr)
		}
		b.Log(strings.TrimSpace(stdout.String()))
	}
}

// TestDirectoryCheckAndSchema: check prints a summary for a good file and
// every problem for a bad one (exit 1); schema prints the JSON Schema, and
// --jsonl the schema of one line.
func TestDirectoryCheckAndSchema(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runHerald(t, "directory", "check", examples+"directory/acme.json")
	if code != 0 || stdout != "ok: 8 recipients, 2 groups, 5 members, 2 preferences, 2 settings\n" {
		t.Errorf("check acme.json: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	bad := filepath.Join(t.TempDir(), "dir.jsonl")
	if err := os.WriteFile(bad, []byte(`{"recipient": {"user_id": "u1", "user_type": "T", "email": "not an address"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = runHerald(t, "directory", "check", bad)
	if code != 1 || !strings.Contains(stderr, `dir.jsonl:1: recipients[0] (user u1): email: "not an address": want a bare e-mail address`) ||
		!strings.Contains(stderr, "1 problem in 1 of 1 entries") {
		t.Errorf("check bad: exit %d, stderr %q", code, stderr)
	}
	for _, args := range [][]string{{"directory", "schema"}, {"directory", "schema", "--jsonl"}} {
		stdout, stderr, code := runHerald(t, args...)
		var schema map[string]any
		if code != 0 || json.Unmarshal([]byte(stdout), &schema) != nil || schema["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%v: exit %d, stderr %q, stdout %.200s", args, code, stderr, stdout)
		}
	}
}

// TestDirectoryImportProgressCounts: the progress lines count the rows the
// import writes against a total of the same rows, web push devices
// included (the quick start's directory declares eight, which the total
// once left out: "28/20 rows imported"): no line shows more done than the
// total, and the last shows them equal, for the rows and for the bytes.
func TestDirectoryImportProgressCounts(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	var stdout, stderr bytes.Buffer
	path := examples + "quickstart/directory.json"
	if err := runDirectoryImport(context.Background(), &stdout, &stderr, db.Pool, "acme", path, "", false); err != nil {
		t.Fatalf("%v\n%s", err, &stderr)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	for unit, total := range map[string]int64{"rows imported": 27, "bytes checked": st.Size()} {
		lines := regexp.MustCompile(`([\d,]+)/([\d,]+) `+unit).FindAllStringSubmatch(stderr.String(), -1)
		if len(lines) == 0 {
			t.Errorf("no %q progress line on stderr:\n%s", unit, &stderr)
			continue
		}
		for _, l := range lines {
			done, err := strconv.ParseInt(strings.ReplaceAll(l[1], ",", ""), 10, 64)
			if err != nil || done > total || l[2] != progress.Thousands(total) {
				t.Errorf("%s: %q: want at most %d done of a total of %d", unit, l[0], total, total)
			}
		}
		if last := lines[len(lines)-1]; last[1] != last[2] {
			t.Errorf("%s: the last line %q does not end at the total", unit, last[0])
		}
	}
	if got, want := countRows(t, db.Pool, "acme"), "recipients 4, groups 1, members 3, preferences 3, settings 3, devices 13"; got != want {
		t.Errorf("imported %s, want %s", got, want)
	}
}
