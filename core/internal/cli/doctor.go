package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/secret"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/source"
	"github.com/heraldhq/herald/core/internal/statusev"
	"github.com/heraldhq/herald/core/internal/store"
)

func init() { commands = append(commands, newDoctorCmd) }

// The states of one doctor check, as printed at the start of its line.
const (
	checkOK   = "ok"
	checkWarn = "warn"
	checkFail = "FAIL"
	checkSkip = "skip"
)

// Clock skew between this machine and the database above which doctor
// warns, and above which it fails: leases, retry times and token expiry
// compare the two clocks.
const (
	clockWarnSkew = 2 * time.Second
	clockFailSkew = 30 * time.Second
)

// checkResult is one line of `herald doctor`.
type checkResult struct {
	// Status is ok, warn, FAIL or skip.
	Status string `json:"status"`
	// Check names what was checked ("config", "database", "broker
	// amqp://...", "plugin EMAIL/primary", "clock").
	Check string `json:"check"`
	// Detail says what was found; never a secret.
	Detail string `json:"detail"`
}

// doctor runs the checks of `herald doctor` and collects their results.
type doctor struct {
	timeout time.Duration
	redact  *secret.Redactor
	results []checkResult
}

func (dr *doctor) add(status, check, format string, args ...any) {
	dr.results = append(dr.results, checkResult{Status: status, Check: check, Detail: dr.redact.String(fmt.Sprintf(format, args...))})
}

func (dr *doctor) failed() bool {
	for _, r := range dr.results {
		if r.Status == checkFail {
			return true
		}
	}
	return false
}

