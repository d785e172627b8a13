package bench

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestRunDirectorySmall runs the directory benchmark on 1,000 recipients:
// every step runs, counts the rows it should, and the report prints them.
// (RunDirectory itself fails when the export misses rows or the erase
// anonymises fewer than it seeded.)
func TestRunDirectorySmall(t *testing.T) {
	db := testenv.Postgres(t)
	db.Pool.Close()
	adminURL := testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL)
	res, err := RunDirectory(context.Background(), Env{AdminDatabaseURL: adminURL, Log: t.Logf}, DirectoryScenario{Recipients: 1000, Erased: 1200})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"import (new rows)": 3010, "import again (unchanged upserts)": 3010, "export": 3010,
		"import --prune (a tenth removed)": 2709, "erase one user (notifications + deliveries)": 2400}
	if len(res.Steps) != len(want) {
		t.Fatalf("steps %+v", res.Steps)
	}
	for _, s := range res.Steps {
		if want[s.Name] != s.Rows || s.PerSec <= 0 {
			t.Errorf("%s: %d rows at %.0f/s, want %d", s.Name, s.Rows, s.PerSec, want[s.Name])
		}
	}
	if !strings.Contains(res.Steps[3].Note, "301 deleted") {
		t.Errorf("prune note %q, want 301 deleted (100 recipients, 100 devices, 100 members, 1 group)", res.Steps[3].Note)
	}
	rep := Report{Directory: &res}
	rep.Evaluate()
	var out bytes.Buffer
	rep.Print(&out)
	if !strings.Contains(out.String(), "import --prune (a tenth removed)") || rep.Err() != nil {
		t.Fatalf("report (%v):\n%s", rep.Err(), &out)
	}
}

// TestDirectoryWritesWriteUntilStopped: the writers of a
// fanout-directory-writes run add recipients, with their devices and
// memberships, until their context ends, and count what they wrote.
func TestDirectoryWritesWriteUntilStopped(t *testing.T) {
	db := testenv.Postgres(t)
	ctx, cancel := context.WithCancel(context.Background())
	if err := store.EnsureTenant(ctx, db.Pool, benchTenant, ""); err != nil {
		t.Fatal(err)
	}
	var rows atomic.Int64
	done := make(chan error, 1)
	go func() { done <- directoryWrites(ctx, db.Pool, 100_000, &rows) }()
	testenv.Eventually(t, 30*time.Second, func() bool { return rows.Load() >= 1000 }, "the writers wrote fewer than 1,000 rows")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM recipients) + (SELECT count(*) FROM recipient_devices)
		+ (SELECT count(*) FROM group_members) + (SELECT count(*) FROM groups)`).Scan(&n); err != nil || n != rows.Load() {
		t.Fatalf("%d rows in the directory, the writers counted %d (%v)", n, rows.Load(), err)
	}
}

// TestRunDirectoryAPISmall runs the directory API benchmark on 6,000
// recipients (three batches, the last one short), 4 writers and 3
// readers of /v1/me/preferences: every
// request is answered 200 or 201 and the rows are all there.
func TestRunDirectoryAPISmall(t *testing.T) {
	db := testenv.Postgres(t)
	db.Pool.Close()
	adminURL := testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL)
	res, err := RunDirectoryAPI(context.Background(), Env{AdminDatabaseURL: adminURL, Log: t.Logf},
		DirectoryAPIScenario{Recipients: 6000, BatchClients: 2, Writers: 4, Puts: 10, Readers: 3, Reads: 10})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != 0 || res.Batches != 3 || res.BatchRows != 6000*3+60 || res.Put.Count != 40 || res.Put.P99 <= 0 ||
		res.MePreferences.Count != 30 || res.MePreferences.P99 <= 0 {
		t.Fatalf("result %+v", res)
	}
	rep := Report{DirectoryAPI: &res}
	var out bytes.Buffer
	rep.Print(&out)
	if !strings.Contains(out.String(), "POST /v1/recipients:batch (2 clients)") || rep.Err() != nil {
		t.Fatalf("report (%v):\n%s", rep.Err(), &out)
	}
}
