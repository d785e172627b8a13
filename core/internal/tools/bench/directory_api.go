package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/httpguard"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/store"
)

// DirectoryAPIScenario sizes the directory API benchmark: the service
// API's batch upserts and single upserts, served in this process.
type DirectoryAPIScenario struct {
	// Recipients is how many recipients the batches write, each with one
	// device and one membership (groups of 100).
	Recipients int `json:"recipients"`
	// BatchClients send batches at the same time.
	BatchClients int `json:"batch_clients"`
	// Writers send single upserts (PUT /v1/recipients/{user_id}) at the
	// same time, Puts each.
	Writers int `json:"writers"`
	Puts    int `json:"puts_per_writer"`
	// Readers read GET /v1/me/preferences at the same time, each as a
	// random user (a token each), Reads each.
	Readers int `json:"readers"`
	Reads   int `json:"reads_per_reader"`
}

// DirectoryAPIResult is what RunDirectoryAPI measured.
type DirectoryAPIResult struct {
	Scenario DirectoryAPIScenario `json:"scenario"`
	// BatchRows counts every row the batches wrote (recipients, devices,
	// members, groups), BatchRowsPerS their rate, Batches the requests.
	BatchRows     int           `json:"batch_rows"`
	Batches       int           `json:"batches"`
	BatchElapsed  time.Duration `json:"batch_elapsed_ns"`
	BatchRowsPerS float64       `json:"batch_rows_per_sec"`
	// Put is the latency of single upserts under Writers writers.
	Put     LatencySummary `json:"put"`
	PutPerS float64        `json:"puts_per_sec"`
	// MePreferences is the latency of GET /v1/me/preferences under
	// Readers readers.
	MePreferences     LatencySummary `json:"me_preferences"`
	MePreferencesPerS float64        `json:"me_preferences_per_sec"`
	// Failed counts requests not answered 200 or 201.
	Failed int    `json:"failed"`
	Detail string `json:"detail,omitempty"`
}

// RunDirectoryAPI serves the public API in this process on a database of
// its own and measures POST /v1/recipients:batch (JSON lines of 2,400
// recipients with their memberships and devices, and their groups: 4,824
// entries, under the default limit of 5,000) from BatchClients clients until Recipients
// are written, then Writers writers each sending Puts single upserts of
// random existing recipients (p50/p99), then Readers readers each reading
// GET /v1/me/preferences Reads times. In steps: set up (database, tenant,
// keys, the API served), batches, single upserts, preference reads.
func RunDirectoryAPI(ctx context.Context, env Env, sc DirectoryAPIScenario) (DirectoryAPIResult, error) {
	res := DirectoryAPIResult{Scenario: sc}
	r := &directoryAPIRun{sc: sc, logf: env.Log, res: &res}
	if r.logf == nil {
		r.logf = func(string, ...any) {}
	}
	defer r.close()
	if err := r.setUp(ctx, env); err != nil {
		return res, err
	}
	r.batches(ctx)
	r.puts(ctx)
	if err := r.preferenceReads(ctx); err != nil {
		return res, err
	}
	res.Failed = int(r.failed.Load())
	if s, ok := r.firstErr.Load().(string); ok {
		res.Detail = s
	}
	return res, ctx.Err()
}

// directoryAPIRun is one RunDirectoryAPI under way: what its steps set up
// and share, and the cleanups that undo them, run in reverse order by
// close.
type directoryAPIRun struct {
	sc   DirectoryAPIScenario
	logf func(format string, args ...any)
	res  *DirectoryAPIResult

	// Set up by setUp.
	daemon config.Daemon
	key    string         // the service API key
	tk     store.TokenKey // signs the readers' user tokens
	base   string         // the served API's URL
	cl     *http.Client

	// failed counts the requests not answered 200 or 201; firstErr
	// keeps the first one's error.
	failed   atomic.Int64
	firstErr atomic.Value

	undo // what the steps set up, undone by close
}

// setUp makes the run's database with the benchmark tenant, its API key
// and a token key, and serves the public API on a loopback port.
func (r *directoryAPIRun) setUp(ctx context.Context, env Env) error {
	name := fmt.Sprintf("herald_bench_directory_api_%d_%d", time.Now().Unix(), os.Getpid())
	dbURL, pool, drop, err := heraldDatabase(ctx, env.AdminDatabaseURL, name, 4, 0)
	if err != nil {
		return err
	}
	r.onClose(func() { pool.Close(); _ = drop() })
	if err := store.EnsureTenant(ctx, pool, benchTenant, "Benchmark"); err != nil {
		return err
	}
	if r.key, err = store.CreateAPIKey(ctx, pool, benchTenant, "bench", ""); err != nil {
		return err
	}
	d := config.DefaultDaemon()
	d.Database.URL = dbURL
	// The benchmark's own database, one login role: the pools log in as
	// its owner, as the inbox benchmark's do.
	d.Database.AllowOwnerLogin = true
	d.HTTP.RateLimit = httpguard.RateLimits{} // the benchmark is the only client
	pools, err := server.OpenPools(ctx, d.Database)
	if err != nil {
		return err
	}
	r.onClose(pools.Close)
	// The deployment's own token audience, as the daemon resolves it.
	if d.Auth.Audience, err = auth.ResolveAudience(ctx, pools.Worker, d.Auth); err != nil {
		return err
	}
	r.daemon = d
	if r.tk, err = directoryTokenKey(ctx, pool); err != nil {
		return err
	}
	rs, err := directoryRules()
	if err != nil {
		return err
	}
	pub, err := server.PublicAPI(ctx, d, pools, nil, func() *rules.RuleSet { return rs }, hclog.NewNullLogger())
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: pub.Handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	r.onClose(func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = srv.Shutdown(c)
	})
	r.base = "http://" + ln.Addr().String()
	conns := max(r.sc.BatchClients, r.sc.Writers, r.sc.Readers)
	r.cl = &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, DisableCompression: true}}
	r.onClose(r.cl.CloseIdleConnections)
	return nil
}

