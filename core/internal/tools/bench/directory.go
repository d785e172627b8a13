package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
)

// DirectoryScenario sizes the directory benchmark: the store-level work
// behind `herald directory import [--prune]`, `export` and `erase`.
type DirectoryScenario struct {
	// Recipients is how many recipients the import writes, each with one
	// device and one membership (groups of 100).
	Recipients int `json:"recipients"`
	// Erased is how many notifications (each with one delivery) the
	// erased user has.
	Erased int `json:"erased_notifications"`
}

// DirectoryStep is one measured step.
type DirectoryStep struct {
	Name    string        `json:"name"`
	Rows    int           `json:"rows"`
	Elapsed time.Duration `json:"elapsed_ns"`
	PerSec  float64       `json:"rows_per_sec"`
	Note    string        `json:"note,omitempty"`
}

// DirectoryResult is what RunDirectory measured.
type DirectoryResult struct {
	Scenario DirectoryScenario `json:"scenario"`
	Steps    []DirectoryStep   `json:"steps"`
}

// benchDirectory is a directory of n recipients in groups of 100, each
// recipient with one FCM device and one membership; from skips the first
// recipients (a smaller file for the prune step).
func benchDirectory(n, from int) *directory.Directory {
	dir := &directory.Directory{}
	for g := from / 100; g*100 < n; g++ {
		dir.Groups = append(dir.Groups, directory.Group{Key: fmt.Sprintf("shop:%d", g), Type: "shop"})
	}
	for i := from; i < n; i++ {
		uid := fmt.Sprintf("r%07d", i)
		dir.Recipients = append(dir.Recipients, directory.Recipient{UserID: uid, UserType: "STAFF", Active: true,
			Email: uid + "@bench.invalid", Devices: []directory.Device{{Kind: directory.DeviceFCM, Token: "fcm-" + uid}}})
		dir.Members = append(dir.Members, directory.Member{Group: fmt.Sprintf("shop:%d", i/100), UserID: uid, Role: "STAFF"})
	}
	return dir
}

// RunDirectory measures, in a database of its own: importing Recipients
// recipients with their devices and memberships (rows/s, every row the
// import writes counted); importing the same file again (every row an
// unchanged upsert); exporting the directory; import --prune of a file
// without the first tenth of the recipients (the upsert and the deletes
// in one transaction); and erasing one user with Erased notifications and
// deliveries (rows anonymised per second, RemoveRecipient and the batches
// together).
func RunDirectory(ctx context.Context, env Env, sc DirectoryScenario) (DirectoryResult, error) {
	res := DirectoryResult{Scenario: sc}
	logf := env.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	name := fmt.Sprintf("herald_bench_directory_%d_%d", time.Now().Unix(), os.Getpid())
	_, pool, drop, err := heraldDatabase(ctx, env.AdminDatabaseURL, name, 4, 0)
	if err != nil {
		return res, err
	}
	defer func() { pool.Close(); _ = drop() }()
	if err := store.EnsureTenant(ctx, pool, benchTenant, "Benchmark"); err != nil {
		return res, err
	}
	step := func(name string, rows int, f func() (string, error)) error {
		logf("directory: %s (%s rows)", name, num(float64(rows)))
		start := time.Now()
		note, err := f()
		if err != nil {
			return fmt.Errorf("bench directory: %s: %w", name, err)
		}
		el := time.Since(start)
		res.Steps = append(res.Steps, DirectoryStep{Name: name, Rows: rows, Elapsed: el, PerSec: float64(rows) / el.Seconds(), Note: note})
		return nil
	}
	full := benchDirectory(sc.Recipients, 0)
	rows := store.ImportRows(full)
	if err := step("import (new rows)", rows, func() (string, error) {
		return "", store.ImportDirectory(ctx, pool, benchTenant, full)
	}); err != nil {
		return res, err
	}
	if err := step("import again (unchanged upserts)", rows, func() (string, error) {
		return "", store.ImportDirectory(ctx, pool, benchTenant, full)
	}); err != nil {
		return res, err
	}
	if err := step("export", rows, func() (string, error) {
		var got *directory.Directory
		err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			var err error
			got, err = store.ExportDirectory(ctx, tx, benchTenant)
			return err
		})
		if err == nil && store.ImportRows(got) != rows {
			err = fmt.Errorf("exported %d rows, want %d", store.ImportRows(got), rows)
		}
		return "", err
	}); err != nil {
		return res, err
	}
	smaller := benchDirectory(sc.Recipients, sc.Recipients/10)
	if err := step("import --prune (a tenth removed)", store.ImportRows(smaller), func() (string, error) {
		var p store.Pruned
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := store.ImportDirectory(ctx, tx, benchTenant, smaller); err != nil {
				return err
			}
			var err error
			p, err = store.PruneDirectory(ctx, tx, benchTenant, smaller)
			return err
		})
		return fmt.Sprintf("%s rows upserted and %s deleted in one transaction", num(float64(store.ImportRows(smaller))), num(float64(p.Total()))), err
	}); err != nil {
		return res, err
	}
	// One user with many stored rows: the notifications and deliveries the
	// relay would have written, spread over two months.
	user := fmt.Sprintf("r%07d", sc.Recipients-1)
	if _, err := pool.Exec(ctx, `WITH n AS (
			INSERT INTO notifications (tenant_id, event_id, user_id, event_type, title, body, data, created_at)
			SELECT $1, 'ev-' || i, $2, 'ORDER', 'Order ' || i || ' for ' || $2, 'Dear ' || $2, '{"ref": 1}',
				now() - (i % 60) * interval '1 day'
			FROM generate_series(1, $3) AS i RETURNING notification_id, event_id, created_at)
		INSERT INTO deliveries (tenant_id, notification_id, event_id, event_type, user_id, user_type, channel, status, recipient, content, created_at)
		SELECT $1, notification_id, event_id, 'ORDER', $2, 'STAFF', 'EMAIL', 'SENT', jsonb_build_object('email', $2 || '@bench.invalid'),
			'{"subject": "Order", "body": "Dear"}', created_at FROM n`, benchTenant, user, sc.Erased); err != nil {
		return res, fmt.Errorf("bench directory: seed the erased user's rows: %w", err)
	}
	if err := step("erase one user (notifications + deliveries)", 2*sc.Erased, func() (string, error) {
		e, err := store.EraseRecipient(ctx, pool, benchTenant, user, store.EraseOptions{})
		if err == nil && (e.Notifications != int64(sc.Erased) || e.Deliveries != int64(sc.Erased)) {
			err = fmt.Errorf("erased %d notifications and %d deliveries, want %d each", e.Notifications, e.Deliveries, sc.Erased)
		}
		return "batches of 500 notifications, each one transaction", err
	}); err != nil {
		return res, err
	}
	return res, nil
}