func newDoctorCmd() *cobra.Command {
	var cfgPath string
	var asJSON bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the config, database, broker, plugins and clock a herald serve would run with",
		Long: `Doctor loads and validates the daemon config and its rules files as herald serve
would, then checks that the database answers and carries every migration this
herald embeds, that every configured RabbitMQ URL answers and holds Herald's
exchange and queues with the configured queue type, that every provider's plugin
binary starts under the real plugin host (present, executable, trusted
permissions, checksum pin, Describe, Configure, Health), and that this machine's
clock agrees with the database's. It prints one line per check and exits 1 when
any check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dr := &doctor{timeout: timeout, redact: secret.NewRedactor()}
			dr.run(cmd.Context(), cfgPath)
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(dr.results); err != nil {
					return err
				}
			} else {
				printChecks(out, dr.results)
			}
			if dr.failed() {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	addConfigFlag(cmd, &cfgPath)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the checks as a JSON array")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "bound of each network check")
	return cmd
}

// printChecks prints one line per check: the status padded to four
// columns, the check's name and what it found.
func printChecks(w io.Writer, rs []checkResult) {
	for _, r := range rs {
		fmt.Fprintf(w, "%-4s %s: %s\n", r.Status, r.Check, r.Detail)
	}
}

// run performs every check; a check that needs what an earlier one could
// not load is skipped, and says so.
func (dr *doctor) run(ctx context.Context, cfgPath string) {
	if ctx == nil {
		ctx = context.Background()
	}
	d, rs, ok := dr.checkConfig(cfgPath)
	if !ok {
		return
	}
	dr.checkDatabase(ctx, d)
	dr.checkSources(ctx, d)
	dr.checkBrokers(ctx, d, rs)
	dr.checkPlugins(ctx, d, rs)
}

// checkConfig loads the daemon config and its rules files as herald serve
// does. It returns ok false when the daemon config itself is unusable;
// rs is nil when only the rules are.
func (dr *doctor) checkConfig(cfgPath string) (d config.Daemon, rs *rules.RuleSet, ok bool) {
	d, err := config.LoadDaemon(cfgPath)
	if err != nil {
		dr.add(checkFail, "config", "%v", err)
		return d, nil, false
	}
	dr.redact.Add(d.SecretValues()...)
	if err := d.Validate(); err != nil {
		dr.add(checkFail, "config", "%v", err)
		return d, nil, false
	}
	if _, err := server.AdminToken(d.HTTP, hclog.NewNullLogger()); err != nil {
		dr.add(checkFail, "config", "%v", err)
		return d, nil, false
	}
	where := "defaults and environment"
	if cfgPath != "" {
		where = cfgPath
	}
	if len(d.Rules) == 0 {
		dr.add(checkFail, "config", "%s: no rules files configured (set rules = [...] or HERALD_RULES)", where)
		return d, nil, true
	}
	rs, files, err := rulesfile.LoadWith(rulesfile.Options{}, d.Rules...)
	if err != nil {
		dr.add(checkFail, "config", "rules: %s", strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; "))
		return d, nil, true
	}
	dr.add(checkOK, "config", "%s valid; %d rules file(s), %d channel(s), %d event type(s)",
		where, len(files), len(rs.Channels()), len(rs.EventTypes()))
	return d, rs, true
}

// checkDatabase checks that the worker database URL answers, that every
// embedded migration is applied, and the clock skew against it.
func (dr *doctor) checkDatabase(ctx context.Context, d config.Daemon) {
	ctx, cancel := context.WithTimeout(ctx, dr.timeout)
	defer cancel()
	name := "database"
	pool, err := store.NewPool(ctx, d.Database.URL, 2)
	if err == nil {
		err = pool.Ping(ctx)
		if err != nil {
			pool.Close()
		}
	}
	if err != nil {
		dr.add(checkFail, name, "unreachable at %s: %v", secret.RedactURL(d.Database.URL), err)
		dr.add(checkSkip, "clock", "no database to compare with")
		return
	}
	defer pool.Close()
	applied, latest, err := store.MigrationLevel(ctx, d.Database.URL)
	switch {
	case err != nil:
		dr.add(checkFail, name, "reachable, migration level unknown: %v", err)
	case applied < latest:
		dr.add(checkFail, name, "reachable, migrations at %d of %d: run herald migrate up", applied, latest)
	case applied > latest:
		dr.add(checkFail, name, "reachable, migrations at %d but this herald knows %d of them: a newer herald migrated it", applied, latest)
	default:
		dr.add(checkOK, name, "reachable, migrations at %d of %d", applied, latest)
	}
	if err == nil && applied == latest {
		// The pools herald serve opens: its roles, and the API's.
		if pools, err := server.OpenPools(ctx, d.Database); err != nil {
			dr.add(checkFail, "database roles", "%v", err)
		} else {
			pools.Close()
			if len(pools.Warnings) > 0 {
				dr.add(checkWarn, "database roles", "worker %s, api %s and admin %s usable, but %s", d.Database.WorkerRole, d.Database.APIRole, d.Database.AdminRole,
					strings.Join(pools.Warnings, "; "))
			} else {
				dr.add(checkOK, "database roles", "worker %s, api %s and admin %s usable; the API and the superadmin log in as roles of their own",
					d.Database.WorkerRole, d.Database.APIRole, d.Database.AdminRole)
			}
		}
		dr.checkAudience(ctx, pool, d)
		dr.checkStatusEvents(ctx, pool, d)
	}
	switch off, err := store.AutovacuumOff(ctx, pool); {
	case err != nil:
		dr.add(checkFail, "database vacuum", "%v", err)
	case off:
		dr.add(checkWarn, "database vacuum", "%s", store.AutovacuumWarning)
	default:
		dr.add(checkOK, "database vacuum", "autovacuum is on")
	}

	// The database's clock is read between two local readings; the skew
	// is measured from their midpoint, within half the round trip.
	before := time.Now()
	var dbNow time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow); err != nil {
		dr.add(checkFail, "clock", "SELECT now(): %v", err)
		return
	}
	after := time.Now()
	mid := before.Add(after.Sub(before) / 2)
	skew := dbNow.Sub(mid)
	abs := skew.Abs()
	msg := fmt.Sprintf("%s off the database's (± %s)", skew.Round(time.Millisecond), (after.Sub(before) / 2).Round(time.Millisecond))
	switch {
	case abs > clockFailSkew:
		dr.add(checkFail, "clock", "%s, over %s: fix NTP on this machine or the database's", msg, clockFailSkew)
	case abs > clockWarnSkew:
		dr.add(checkWarn, "clock", "%s, over %s", msg, clockWarnSkew)
	default:
		dr.add(checkOK, "clock", "%s", msg)
	}
}

// legacyAudience is the audience every deployment had before it was
// derived per deployment.
const legacyAudience = "herald"

// checkAudience shows the aud claim user tokens must carry here (the
// deployment's own unless auth.audience sets one), warning about the
// audience every deployment once shared.
func (dr *doctor) checkAudience(ctx context.Context, q store.Querier, d config.Daemon) {
	aud, err := auth.ResolveAudience(ctx, q, d.Auth)
	switch {
	case err != nil:
		dr.add(checkFail, "token audience", "%v", err)
	case d.Auth.Audience == legacyAudience:
		dr.add(checkWarn, "token audience", "user tokens must carry aud %q (auth.audience), the audience every deployment once shared: "+
			"a token minted for another deployment whose tenant signs with the same key and issuer is accepted here; "+
			"remove auth.audience for this deployment's own once your backends use it", aud)
	case d.Auth.Audience != "":
		dr.add(checkOK, "token audience", "user tokens must carry aud %q (auth.audience)", aud)
	default:
		dr.add(checkOK, "token audience", "user tokens must carry aud %q (this deployment's own; auth.audience sets another)", aud)
	}
}

// checkSources connects to every source block's database and reads its
// outbox: FAIL when it cannot be forwarded (unreachable, not installed,
// older than this herald), warn when it holds refused rows.
func (dr *doctor) checkSources(ctx context.Context, d config.Daemon) {
	for _, name := range slices.Sorted(maps.Keys(d.Sources)) {
		cfg := d.Sources[name]
		check := "source " + name
		cctx, cancel := context.WithTimeout(ctx, dr.timeout)
		st, err := source.Check(cctx, name, cfg)
		cancel()
		switch {
		case err != nil:
			dr.add(checkFail, check, "%s: %v", secret.RedactURL(cfg.URL), err)
		case st.Refused > 0:
			dr.add(checkWarn, check, "%d row(s) refused in herald_outbox (SELECT event_id, refusal FROM herald_outbox WHERE refused_at IS NOT NULL); %d waiting, oldest %.1fs",
				st.Refused, st.Backlog, st.OldestSeconds)
		default:
			dr.add(checkOK, check, "outbox installed; %d waiting, oldest %.1fs; tenants %s", st.Backlog, st.OldestSeconds, strings.Join(cfg.Tenants, ", "))
		}
	}
}

// checkBrokers connects to every configured AMQP URL and, when the rules
// loaded, checks the topology herald serve declares on it.
func (dr *doctor) checkBrokers(ctx context.Context, d config.Daemon, rs *rules.RuleSet) {
	tlsConf, err := d.AMQP.TLSConfig()
	if err != nil {
		dr.add(checkFail, "broker", "%v", err)
		return
	}
	for _, u := range d.AMQP.BrokerURLs() {
		dr.checkBroker(ctx, d, rs, u, tlsConf)
	}
}

func (dr *doctor) checkBroker(ctx context.Context, d config.Daemon, rs *rules.RuleSet, u string, tlsConf *tls.Config) {
	name := "broker " + secret.RedactURL(u)
	cfg := amqp.Config{
		Dial:       amqp.DefaultDial(dr.timeout),
		Properties: amqp.Table{"connection_name": "herald-doctor"},
	}
	if tlsConf != nil {
		cfg.TLSClientConfig = tlsConf.Clone()
	}
	conn, err := dialAMQP(ctx, u, cfg, dr.timeout)
	if err != nil {
		dr.add(checkFail, name, "unreachable: %v", err)
		return
	}
	defer conn.Close()
	version, _ := conn.Properties["version"].(string)
	reach := "reachable"
	if version != "" {
		reach += " (RabbitMQ " + version + ")"
	}
	if rs == nil {
		dr.add(checkSkip, name, "%s; topology not checked: the rules did not load", reach)
		return
	}
	topo := server.Topology(d, rs)
	missing, err := checkTopology(conn, topo)
	switch {
	case err != nil:
		dr.add(checkFail, name, "%s; %v", reach, err)
	case len(missing) > 0:
		dr.add(checkWarn, name, "%s; not declared yet: %s (herald serve declares them when it starts)", reach, strings.Join(missing, ", "))
	default:
		dr.add(checkOK, name, "%s; exchange %s and %d %s queue(s) in place", reach, topo.Exchange, len(topo.Queues), d.AMQP.QueueType)
	}
}

// dialAMQP dials u, giving up when ctx ends or after timeout (the AMQP
// handshake included).
func dialAMQP(ctx context.Context, u string, cfg amqp.Config, timeout time.Duration) (*amqp.Connection, error) {
	type dialed struct {
		conn *amqp.Connection
		err  error
	}
	done := make(chan dialed, 1)
	go func() {
		c, err := amqp.DialConfig(u, cfg)
		done <- dialed{c, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.conn, r.err
	case <-ctx.Done():
	case <-t.C:
	}
	go func() {
		if r := <-done; r.conn != nil {
			_ = r.conn.Close()
		}
	}()
	return nil, fmt.Errorf("no answer within %s", timeout)
}

// checkTopology checks with passive declares that the exchange and queues
// of topo exist, and that each queue that exists has the type topo wants
// (the same declare herald serve makes, which changes nothing on a queue
// that matches and fails on one of another type). It returns what is
// missing, and an error for what herald serve would refuse.
func checkTopology(conn *amqp.Connection, topo broker.Topology) (missing []string, err error) {
	// A failed passive declare closes its channel: one channel per probe.
	probe := func(f func(ch *amqp.Channel) error) error {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		err = f(ch)
		if err == nil {
			_ = ch.Close()
		}
		return err
	}
	notFound := func(err error) bool {
		var ae *amqp.Error
		return errors.As(err, &ae) && ae.Code == amqp.NotFound
	}
	err = probe(func(ch *amqp.Channel) error {
		return ch.ExchangeDeclarePassive(topo.Exchange, amqp.ExchangeTopic, true, false, false, false, nil)
	})
	switch {
	case notFound(err):
		missing = append(missing, "exchange "+topo.Exchange)
	case err != nil:
		return nil, fmt.Errorf("exchange %s: %w", topo.Exchange, err)
	}
	for _, q := range topo.Queues {
		err := probe(func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(q.Name, true, false, false, false, nil)
			return err
		})
		if notFound(err) {
			missing = append(missing, "queue "+q.Name)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("queue %s: %w", q.Name, err)
		}
		want := "classic"
		var args amqp.Table
		if q.Quorum {
			want, args = "quorum", amqp.Table{"x-queue-type": "quorum"}
		}
		err = probe(func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(q.Name, true, false, false, false, args)
			return err
		})
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
			setting := q.Setting
			if setting == "" {
				setting = "amqp.queue_type"
			}
			return nil, fmt.Errorf("%s: queue %s exists with another type than %s (%s)", setting, q.Name, want, ae.Reason)
		}
		if err != nil {
			return nil, fmt.Errorf("queue %s: %w", q.Name, err)
		}
	}
	return missing, nil
}

// checkPlugins starts every provider of the rules under the real plugin
// host, as herald serve would (permissions, checksum pin, handshake,
// Describe, config check, Configure, Health), reports each, and stops them.
// checkSandbox says how plugin processes are confined (plugins.sandbox,
// plugins.user) on this kernel.
func (dr *doctor) checkSandbox(pc pluginhost.Config) {
	who := "as the daemon's user"
	if pc.User != "" {
		who = "as user " + pc.User
	}
	abi := pluginhost.LandlockABI()
	if !pluginhost.SandboxAvailable() {
		abi = 0
	}
	switch {
	case pc.Sandbox == "" || pc.Sandbox == pluginhost.SandboxOff:
		dr.add(checkWarn, "plugin sandbox", "off (plugins.sandbox = off): plugins run %s and read what it can", who)
	case abi < 1 && pc.Sandbox == pluginhost.SandboxLandlock:
		dr.add(checkFail, "plugin sandbox", "plugins.sandbox = landlock but this kernel has no Landlock: plugins will not start")
	case abi < 1:
		dr.add(checkWarn, "plugin sandbox", "this kernel has no Landlock: plugins run unconfined %s and read what it can", who)
	default:
		dr.add(checkOK, "plugin sandbox", "Landlock ABI %d: plugins run %s, confined to system files, their binary and a private TMPDIR", abi, who)
	}
}

func (dr *doctor) checkPlugins(ctx context.Context, d config.Daemon, rs *rules.RuleSet) {
	if rs == nil {
		dr.add(checkSkip, "plugins", "not checked: the rules did not load")
		return
	}
	dr.checkSandbox(d.Plugins)
	cfg := server.PluginHostConfig(d.Plugins, hclog.NewNullLogger(), rs.Channels())
	cfg.WatchInterval = -1
	cfg.Redactor = dr.redact
	host, err := pluginhost.New(cfg)
	if err != nil {
		dr.add(checkFail, "plugins", "%v", err)
		return
	}
	defer host.Close()
	// Each provider's first start is bounded by the host's StartTimeout;
	// this bounds them all.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := host.Start(ctx); err != nil {
		dr.add(checkFail, "plugins", "%v", err)
		return
	}
	st := host.Status()
	if len(st) == 0 {
		dr.add(checkWarn, "plugins", "no providers configured")
		return
	}
	for _, p := range st {
		name := fmt.Sprintf("plugin %s/%s", p.Channel, p.Provider)
		switch p.State {
		case pluginhost.StateServing:
			sum := p.SHA256
			if len(sum) > 12 {
				sum = sum[:12]
			}
			dr.add(checkOK, name, "%s version %s, sha256 %s…, described, configured and healthy", p.Binary, p.Version, sum)
		case pluginhost.StateCircuitOpen:
			dr.add(checkWarn, name, "%s version %s runs but is unhealthy: %s", p.Binary, p.Version, p.LastError)
		default:
			dr.add(checkFail, name, "%s: %s: %s", p.Binary, p.State, p.LastError)
		}
	}
}

// statusEventsWarnAge is how old the oldest status event still owed may
// be before doctor warns: a stage that does not drain, a broker that does
// not confirm, or webhooks failing for that long.
const statusEventsWarnAge = 10 * time.Minute

// capped formats a backlog count, which stops at store.BacklogCap.
func capped(n int64) string {
	if n >= store.BacklogCap {
		return "at least " + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}

// checkStatusEvents reports what status_events still owes the broker and
// tenants' webhooks (package statusev).
func (dr *doctor) checkStatusEvents(ctx context.Context, q store.Querier, d config.Daemon) {
	b, err := statusev.Backlog(ctx, q)
	if err != nil {
		dr.add(checkFail, "status events", "%v", err)
		return
	}
	msg := fmt.Sprintf("%s unpublished on exchange %s (oldest %.1fs), %s owed to webhooks (oldest %.1fs); replay window %s",
		capped(b.Unpublished), d.StatusEvents.Exchange, b.OldestUnpublished.Seconds(), capped(b.WebhookDue), b.OldestWebhookDue.Seconds(), d.StatusEvents.Retention)
	if b.OldestUnpublished > statusEventsWarnAge || b.OldestWebhookDue > statusEventsWarnAge {
		dr.add(checkWarn, "status events", "%s: over %s old (is herald serve running? a write transaction open that long on the server holds the broker's back: pg_stat_activity; herald tenants webhook show --tenant T names a failing webhook)", msg, statusEventsWarnAge)
		return
	}
	dr.add(checkOK, "status events", "%s", msg)
}
