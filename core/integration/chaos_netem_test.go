//go:build chaos

package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk/producer"
)

// Network fault figures (scripts/test-chaos.sh; docs/reliability.md
// quotes them): the load, and how long each fault lasts.
const (
	netemRate      = 10 // events per second, 9 deliveries each
	netemDelay     = 200 * time.Millisecond
	netemFaultHold = 20 * time.Second // delay and loss
	netemPartition = 30 * time.Second
	// netemDrain bounds the wait, after a fault heals, for every delivery
	// to be SENT.
	netemDrain = 3 * time.Minute
	// netemDupBound is the provider-side duplicates one fault may cause:
	// one in-flight batch per channel (3 channels, the sink's MaxBatch of
	// 100), the bound crash recovery keeps.
	netemDupBound = 3 * 100
)

// TestChaosNetemFaults runs one herald serve in a network namespace of its
// own, its PostgreSQL and RabbitMQ in another, joined by a veth pair, and
// under a steady load of events (written by a producer into the outbox)
// injects, one after the other, between herald and the broker and then
// between herald and the database: a 200 ms delay each way, 10 % packet
// loss each way, and a 30 s partition (every packet dropped). After each
// fault heals it waits for every delivery to be SENT and checks that each
// is SENT exactly once in the database (one successful attempt), counts
// the deliveries the provider (the recording sink plugin) received more
// than once, and checks that the daemon never exited (same PID
// throughout). The figures are logged as a table at the end.
func TestChaosNetemFaults(t *testing.T) {
	lab := newNetLab(t)
	pg := testenv.PrivatePostgres(t, testenv.PGOptions{Listen: []string{lab.serverIP}, Netns: lab.serverNS,
		Clients: []string{lab.heraldIP + "/32"}})
	mq := testenv.PrivateRabbitMQ(t, testenv.RabbitOptions{Listen: []string{lab.serverIP}, Netns: lab.serverNS})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pgPass := testenv.RandomName("netem-")
	su, err := pgx.Connect(ctx, pg.SuperuserDSN("postgres"))
	if err != nil {
		t.Fatalf("connect to the private PostgreSQL over its socket: %v", err)
	}
	for _, q := range []string{
		fmt.Sprintf(`CREATE ROLE herald LOGIN CREATEROLE PASSWORD '%s'`, pgPass),
		`CREATE DATABASE herald OWNER herald`,
	} {
		if _, err := su.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	su.Close(ctx)
	// The test (producer, checks) reaches the database over its socket;
	// herald over the veth.
	socketURL := fmt.Sprintf("postgres://herald@/herald?host=%s&port=%d&sslmode=disable", pg.SocketDir, pg.Port)
	heraldURL := fmt.Sprintf("postgres://herald:%s@%s:%d/herald?sslmode=disable", pgPass, lab.serverIP, pg.Port)
	// The API's and the superadmin's logins, which herald db roles makes
	// from these URLs' users and passwords.
	apiURL := strings.Replace(heraldURL, "//herald:", "//herald_api_login:", 1)
	adminURL := strings.Replace(heraldURL, "//herald:", "//herald_admin_login:", 1)
	cliEnv := append(os.Environ(), "HERALD_CONFIG=", "HERALD_DATABASE_URL="+socketURL, "HERALD_DATABASE_API_URL="+apiURL, "HERALD_DATABASE_ADMIN_URL="+adminURL)
	for _, args := range [][]string{{"db", "roles", "--admin-url", pg.SuperuserDSN("herald"), "--owner", "herald"}, {"migrate", "up"}} {
		cmd := exec.CommandContext(ctx, heraldBinary(t), args...)
		cmd.Env = cliEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("herald %v: %v\n%s", args, err, out)
		}
	}
	pool, err := pgxpool.New(ctx, socketURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	e := &env{t: t, dir: t.TempDir(), tenant: "acme", db: &testenv.DB{URL: heraldURL, Name: "herald", Pool: pool, APIURL: apiURL, AdminURL: adminURL},
		broker: &testenv.Broker{URL: fmt.Sprintf("amqp://guest:guest@%s:%d/", lab.serverIP, mq.Port)}}
	e.prepare("sent")
	d := e.startInNetns(lab.heraldNS)
	pid := d.cmd.Process.Pid
	t.Logf("chaos: herald serve PID %d in %s", pid, lab.heraldNS)

	faults := []fault{
		{name: "delay 200ms", match: []string{"-j", "NFQUEUE", "--queue-num", "1", "--queue-bypass"}, hold: netemFaultHold, delay: netemDelay},
		{name: "loss 10%", match: []string{"-m", "statistic", "--mode", "random", "--probability", "0.1", "-j", "DROP"}, hold: netemFaultHold},
		{name: "partition 30s", match: []string{"-j", "DROP"}, hold: netemPartition},
	}
	targets := []struct {
		name string
		port int
	}{{"broker", mq.Port}, {"database", pg.Port}}

	var results []netemResult
	var events int
	dupsBefore := 0
	for _, target := range targets {
		for _, f := range faults {
			name := target.name + " " + f.name
			ok := t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
				r := netemResult{name: name}
				l := startNetemLoad(e, strings.NewReplacer(" ", "-", "%", "pct").Replace(name))
				// Steady first: the phase's own events flow end to end.
				e.until(60*time.Second, func() bool { return e.sentOf(l.prefix) >= 20*deliveriesPerEvent },
					func() string { return "deliveries SENT before the fault: " + e.statusSummary() })
				logFrom := len(d.Log())
				sentAtInject := e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT'`)
				heal := lab.inject(f, target.port)
				select {
				case <-d.done:
					heal()
					t.Fatalf("herald serve exited during %s:\n%s", name, tail(d.Log(), 60))
				case <-time.After(f.hold):
				}
				r.matched = matchedPackets(lab.packets())
				heal()
				healed := time.Now()
				r.sentDuring = e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT'`) - sentAtInject
				// Recovery: every delivery of the events written before the
				// fault healed is SENT.
				backlog := l.count()
				e.until(netemDrain, func() bool {
					return e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT' AND starts_with(event_id, $1) AND event_id < $2`,
						l.prefix, fmt.Sprintf("%s%05d", l.prefix, backlog)) == backlog*deliveriesPerEvent
				}, func() string {
					return "deliveries of the events written before the fault healed SENT: " + e.statusSummary()
				})
				r.recover = time.Since(healed)
				// Events keep coming for a while after the fault; then the
				// backlog must drain.
				e.until(60*time.Second, func() bool { return l.count() >= l.countAt(healed)+5*netemRate },
					func() string { return "events written after the fault healed" })
				if r.events, err = l.stop(); err != nil {
					t.Fatalf("chaos: the producer could not write an event: %v", err)
				}
				events += r.events
				want := events * deliveriesPerEvent
				e.waitAllSent(want, netemDrain)
				e.assertExactlyOnce(want)
				r.said = warnings(d.Log()[logFrom:])
				dups := duplicates(e.sinkRecords())
				r.providerDups = dups - dupsBefore
				dupsBefore = dups
				r.deliveries = r.events * deliveriesPerEvent
				select {
				case <-d.done:
					t.Fatalf("herald serve exited during %s:\n%s", name, tail(d.Log(), 60))
				default:
				}
				if d.cmd.Process.Pid != pid || syscall.Kill(pid, 0) != nil {
					t.Fatalf("herald serve PID %d is gone", pid)
				}
				if r.providerDups > netemDupBound {
					t.Errorf("%s: the provider received %d deliveries more than once, more than one in-flight batch per channel (%d)", name, r.providerDups, netemDupBound)
				}
				t.Logf("chaos: %s: %d events, %d deliveries SENT exactly once, %d provider-side duplicates; %d SENT during the fault, the backlog SENT %s after it healed; herald PID %d unchanged; herald warned: %s",
					name, r.events, r.deliveries, r.providerDups, r.sentDuring, r.recover.Round(100*time.Millisecond), pid, r.said)
				results = append(results, r)
			})
			if !ok {
				t.FailNow()
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| fault (herald ↔ server, both ways) | events | deliveries SENT exactly once | provider duplicates | SENT during the fault | backlog SENT after heal | packets hit |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %.1f s | %d |\n", r.name, r.events, r.deliveries, r.providerDups, r.sentDuring, r.recover.Seconds(), r.matched)
	}
	t.Logf("chaos: herald serve PID %d ran through every fault without a restart\n%s", pid, b.String())
}

