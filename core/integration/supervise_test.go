package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// exitCode waits up to deadline for d to exit and returns its exit code
// and when the test saw it exit.
func (d *daemon) exitCode(t *testing.T, deadline time.Duration) (int, time.Time) {
	t.Helper()
	select {
	case <-d.done:
	case <-time.After(deadline):
		t.Fatalf("herald serve still runs %s later:\n%s", deadline, tail(d.Log(), 60))
	}
	exited := time.Now()
	return d.cmd.ProcessState.ExitCode(), exited
}

// TestDaemonSIGTERMMidBurst sends SIGTERM to `herald serve` while a burst
// of 2,000 deliveries goes out through two real plugins (sms to a
// recording Twilio-shaped peer, the recording sink for EMAIL): the
// daemon stops in order (the relay stops claiming, handoffs finish or are
// left due, listeners record their in-flight batches, plugins close) and
// exits 0 before its grace period ends. Started again, it sends the rest:
// every delivery SENT once in the database, and no provider received
// anything twice.
func TestDaemonSIGTERMMidBurst(t *testing.T) {
	const (
		recipients = 20
		events     = 50
		grace      = 15 * time.Second
		// slack is what the test allows past the grace period for the
		// process to be reaped and seen: the daemon itself exits non-zero
		// when its grace period runs out.
		slack = 5 * time.Second
	)
	b, d := startCrashBurst(t, recipients, events, "HERALD_SUPERVISOR_SHUTDOWN_GRACE="+grace.String())
	e := b.e
	var pids []int
	for _, st := range e.plugins() {
		pids = append(pids, st.PID)
	}
	e.until(60*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT'`) >= b.want/4
	}, func() string { return "a quarter of the burst sent: " + e.statusSummary() })
	inFlight := e.count(`SELECT count(*) FROM deliveries WHERE status = 'PUBLISHED'`)
	pending := e.count(`SELECT count(*) FROM event_outbox WHERE status = 'PENDING'`)
	termAt := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, exitedAt := d.exitCode(t, grace+slack)
	took := exitedAt.Sub(termAt)
	if code != 0 {
		t.Fatalf("herald serve exited %d after SIGTERM, want 0:\n%s", code, tail(d.Log(), 60))
	}
	log := d.Log()
	for _, want := range []string{"shutting down", "stopped"} {
		if !logHasLine(log, "[INFO]", want) {
			t.Errorf("herald log has no %q line", want)
		}
	}
	if strings.Contains(log, "stage failed") || strings.Contains(log, "grace period exceeded") {
		t.Errorf("an orderly stop logged a failure:\n%s", tail(log, 60))
	}
	for _, pid := range pids {
		if processAlive(pid) {
			t.Errorf("plugin process %d still runs after herald serve exited", pid)
		}
	}
	sentAtStop := e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT'`)
	handoffsAtStop := e.count(`SELECT count(*) FROM delivery_handoffs`)
	if err := <-b.enqueued; err != nil {
		t.Fatal(err)
	}

	e.start()
	e.waitAllSent(b.want, 120*time.Second)
	e.assertExactlyOnce(b.want)
	if n := e.count(`SELECT count(*) FROM event_outbox WHERE status <> 'PROCESSED'`); n != 0 {
		t.Fatalf("%d events not processed", n)
	}
	smsDup, emailDup := b.duplicates()
	if smsDup != 0 || emailDup != 0 {
		t.Errorf("after a graceful stop the providers received duplicates: SMS %d, EMAIL %d", smsDup, emailDup)
	}
	t.Logf("SIGTERM mid-burst: %d deliveries, %d PUBLISHED at the signal (%d events pending), %d SENT at the exit; exited 0 %s after it (grace %s)",
		b.want, inFlight, pending, sentAtStop, took.Round(time.Millisecond), grace)
	t.Logf("%d handoff rows left due at the stop; after the restart every delivery SENT once; provider duplicates SMS %d, EMAIL %d",
		handoffsAtStop, smsDup, emailDup)
}

