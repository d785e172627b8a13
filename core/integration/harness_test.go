// Package integration holds black-box tests: a real `herald serve` process,
// real plugin binaries, a real PostgreSQL database and RabbitMQ vhost.
package integration

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/api/openapitest"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk/producer"
	"github.com/jackc/pgx/v5"
)

var (
	heraldOnce sync.Once
	heraldBin  string
	heraldDir  string
)

func heraldBinary(t *testing.T) string {
	t.Helper()
	heraldOnce.Do(func() {
		dir, err := os.MkdirTemp("", "herald-bin-")
		if err != nil {
			t.Fatal(err)
		}
		heraldDir = dir
		heraldBin = testenv.BuildHerald(t, dir)
	})
	if heraldBin == "" {
		t.Fatal("herald binary was not built")
	}
	return heraldBin
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// env is one test's world: database, vhost, plugins, rules, config.
type env struct {
	t        *testing.T
	db       *testenv.DB
	broker   *testenv.Broker
	dir      string
	cfgPath  string
	rulesDir string
	record   string
	apiURL   string
	admin    string
	apiKey   string
	tenant   string
	// adminToken is the admin API's token, read by the daemon (and the
	// CLI, through the config) from adminTokenFile.
	adminToken     string
	adminTokenFile string
	// pluginDir is the daemon's plugins.dir (writeConfig puts it in herald.hcl).
	pluginDir string
	// lease is the daemon's retry.lease (default 5s); a listener gives a
	// plugin's Send half of it.
	lease string
	// reclaim is the daemon's publisher.reclaim_after (default 20s).
	reclaim string
	// watch is the daemon's plugins.watch: hot-swap a binary replaced in
	// pluginDir without `herald plugins reload`.
	watch bool
	// pluginEnv is the daemon's plugins.env.
	pluginEnv []string
	// daemonEnv is added to the environment herald serve runs with.
	daemonEnv []string
	// cfgDatabaseURL and cfgAMQPURL, when set, are written as
	// database.url and amqp.url instead of the test database's and
	// vhost's URLs (a secret reference, say).
	cfgDatabaseURL, cfgAMQPURL string
	// extraEnv is added to the environment of the daemon and of e.cli.
	extraEnv []string
	// sandbox is plugins.sandbox (default auto) and sandboxWrite
	// plugins.sandbox_write (nil: the temporary directory, where the
	// tests' plugins write their records).
	sandbox      string
	sandboxWrite []string
}

// sinkRules is a rules file whose channels all go to the recording sink.
const sinkRules = `
defaults {
  time_zone = "UTC"
  retry {
    max_attempts = 5
    initial      = "200ms"
    max          = "1s"
  }
  user_type "CUSTOMER" {
    enabled = ["WEBSOCKET", "EMAIL", "PUSH"]
  }
}

channel "EMAIL" {
  providers = [{ plugin = "sink", config = { record_file = "%[1]s", outcome = "%[2]s" } }]
}
channel "PUSH" {
  providers = [{ plugin = "sink", config = { record_file = "%[1]s", outcome = "%[2]s" } }]
}
channel "WEBSOCKET" {
  best_effort = true
  providers   = [{ plugin = "sink", config = { record_file = "%[1]s", outcome = "%[2]s" } }]
}

event "RESERVATION_REQUESTED" {
  shared = true
  audience {
    group = "restaurant:{{ .payload.restaurant_id }}"
    roles = ["MANAGER", "CHEF", "WAITER"]
  }
  mandatory   = ["WEBSOCKET"]
  optional    = ["EMAIL", "PUSH"]
  quiet_hours = "ignore"
  inbox {
    title = "New reservation"
    body  = "{{ .payload.customer_name }}, {{ .payload.pax }} people"
  }
  template "EMAIL" {
    subject = "New reservation: {{ .payload.customer_name }}"
    body    = "{{ .payload.customer_name }} asked for {{ .payload.pax }}."
  }
  payload_schema = <<JSON
{
  "type": "object",
  "required": ["restaurant_id", "customer_name", "pax"],
  "properties": {
    "restaurant_id": {"type": ["string", "integer"]},
    "customer_name": {"type": "string", "minLength": 1},
    "pax": {"type": "integer", "minimum": 1}
  }
}
JSON
}
`

// staff is the directory: restaurant 5 with three staff members.
var staff = directory.Directory{
	Recipients: []directory.Recipient{
		{UserID: "staff1", UserType: "STAFF", Email: "s1@example.com", Active: true},
		{UserID: "staff2", UserType: "STAFF", Email: "s2@example.com", Active: true},
		{UserID: "staff3", UserType: "STAFF", Email: "s3@example.com", Active: true},
	},
	Groups:  []directory.Group{{Key: "restaurant:5", Type: "restaurant"}},
	Members: []directory.Member{{Group: "restaurant:5", UserID: "staff1", Role: "MANAGER"}, {Group: "restaurant:5", UserID: "staff2", Role: "CHEF"}, {Group: "restaurant:5", UserID: "staff3", Role: "WAITER"}},
}

// deliveriesPerEvent is what one RESERVATION_REQUESTED yields for staff.
const deliveriesPerEvent = 9

func newEnv(t *testing.T, outcome string) *env {
	t.Helper()
	e := &env{t: t, db: testenv.Postgres(t), broker: testenv.RabbitMQ(t), dir: t.TempDir(), tenant: "acme"}
	e.prepare(outcome)
	return e
}

// prepare writes the rules and the config and fills the database (migrated)
// with the tenant, its API key and the staff directory.
func (e *env) prepare(outcome string) {
	t := e.t
	t.Helper()
	e.record = filepath.Join(e.dir, "sink.jsonl")
	e.rulesDir = filepath.Join(e.dir, "rules")
	if err := os.MkdirAll(e.rulesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.writeRules(fmt.Sprintf(sinkRules, e.record, outcome))
	e.pluginDir = testenv.PluginBinaries(t, "sink")
	e.apiURL, e.admin = "http://"+freePort(t), "http://"+freePort(t)
	e.cfgPath = filepath.Join(e.dir, "herald.hcl")
	e.adminToken = testenv.RandomName("admin-token-")
	e.adminTokenFile = filepath.Join(e.dir, "admin.token")
	if err := os.WriteFile(e.adminTokenFile, []byte(e.adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.writeConfig()
	ctx := context.Background()
	if err := store.EnsureTenant(ctx, e.db.Pool, e.tenant, "Acme"); err != nil {
		t.Fatal(err)
	}
	key, err := store.CreateAPIKey(ctx, e.db.Pool, e.tenant, "test", "")
	if err != nil {
		t.Fatal(err)
	}
	e.apiKey = key
	if err := store.ImportDirectory(ctx, e.db.Pool, e.tenant, &staff); err != nil {
		t.Fatal(err)
	}
}

// writeConfig writes herald.hcl from the env's database, vhost, listen
// addresses and plugin directory.
func (e *env) writeConfig() {
	e.t.Helper()
	cfg := fmt.Sprintf(`
database {
  url       = %q
  api_url   = %q
  admin_url = %q
}
amqp { url = %q }
http {
  listen           = %q
  admin_listen     = %q
  admin_token_file = %q
}
plugins {
  dir   = %q
  watch = %t
  env   = [%s]
  sandbox       = %q
  sandbox_write = [%s]
}
rules = ["rules/*.hcl"]
relay { poll_interval = "200ms" }
publisher {
  poll_interval = "200ms"
  reclaim_after = %q
}
retry {
  poll_interval = "200ms"
  lease         = %q
}
log { level = "debug" }
`, cmp.Or(e.cfgDatabaseURL, e.db.URL), e.db.APIURL, e.db.AdminURL, cmp.Or(e.cfgAMQPURL, e.broker.URL), strings.TrimPrefix(e.apiURL, "http://"),
		strings.TrimPrefix(e.admin, "http://"), e.adminTokenFile, e.pluginDir, e.watch, quoteList(e.pluginEnv),
		cmp.Or(e.sandbox, "auto"), quoteList(e.pluginsWritable()),
		cmp.Or(e.reclaim, "20s"), cmp.Or(e.lease, "5s"))
	if err := os.WriteFile(e.cfgPath, []byte(cfg), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// pluginsWritable is plugins.sandbox_write: e.sandboxWrite, or the
// temporary directory.
func (e *env) pluginsWritable() []string {
	if e.sandboxWrite != nil {
		return e.sandboxWrite
	}
	return []string{os.TempDir()}
}

// quoteList is ss as the inside of an HCL list of strings.
func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

func (e *env) writeRules(body string) {
	e.t.Helper()
	p := filepath.Join(e.rulesDir, "rules.hcl")
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		e.t.Fatal(err)
	}
}

// daemon is one running `herald serve`.
type daemon struct {
	cmd  *exec.Cmd
	log  *bytes.Buffer
	mu   *sync.Mutex
	done chan struct{}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Log returns what the daemon logged so far.
func (d *daemon) Log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// start runs herald serve and waits until its API is ready.
func (e *env) start() *daemon {
	e.t.Helper()
	// Every request a test makes to this daemon through http.DefaultClient
	// (or producer.Client) is checked against the OpenAPI document.
	openapitest.Watch(e.t, e.apiURL, e.admin)
	d := &daemon{log: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	d.cmd = exec.Command(heraldBinary(e.t), "serve", "--config", e.cfgPath)
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
	testenv.Eventually(e.t, 60*time.Second, func() bool {
		select {
		case <-d.done:
			e.t.Fatalf("herald exited during start:\n%s", d.Log())
		default:
		}
		resp, err := http.Get(e.apiURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return true
		}
		// A channel with no provider up (a test's refused plugin) keeps
		// the daemon not ready; it runs all the same.
		code, st := e.adminReady()
		return code == http.StatusServiceUnavailable && onlyChannelReasons(st.Reasons)
	}, "herald serve ready at %s", e.apiURL)
	return d
}

// onlyChannelReasons reports whether every readiness reason is a channel
// with no provider up.
func onlyChannelReasons(reasons []string) bool {
	for _, r := range reasons {
		if !strings.HasPrefix(r, "channel ") {
			return false
		}
	}
	return len(reasons) > 0
}

// stop signals the daemon and waits for it to exit.
func (d *daemon) stop(sig syscall.Signal) {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(sig)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (e *env) client() *producer.Client {
	return &producer.Client{BaseURL: e.apiURL, APIKey: e.apiKey}
}

func reservation(id string) producer.Event {
	return producer.Event{EventID: id, Type: "RESERVATION_REQUESTED",
		Payload: json.RawMessage(`{"restaurant_id": 5, "customer_name": "Rossi", "pax": 4}`)}
}

// count runs a count query.
func (e *env) count(q string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.db.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// strings runs a query of one text column and returns its rows.
func (e *env) strings(q string, args ...any) []string {
	e.t.Helper()
	rows, err := e.db.Pool.Query(context.Background(), q, args...)
	if err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	return out
}

// waitAllSent waits until want deliveries exist and all are SENT.
func (e *env) waitAllSent(want int, deadline time.Duration) {
	e.t.Helper()
	testenv.Eventually(e.t, deadline, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT'`) == want
	}, "%d deliveries SENT (now: %s)", want, e.statusSummary())
}

func (e *env) statusSummary() string {
	rows, err := e.db.Pool.Query(context.Background(), `SELECT status, count(*) FROM deliveries GROUP BY status ORDER BY status`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var s string
		var n int
		_ = rows.Scan(&s, &n)
		parts = append(parts, fmt.Sprintf("%s=%d", s, n))
	}
	return strings.Join(parts, " ")
}

// assertExactlyOnce checks the database's exactly-once record: every
// delivery SENT with exactly one successful attempt.
func (e *env) assertExactlyOnce(want int) {
	e.t.Helper()
	if n := e.count(`SELECT count(*) FROM deliveries`); n != want {
		e.t.Fatalf("deliveries = %d, want %d", n, want)
	}
	if n := e.count(`SELECT count(*) FROM deliveries WHERE status <> 'SENT'`); n != 0 {
		e.t.Fatalf("%d deliveries not SENT: %s", n, e.statusSummary())
	}
	if n := e.count(`SELECT count(*) FROM (SELECT delivery_id FROM delivery_attempt_log WHERE outcome = 'sent'
		GROUP BY delivery_id HAVING count(*) <> 1) x`); n != 0 {
		e.t.Fatalf("%d deliveries have more than one successful attempt", n)
	}
	if n := e.count(`SELECT count(DISTINCT delivery_id) FROM delivery_attempt_log WHERE outcome = 'sent'`); n != want {
		e.t.Fatalf("deliveries with a sent attempt = %d, want %d", n, want)
	}
}

// completeLines returns the non-empty lines of a record file that its
// writers have finished: the sink plugins append a record with one write,
// and a read racing that write may see its first part, which is left for
// the next read.
func completeLines(data []byte) []string {
	done := data[:bytes.LastIndexByte(data, '\n')+1]
	var lines []string
	for _, line := range strings.Split(string(done), "\n") {
		if line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}

// sinkRecords reads what the sink plugin received, keyed by delivery id.
func (e *env) sinkRecords() map[string]int {
	e.t.Helper()
	data, err := os.ReadFile(e.record)
	if err != nil && !os.IsNotExist(err) {
		e.t.Fatal(err)
	}
	got := map[string]int{}
	for _, line := range completeLines(data) {
		var rec struct {
			DeliveryID string `json:"delivery_id"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			e.t.Fatalf("sink record %q: %v", line, err)
		}
		got[rec.DeliveryID]++
	}
	return got
}