// fail counts a failed request and keeps the first one's error.
func (r *directoryAPIRun) fail(format string, args ...any) {
	r.failed.Add(1)
	r.firstErr.CompareAndSwap(nil, fmt.Sprintf(format, args...))
}

// sendAs sends one request with bearer as its credential; an answer other
// than 200 or 201 is an error.
func (r *directoryAPIRun) sendAs(ctx context.Context, bearer, method, path, ctype string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", ctype)
	resp, err := r.cl.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 && resp.StatusCode != 201 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, clip(b))
	}
	return resp.StatusCode, nil
}

// send sends one request with the service API key.
func (r *directoryAPIRun) send(ctx context.Context, method, path, ctype string, body []byte) (int, error) {
	return r.sendAs(ctx, r.key, method, path, ctype, body)
}

// batches writes the Recipients in batches of 2,400 (4,824 entries, under
// the default limit of 5,000: their groups, then per recipient its entry,
// with a device, and its membership), BatchClients at a time.
func (r *directoryAPIRun) batches(ctx context.Context) {
	sc, res := r.sc, r.res
	const perBatch = 2400
	batches := (sc.Recipients + perBatch - 1) / perBatch
	r.logf("directory api: %d batches of %d recipients from %d clients", batches, perBatch, sc.BatchClients)
	var next atomic.Int64
	var rows atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range sc.BatchClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b := int(next.Add(1)) - 1
				if b >= batches || ctx.Err() != nil {
					return
				}
				from, to := b*perBatch, min((b+1)*perBatch, sc.Recipients)
				body, n := batchBody(from, to)
				if _, err := r.send(ctx, http.MethodPost, "/v1/recipients:batch?mode=all", "application/x-ndjson", body); err != nil {
					r.fail("%v", err)
					continue
				}
				rows.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	res.BatchElapsed, res.Batches, res.BatchRows = time.Since(start), batches, int(rows.Load())
	res.BatchRowsPerS = float64(res.BatchRows) / res.BatchElapsed.Seconds()
}