// TestSupervisedDaemon follows one daemon through what its supervisor
// and readiness answer for:
//
//  1. EMAIL's only plugin is pinned to a checksum its binary does not
//     have (refused): /readyz says not ready and nothing else, the admin
//     readiness names the channel with no provider up; fixing the pin
//     makes the daemon ready.
//  2. Its liveness session and the relay's LISTEN session are killed
//     (pg_terminate_backend): retried inside their stages, the lock is
//     taken again and the relay listens again, on new sessions.
//  3. SIGTERM while the EMAIL plugin holds a batch past the grace period:
//     herald serve exits 1 with a line naming the stages still running;
//     started again, it sends the held deliveries, each once.
//  4. The liveness session killed again while the database refuses new
//     connections, so the lock cannot be taken again: past
//     supervisor.liveness_timeout the liveness stage fails, and herald
//     serve logs one line naming the stage and the error, stops the other
//     stages and exits non-zero.
func TestSupervisedDaemon(t *testing.T) {
	const grace = 2 * time.Second
	e := newEnv(t, "sent")
	e.daemonEnv = append(e.daemonEnv, "HERALD_SUPERVISOR_LIVENESS_TIMEOUT=2s", "HERALD_SUPERVISOR_SHUTDOWN_GRACE="+grace.String())
	e.lease = "2m" // a plugin's Send may take a minute: longer than the grace period
	e.writeConfig()
	ctx := context.Background()

	// 1. Readiness follows the providers.
	good := sha256File(t, filepath.Join(e.pluginDir, "herald-plugin-sink"))
	// While holdFile exists the EMAIL sink holds every batch it gets.
	holdFile := filepath.Join(e.dir, "hold")
	rulesWith := func(emailSum string) string {
		return strings.Replace(fmt.Sprintf(sinkRules, e.record, "sent"),
			fmt.Sprintf("channel \"EMAIL\" {\n  providers = [{ plugin = \"sink\", config = { record_file = \"%s\",", e.record),
			fmt.Sprintf("channel \"EMAIL\" {\n  providers = [{ plugin = \"sink\", checksum = %q, config = { hold_file = %q, record_file = \"%s\",",
				emailSum, holdFile, e.record), 1)
	}
	e.writeRules(rulesWith(strings.Repeat("0f", 32)))
	d := e.start()
	readyz := func() (int, string) {
		resp, err := http.Get(e.apiURL + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return 0, err.Error()
		}
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	if code, body := readyz(); code != http.StatusServiceUnavailable || body != `{"status":"not ready"}` {
		t.Errorf("/readyz with EMAIL refused = %d %s, want 503 {\"status\":\"not ready\"}", code, body)
	}
	code, st := e.adminReady()
	if code != http.StatusServiceUnavailable || len(st.Reasons) != 1 || st.Reasons[0] != "channel EMAIL: no provider up (sink refused)" {
		t.Errorf("admin ready with EMAIL refused = %d %q, want 503 [channel EMAIL: no provider up (sink refused)]", code, st.Reasons)
	}
	e.writeRules(rulesWith(good))
	e.until(30*time.Second, func() bool {
		code, _ := readyz()
		return code == http.StatusOK
	}, func() string {
		c, s := e.adminReady()
		return fmt.Sprintf("ready once EMAIL's pin is right: %d %q", c, s.Reasons)
	})
	if code, st := e.adminReady(); code != http.StatusOK || len(st.Reasons) != 0 {
		t.Errorf("admin ready after the fix = %d %q, want 200 and no reasons", code, st.Reasons)
	}

	// 2. A lost liveness session is taken again: no failure.
	livenessPID := func() int {
		var pid int
		err := e.db.Pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'herald liveness'`).Scan(&pid)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		return pid
	}
	kill := func(pid int) {
		var ok bool
		if err := e.db.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
			t.Fatalf("terminate session %d: %v %v", pid, ok, err)
		}
	}
	first := livenessPID()
	if first == 0 {
		t.Fatal("no liveness session in pg_stat_activity")
	}
	kill(first)
	e.until(30*time.Second, func() bool {
		return logHasLine(d.Log(), "liveness lock held again")
	}, func() string { return "the liveness lock taken again on a new session:\n" + tail(d.Log(), 10) })
	if pid := livenessPID(); pid == 0 || pid == first {
		t.Fatalf("liveness session pid %d after the lock was taken again, want a new one (was %d)", pid, first)
	}
	// So is the relay's LISTEN session: it listens again, polling
	// meanwhile.
	var listenPID int
	if err := e.db.Pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN herald_events'`).Scan(&listenPID); err != nil {
		t.Fatalf("the relay's LISTEN session: %v", err)
	}
	kill(listenPID)
	e.until(30*time.Second, func() bool {
		return logHasLine(d.Log(), "listen for notifications failed; polling until it is back", "herald_events")
	}, func() string { return "the relay notices its LISTEN session is gone:\n" + tail(d.Log(), 10) })
	e.until(30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN herald_events' AND pid <> $1`, listenPID) == 1
	}, func() string { return "the relay listens again on a new session" })

	// 3. SIGTERM while a Send outlasts the grace period.
	emailPID := e.plugin("EMAIL", "sink").PID
	if err := os.WriteFile(holdFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.client().Emit(ctx, reservation("held-1")); err != nil {
		t.Fatal(err)
	}
	e.until(30*time.Second, func() bool { return len(heldBy(t, holdFile+".held", emailPID)) > 0 },
		func() string { return "an EMAIL batch held inside the plugin: " + e.statusSummary() })
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, _ = d.exitCode(t, grace+10*time.Second)
	if code == 0 {
		t.Fatalf("herald serve exited 0 with a Send held past its grace period:\n%s", tail(d.Log(), 40))
	}
	if !logHasLine(d.Log(), "[ERROR]", "shutdown grace period exceeded", "listener") ||
		!logHasLine(d.Log(), "herald: shutdown: grace period 2s exceeded; still running: listener (not yet told to stop: plugin host, broker, liveness)") {
		t.Fatalf("herald log does not say the grace period ran out with the listener still running:\n%s", tail(d.Log(), 20))
	}
	for _, line := range strings.Split(d.Log(), "\n") {
		if strings.Contains(line, "grace period") {
			t.Logf("exit code %d; %s", code, strings.TrimSpace(line))
		}
	}
	if err := os.Remove(holdFile); err != nil {
		t.Fatal(err)
	}
	d = e.start()
	e.waitAllSent(deliveriesPerEvent, 60*time.Second)
	e.assertExactlyOnce(deliveriesPerEvent)

	// 4. The liveness lock lost for good: the database takes no new session.
	admin, err := pgx.Connect(ctx, testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	db := pgx.Identifier{e.db.Name}.Sanitize()
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+db+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before the admin connection closes and the database is dropped
		if _, err := admin.Exec(context.Background(), "ALTER DATABASE "+db+" ALLOW_CONNECTIONS true"); err != nil {
			t.Errorf("allow connections again: %v", err)
		}
	})
	kill(livenessPID())
	code, _ = d.exitCode(t, 60*time.Second)
	log := d.Log()
	if code == 0 {
		t.Fatalf("herald serve exited 0 after its liveness stage failed:\n%s", tail(log, 40))
	}
	var failed []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "stage failed; stopping the daemon") {
			failed = append(failed, line)
		}
	}
	if len(failed) != 1 || !strings.Contains(failed[0], "[ERROR]") || !strings.Contains(failed[0], "stage=liveness") ||
		!strings.Contains(failed[0], "liveness lock lost and not taken again") || !strings.Contains(failed[0], "supervisor.liveness_timeout 2s") {
		t.Fatalf("want one error line naming stage=liveness and its error, got %q:\n%s", failed, tail(log, 40))
	}
	if !logHasLine(log, "herald: stage liveness failed: liveness lock lost") {
		t.Errorf("herald's last words do not name the failed stage:\n%s", tail(log, 10))
	}
	t.Logf("exit code %d; %s", code, strings.TrimSpace(failed[0]))
}