func (d *DirectoryResult) print(w io.Writer) {
	fmt.Fprintf(w, "Directory (store level, %s recipients with one device and one membership each):\n", num(float64(d.Scenario.Recipients)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\t\trows\tseconds\trows/s\t")
	for _, s := range d.Steps {
		fmt.Fprintf(tw, "%s\t\t%s\t%.2f\t%s\t\n", s.Name, num(float64(s.Rows)), s.Elapsed.Seconds(), num(s.PerSec))
	}
	_ = tw.Flush()
	for _, s := range d.Steps {
		if s.Note != "" {
			fmt.Fprintf(w, "  %s: %s\n", s.Name, s.Note)
		}
	}
}

// directoryWrites writes recipients into the run's directory while a
// pipeline run is measured (Scenario.DirectoryWrites rows/s in all,
// paced): batches of 100 new recipients, each with a device and a
// membership in a group no event targets, so the run's deliveries stay
// what it expects. It counts the rows written into rows until ctx ends.
func directoryWrites(ctx context.Context, pool *pgxpool.Pool, rate int, rows *atomic.Int64) error {
	const batch = 100
	perBatch := store.ImportRows(benchDirectoryAt(0, batch))
	every := time.Duration(float64(time.Second) * float64(perBatch) / float64(rate))
	next := time.Now()
	for n := 0; ; n++ {
		// A batch once begun is finished, not cut off by the stop: cut
		// off at its commit it may be written without being counted.
		if err := store.ImportDirectory(context.WithoutCancel(ctx), pool, benchTenant, benchDirectoryAt(n*batch, batch)); err != nil {
			return fmt.Errorf("bench: directory writes: %w", err)
		}
		rows.Add(int64(perBatch))
		next = next.Add(every)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next)):
		}
	}
}

// benchDirectoryAt is n recipients from index from, in the writers' own
// groups ("load:<k>", 100 each).
func benchDirectoryAt(from, n int) *directory.Directory {
	dir := &directory.Directory{}
	dir.Groups = append(dir.Groups, directory.Group{Key: fmt.Sprintf("load:%d", from/100), Type: "load"})
	for i := from; i < from+n; i++ {
		uid := fmt.Sprintf("w%07d", i)
		dir.Recipients = append(dir.Recipients, directory.Recipient{UserID: uid, UserType: "STAFF", Active: true,
			Email: uid + "@bench.invalid", Devices: []directory.Device{{Kind: directory.DeviceFCM, Token: "fcm-" + uid}}})
		dir.Members = append(dir.Members, directory.Member{Group: fmt.Sprintf("load:%d", from/100), UserID: uid, Role: "STAFF"})
	}
	return dir
}