// netemResult is one fault's figures.
type netemResult struct {
	name               string
	events, deliveries int
	providerDups       int
	sentDuring         int
	recover            time.Duration
	matched            int64
	said               string
}

// warnings summarises the WARN and ERROR lines of a herald log: how many,
// and the distinct messages (up to six).
func warnings(log string) string {
	var n int
	seen := map[string]bool{}
	var msgs []string
	for _, line := range strings.Split(log, "\n") {
		i := strings.Index(line, "[WARN]")
		if i < 0 {
			i = strings.Index(line, "[ERROR]")
		}
		if i < 0 {
			continue
		}
		n++
		msg := strings.TrimSpace(line[i:])
		if j := strings.Index(msg, "="); j > 0 {
			if k := strings.LastIndex(msg[:j], " "); k > 0 {
				msg = msg[:k]
			}
		}
		if !seen[msg] && len(msgs) < 6 {
			seen[msg] = true
			msgs = append(msgs, strconv.Quote(msg))
		}
	}
	if n == 0 {
		return "nothing"
	}
	return fmt.Sprintf("%d lines: %s", n, strings.Join(msgs, ", "))
}

// matchedPackets sums the packet counters of the fault rules (the lines
// of iptables -L -v -x that target DROP or NFQUEUE).
func matchedPackets(listing string) int64 {
	var n int64
	for _, line := range strings.Split(listing, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && (f[2] == "DROP" || f[2] == "NFQUEUE") {
			var v int64
			fmt.Sscan(f[0], &v)
			n += v
		}
	}
	return n
}