// puts sends single upserts of random existing recipients, Writers at a
// time.
func (r *directoryAPIRun) puts(ctx context.Context) {
	sc, res := r.sc, r.res
	r.logf("directory api: %d writers × %d single upserts", sc.Writers, sc.Puts)
	lat := &Latencies{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for w := range sc.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range sc.Puts {
				uid := fmt.Sprintf("r%07d", rng.IntN(max(res.BatchRows/3, 1)))
				body, _ := json.Marshal(map[string]any{"user_type": "STAFF", "email": uid + "@bench.invalid", "locale": []string{"en", "it"}[i%2],
					"devices": []map[string]string{{"kind": "fcm", "token": "fcm-" + uid}}})
				t0 := time.Now()
				_, err := r.send(ctx, http.MethodPut, "/v1/recipients/"+uid, "application/json", body)
				el := time.Since(t0)
				if err != nil {
					r.fail("%v", err)
					continue
				}
				mu.Lock()
				lat.Add(el)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.Put = summarize(lat)
	res.PutPerS = float64(lat.Count()) / time.Since(start).Seconds()
}

// preferenceReads reads GET /v1/me/preferences, Readers at a time, each
// request as a random user of the batches (a user token each, issued up
// front).
func (r *directoryAPIRun) preferenceReads(ctx context.Context) error {
	sc, res, d := r.sc, r.res, r.daemon
	r.logf("directory api: %d readers × %d GET /v1/me/preferences", sc.Readers, sc.Reads)
	users := min(max(res.BatchRows/3, 1), 1000)
	toks := make([]string, users)
	for i := range toks {
		var err error
		if toks[i], err = auth.Issue(r.tk, d.Auth.Audience, auth.User{UserID: fmt.Sprintf("r%07d", i*max(res.BatchRows/3/users, 1)), UserType: "STAFF"},
			d.Auth.MaxTokenLifetime, time.Now()); err != nil {
			return err
		}
	}
	lat := &Latencies{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for rd := range sc.Readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(rd), 2))
			for range sc.Reads {
				t0 := time.Now()
				_, err := r.sendAs(ctx, toks[rng.IntN(len(toks))], http.MethodGet, "/v1/me/preferences", "application/json", nil)
				el := time.Since(t0)
				if err != nil {
					r.fail("%v", err)
					continue
				}
				mu.Lock()
				lat.Add(el)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.MePreferences = summarize(lat)
	res.MePreferencesPerS = float64(lat.Count()) / time.Since(start).Seconds()
	return nil
}

// batchBody is the JSON lines of recipients [from, to): their groups of
// 100, then each recipient (with an FCM device) and its membership; n is
// the rows they make.
func batchBody(from, to int) ([]byte, int) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	n := 0
	for g := from / 100; g*100 < to; g++ {
		_ = enc.Encode(map[string]any{"group": map[string]any{"key": fmt.Sprintf("shop:%d", g), "type": "shop"}})
		n++
	}
	for i := from; i < to; i++ {
		uid := fmt.Sprintf("r%07d", i)
		_ = enc.Encode(map[string]any{"recipient": map[string]any{"user_id": uid, "user_type": "STAFF", "email": uid + "@bench.invalid",
			"devices": []map[string]string{{"kind": "fcm", "token": "fcm-" + uid}}}})
		_ = enc.Encode(map[string]any{"member": map[string]any{"group": fmt.Sprintf("shop:%d", i/100), "user_id": uid, "role": "STAFF"}})
		n += 3
	}
	return b.Bytes(), n
}

func clip(b []byte) string {
	if len(b) > 300 {
		b = b[:300]
	}
	return string(b)
}

func (d *DirectoryAPIResult) print(w io.Writer) {
	sc := d.Scenario
	fmt.Fprintf(w, "Directory API (served in this process):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "what\t\trequests\trows\tseconds\trate\tp50 ms\tp99 ms\t")
	fmt.Fprintf(tw, "POST /v1/recipients:batch (%d clients)\t\t%d\t%s\t%.2f\t%s rows/s\t\t\t\n", sc.BatchClients, d.Batches,
		num(float64(d.BatchRows)), d.BatchElapsed.Seconds(), num(d.BatchRowsPerS))
	fmt.Fprintf(tw, "PUT /v1/recipients/{id} (%d writers)\t\t%d\t\t\t%s req/s\t%.1f\t%.1f\t\n", sc.Writers, d.Put.Count, num(d.PutPerS), d.Put.P50, d.Put.P99)
	fmt.Fprintf(tw, "GET /v1/me/preferences (%d readers)\t\t%d\t\t\t%s req/s\t%.1f\t%.1f\t\n", sc.Readers, d.MePreferences.Count,
		num(d.MePreferencesPerS), d.MePreferences.P50, d.MePreferences.P99)
	_ = tw.Flush()
	if d.Failed > 0 {
		fmt.Fprintf(w, "  %d requests failed; the first: %s\n", d.Failed, d.Detail)
	}
}

// directoryTokenKey adds an HS256 key users' tokens are signed with.
func directoryTokenKey(ctx context.Context, pool *pgxpool.Pool) (store.TokenKey, error) {
	secret, err := auth.NewSecret()
	if err != nil {
		return store.TokenKey{}, err
	}
	k := store.TokenKey{TenantID: benchTenant, Kid: "directory-bench", Alg: "HS256", Issuer: "https://directory-bench.example", Key: secret}
	return k, store.AddTokenKey(ctx, pool, k)
}

// directoryRulesHCL gives /v1/me/preferences choices to compute: two
// event types, a mandatory channel and three optional ones, one of them
// restricted to a role.
const directoryRulesHCL = `
defaults { time_zone = "UTC" }
channel "EMAIL" { providers = [{ plugin = "sink" }] }
channel "SMS" { providers = [{ plugin = "sink" }] }
channel "PUSH" { providers = [{ plugin = "sink" }] }
channel "WEBSOCKET" {
  best_effort = true
  providers   = [{ plugin = "sink" }]
}
event "ORDER_PLACED" {
  audience { group = "shop:{{ .payload.shop }}" }
  mandatory = ["WEBSOCKET"]
  optional  = ["EMAIL", "SMS", "PUSH"]
  restrict "SMS" { roles = ["MANAGER"] }
  template "EMAIL" { body = "order {{ .payload.id }}" }
  template "SMS" { body = "order {{ .payload.id }}" }
  template "PUSH" { body = "order {{ .payload.id }}" }
}
event "SHIFT_CHANGED" {
  audience { group = "shop:{{ .payload.shop }}" }
  mandatory = ["WEBSOCKET", "EMAIL"]
  optional  = ["PUSH"]
  template "EMAIL" { body = "shift" }
  template "PUSH" { body = "shift" }
}
`

// directoryRules loads directoryRulesHCL through the rules loader.
func directoryRules() (*rules.RuleSet, error) {
	dir, err := os.MkdirTemp("", "herald-bench-rules-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "rules.hcl")
	if err := os.WriteFile(p, []byte(directoryRulesHCL), 0o600); err != nil {
		return nil, err
	}
	return rulesfile.Load(p)
}