// duplicates counts the deliveries the sink received more than once (each
// extra copy counts).
func duplicates(recs map[string]int) int {
	n := 0
	for _, c := range recs {
		if c > 1 {
			n += c - 1
		}
	}
	return n
}

// sentOf counts the SENT deliveries of the events whose id starts with
// prefix.
func (e *env) sentOf(prefix string) int {
	return e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT' AND starts_with(event_id, $1)`, prefix)
}

// netemLoad writes netemRate events a second into the outbox, each in its
// own transaction, as a producer sharing herald's database does (over the
// socket: the faults are between herald and its servers, not the
// producer's).
type netemLoad struct {
	prefix string
	n      atomic.Int64
	mu     sync.Mutex
	at     []time.Time
	stopc  chan struct{}
	done   chan struct{}
	err    error
}

func startNetemLoad(e *env, prefix string) *netemLoad {
	l := &netemLoad{prefix: prefix + "-", stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(time.Second / netemRate)
		defer tick.Stop()
		for {
			select {
			case <-l.stopc:
				return
			case <-tick.C:
			}
			ev := reservation(fmt.Sprintf("%s%05d", l.prefix, l.n.Load()))
			ev.TenantID = e.tenant
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := pgx.BeginFunc(ctx, e.db.Pool, func(tx pgx.Tx) error { return producer.Enqueue(ctx, tx, ev) })
			cancel()
			if err != nil {
				l.mu.Lock()
				l.err = err
				l.mu.Unlock()
				continue // the same event_id again on the next tick
			}
			l.mu.Lock()
			l.at = append(l.at, time.Now())
			l.mu.Unlock()
			l.n.Add(1)
		}
	}()
	return l
}

func (l *netemLoad) count() int { return int(l.n.Load()) }

// countAt is how many events had been written at t.
func (l *netemLoad) countAt(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, at := range l.at {
		if !at.After(t) {
			n++
		}
	}
	return n
}

// stop ends the load and returns how many events it wrote, and the last
// write error (the producer's path has no fault, so there should be none).
func (l *netemLoad) stop() (int, error) {
	close(l.stopc)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count(), l.err
}

// startInNetns runs herald serve inside network namespace ns (ip netns
// exec, which execs herald: the PID is the daemon's) and waits until its
// API, reached from inside ns, is ready.
func (e *env) startInNetns(ns string) *daemon {
	e.t.Helper()
	d := &daemon{log: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	d.cmd = exec.Command("ip", "netns", "exec", ns, heraldBinary(e.t), "serve", "--config", e.cfgPath)
	d.cmd.Env = append(append(os.Environ(), e.daemonEnv...), e.extraEnv...)
	d.cmd.Stdout = lockedWriter{d.mu, d.log}
	d.cmd.Stderr = lockedWriter{d.mu, d.log}
	if err := d.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	e.t.Cleanup(func() {
		d.stop(syscall.SIGTERM)
		if e.t.Failed() {
			e.t.Logf("herald log:\n%s", tail(d.Log(), 200))
		}
	})
	hc := netnsHTTP(ns)
	testenv.Eventually(e.t, 60*time.Second, func() bool {
		select {
		case <-d.done:
			e.t.Fatalf("herald exited during start:\n%s", d.Log())
		default:
		}
		resp, err := hc.Get(e.apiURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "herald serve ready at %s in %s", e.apiURL, ns)
	return d
}
