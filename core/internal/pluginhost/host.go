// Package pluginhost runs Herald's channel plugins: it discovers
// herald-plugin-* binaries in a plugin directory, launches one process per
// configured provider through hashicorp/go-plugin (gRPC, AutoMTLS, SHA-256
// pinning), supervises them (health checks, restart with backoff after a
// crash), hot-swaps them (reload, or a changed binary when watching: start
// new, health check, switch, drain old), and fails over between the
// providers of a channel with a circuit breaker that failed sends and
// failed health checks open.
//
// A plugin process runs exactly the bytes that were verified: the host
// refuses a plugin directory or binary that a user other than its own (or
// root) could write, copies the binary into a private directory
// (Config.KeepDir) while hashing it, checks the configured checksum
// against that hash, and executes the copy, never the file at the
// plugin's path. The process gets a minimal environment (DefaultEnv and
// Config.Env), not the host's.
//
// A binary a hot swap rejected stays at the plugin's path, but the host
// does not run it again on its own: it keeps the copy of the last binary
// that passed its launch and restarts a crashed plugin from that copy
// while the rejected file is in place.
//
// The host only deals in sdk types: it gets an sdk.Channel from go-plugin's
// Dispense and never touches protobuf messages.
package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/config/field"
	"github.com/heraldhq/herald/core/internal/metrics"
	"github.com/heraldhq/herald/core/internal/secret"
	"github.com/heraldhq/herald/sdk"
	sdkhost "github.com/heraldhq/herald/sdk/host"
)

// Errors Send and Reload return. Each says what the caller does next.
var (
	// ErrUnknownChannel means no channel of that name is configured; the
	// delivery cannot go anywhere until the config names it (the caller
	// fails or parks it).
	ErrUnknownChannel = errors.New("unknown channel")
	// ErrNoProvider means every provider of the channel is refused or
	// stopped; it prompts the caller to move the batch to RETRY while the
	// operator fixes the config or binary. It is retryable.
	ErrNoProvider = sdk.RetryableError(errors.New("no provider available"), 0)
	// ErrCircuitOpen means every available provider of the channel has its
	// circuit open; it prompts the caller to move the batch to RETRY. It is
	// retryable.
	ErrCircuitOpen = sdk.RetryableError(errors.New("circuit open"), 0)
	// ErrThrottled means the channel's providers are rate limited; the error
	// is sdk.IsRateLimited and sdk.RetryAfter gives the wait.
	ErrThrottled = errors.New("provider throttled")
	// ErrUnknownPlugin is returned by Reload for a name that matches no
	// provider.
	ErrUnknownPlugin = errors.New("unknown plugin")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("plugin host closed")
)

// DefaultRestart is the restart policy after a plugin crash or a failed
// start: 100ms, 200ms, 400ms… up to 30s between tries, without jitter and
// without end (MaxAttempts 0). A plugin that served for longer than Max
// before crashing restarts from Initial again.
var DefaultRestart = channel.RetryPolicy{Initial: 100 * time.Millisecond, Max: 30 * time.Second, Multiplier: 2}

// setRestartDefaults fills the zero fields of a restart policy from
// DefaultRestart.
func setRestartDefaults(p *channel.RetryPolicy) {
	if p.Initial <= 0 {
		p.Initial = DefaultRestart.Initial
	}
	if p.Max <= 0 {
		p.Max = DefaultRestart.Max
	}
	if p.Multiplier < 1 {
		p.Multiplier = DefaultRestart.Multiplier
	}
}

// restartDelay is the wait before restart attempt+1; none before the
// first.
func (h *Host) restartDelay(attempt int) time.Duration {
	if attempt <= 0 {
		return 0
	}
	return h.cfg.Restart.Next(attempt, 0)
}

// Config configures a Host: the daemon's plugins { ... } settings (the
// fields with a koanf tag) and what the daemon wires in.
type Config struct {
	// Dir holds the herald-plugin-* binaries: provider plugin "email" runs
	// herald-plugin-email there. It and the binaries must be owned by
	// herald's user or root and writable by neither their group nor others
	// (a plugin that fails this is refused; see insecure_permissions).
	// Relative to the config file.
	Dir string `koanf:"dir"`
	// Watch hot-swaps a plugin when its binary changes in the plugin
	// directory (checked every 2s). Off: a new binary runs after `herald plugins reload
	// NAME`.
	Watch bool `koanf:"watch"`
	// Logger receives the host's logs and every plugin's logs, re-emitted
	// under plugin=<name>, channel=<channel>, provider=<provider>.
	Logger hclog.Logger
	// Channels maps each channel to its providers.
	Channels []channel.Config
	// HealthInterval is how often serving plugins are health-checked
	// (default 10s). Breaker.HealthFailures failed checks in a row open the
	// provider's circuit.
	HealthInterval time.Duration
	// WatchInterval is how often the plugin directory is checked for
	// changed binaries, which are then hot-swapped. Zero: every
	// DefaultWatchInterval when Watch is on, else no watching; negative:
	// no watching. Without watching a new binary runs after Reload.
	WatchInterval time.Duration
	// CallTimeout bounds Describe, Configure and Health calls (default 10s).
	CallTimeout time.Duration
	// SendTimeout bounds one Send call to a plugin (default 30s). A call
	// that runs past it counts as a failure of the provider, so a hanging
	// provider opens its circuit and traffic fails over; a caller's own
	// earlier deadline ends the call without counting either way.
	SendTimeout time.Duration
	// StartTimeout bounds a plugin's launch and handshake (default 20s).
	StartTimeout time.Duration
	// DrainTimeout is how long a hot swap waits for the old plugin's
	// in-flight sends before stopping it (default 30s).
	DrainTimeout time.Duration
	// Restart is the retry policy of restarts of a crashed plugin (zero
	// fields: DefaultRestart's; MaxAttempts is not used: a plugin is
	// restarted until it serves or the host closes).
	Restart channel.RetryPolicy
	// KeepDir is where the host keeps the private copies of plugin
	// binaries that plugin processes run, by SHA-256; the copy of the last
	// good version of each plugin (one that passed its launch) stays while
	// it is that, so that a restart after a hot swap rejected a new binary
	// runs the good version rather than the rejected file. It must be
	// owned by the host's user and writable by nobody else, and on a
	// filesystem that allows executing files (default: a new directory
	// under os.TempDir, mode 0700, removed by Close).
	KeepDir string
	// Env names variables of the daemon's environment that plugins get on
	// top of the allow-list (PATH, HOME, TMPDIR, TZ, LANG, LC_*, ...), e.g.
	// ["HTTPS_PROXY"]. HERALD_* and PLUGIN_* names are refused: they are
	// the daemon's own settings and secrets, and the plugin protocol's. In
	// the environment, comma-separated.
	Env []string `koanf:"env"`
	// InsecurePermissions runs plugins from a directory or binaries that
	// other users could write (group- or world-writable, or owned by
	// another user than herald's or root). For development only.
	InsecurePermissions bool `koanf:"insecure_permissions"`
	// Sandbox confines every plugin process to a filesystem view of its
	// own with Landlock: it may read the system's libraries, certificates
	// and name service files (/usr, /lib, /etc/ssl, /etc/resolv.conf,
	// /etc/hosts, ...), its own binary and /proc entry, and write a
	// private temporary directory (its TMPDIR) and /dev/null; the daemon's
	// config, keys, rules, token files and /proc entry are out of its
	// reach. "auto" confines where the kernel has Landlock and warns once
	// where it does not; "landlock" refuses to start plugins without it;
	// "off" does not confine.
	Sandbox string `koanf:"sandbox"`
	// SandboxRead lists more paths (files or directories, recursively) a
	// sandboxed plugin may read, e.g. a credentials file its config names.
	SandboxRead []string `koanf:"sandbox_read"`
	// SandboxWrite lists more paths a sandboxed plugin may read and write.
	SandboxWrite []string `koanf:"sandbox_write"`
	// User runs plugin processes as this system user (and its primary
	// group) instead of the daemon's, so that file permissions keep them
	// from the daemon's secrets and /proc entry. Needs the daemon to run as
	// root; empty: the daemon's user.
	User string `koanf:"user"`
	// Breaker configures failover between the providers of a channel. A
	// channel's rules may set their own cooldown (channel.Breaker).
	Breaker BreakerPolicy
	// HostCapabilities is sent to plugins in ConfigureRequest.
	HostCapabilities []string
	// Redactor receives the values of every provider's Secret fields as
	// soon as the plugin has described its fields, before it is configured;
	// the host redacts them from the errors it returns and from Status, and
	// the daemon's log output should go through Redactor.Writer so that
	// neither its own lines nor the plugins' re-emitted ones carry them
	// (default: a Redactor of the host's own).
	Redactor *secret.Redactor
	// Metrics records each Send call's duration by channel and provider
	// (nil: none).
	Metrics *metrics.Metrics
}

// DefaultWatchInterval is how often the plugin directory is checked for
// changed binaries when Watch is on.
const DefaultWatchInterval = 2 * time.Second

// DefaultConfig returns the daemon's default plugin settings: the
// binaries make build writes, no watching, permission checks on.
func DefaultConfig() Config {
	return Config{Dir: "bin/plugins", Env: []string{}, Sandbox: SandboxAuto, SandboxRead: []string{}, SandboxWrite: []string{}}
}

func (c *Config) setDefaults() {
	if c.Watch && c.WatchInterval == 0 {
		c.WatchInterval = DefaultWatchInterval
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Redactor == nil {
		c.Redactor = secret.NewRedactor()
	}
	if c.HealthInterval <= 0 {
		c.HealthInterval = 10 * time.Second
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 10 * time.Second
	}
	if c.SendTimeout <= 0 {
		c.SendTimeout = 30 * time.Second
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 20 * time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 30 * time.Second
	}
	setRestartDefaults(&c.Restart)
	c.Breaker.setDefaults()
}

// Validate checks the config; it returns field.Errors naming the keys of
// the settings (dir, env), and the channels' errors after them.
func (c *Config) Validate() error {
	var errs field.Errors
	errs.NotEmpty("dir", c.Dir)
	for _, n := range c.Env {
		if err := validEnvName(n); err != nil {
			errs.Add("env", "%v", err)
		}
	}
	switch c.Sandbox {
	case "", SandboxOff, SandboxAuto, SandboxLandlock:
	default:
		errs.Add("sandbox", "must be %q, %q or %q, not %q", SandboxAuto, SandboxLandlock, SandboxOff, c.Sandbox)
	}
	for _, p := range c.SandboxRead {
		if !filepath.IsAbs(p) {
			errs.Add("sandbox_read", "%q is not an absolute path", p)
		}
	}
	for _, p := range c.SandboxWrite {
		if !filepath.IsAbs(p) {
			errs.Add("sandbox_write", "%q is not an absolute path", p)
		}
	}
	if c.User != "" {
		if _, err := lookupCredential(c.User); err != nil {
			errs.Add("user", "%v", err)
		} else if os.Geteuid() != 0 {
			errs.Add("user", "running plugins as %q needs the daemon to run as root (it runs as uid %d)", c.User, os.Geteuid())
		}
	}
	errs.Merge("", validateChannels(c.Channels))
	return errs.Err()
}

func validateChannels(chs []channel.Config) error {
	seen := map[string]bool{}
	for _, ch := range chs {
		if ch.Name == "" {
			return errors.New("pluginhost: config: a channel has no name")
		}
		if seen[ch.Name] {
			return fmt.Errorf("pluginhost: config: channel %q is configured twice", ch.Name)
		}
		seen[ch.Name] = true
		names := map[string]bool{}
		for _, p := range ch.Providers {
			if err := validPluginName(p.Plugin); err != nil {
				return fmt.Errorf("pluginhost: config: channel %q: %w", ch.Name, err)
			}
			n := providerName(p)
			if names[n] {
				return fmt.Errorf("pluginhost: config: channel %q: provider %q is configured twice", ch.Name, n)
			}
			names[n] = true
		}
	}
	return nil
}

// Host runs the plugins of every configured channel.
type Host struct {
	cfg Config
	log hclog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	keeper *keeper

	mu       sync.RWMutex
	channels map[string]*channelGroup
	started  bool
	closed   bool

	// onDeclared are called when a plugin's declaration changes.
	declMu     sync.Mutex
	onDeclared []func()
}

// channelGroup is one channel's providers in failover order.
type channelGroup struct {
	cfg       channel.Config
	providers []*provider
}

// New returns a Host for cfg. Nothing runs until Start.
func New(cfg Config) (*Host, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Host{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel, channels: map[string]*channelGroup{}, keeper: newKeeper(cfg.KeepDir)}
	return h, nil
}

// Start launches every configured provider and waits for each one's first
// start attempt (bounded by ctx). A provider that fails to start does not
// fail Start: a refused one (checksum mismatch, missing binary, bad config)
// waits for a reload or a new binary, a crashed or unhealthy one is retried
// with backoff; Status and the log say which and why, and Send skips it.
// Start returns an error only when the host cannot run at all. Call Close
// in every case.
func (h *Host) Start(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	if h.started {
		h.mu.Unlock()
		return errors.New("pluginhost: already started")
	}
	h.started = true
	h.mu.Unlock()
	if st, err := os.Stat(h.cfg.Dir); err != nil {
		h.log.Warn("plugin directory is not readable", "dir", h.cfg.Dir, "error", err)
	} else if !st.IsDir() {
		return fmt.Errorf("pluginhost: %s is not a directory", h.cfg.Dir)
	} else if h.cfg.InsecurePermissions {
		h.log.Warn("plugin permission checks are off: any user who can write the plugin directory or a binary in it runs code as herald", "dir", h.cfg.Dir, "mode", st.Mode().String())
	} else if err := checkTrusted("plugin directory", h.cfg.Dir, st); err != nil {
		h.log.Error("plugin directory is not trusted: every provider is refused", "error", err)
	}
	groups := h.buildGroups(h.cfg.Channels, nil)
	h.mu.Lock()
	h.channels = groups
	h.mu.Unlock()
	var all []*provider
	for _, g := range groups {
		all = append(all, g.providers...)
	}
	h.startProviders(ctx, all)
	if h.cfg.WatchInterval > 0 {
		h.wg.Add(1)
		go h.watch()
	}
	return nil
}

// startProviders runs each provider's supervisor and waits for its first
// start attempt or ctx.
func (h *Host) startProviders(ctx context.Context, ps []*provider) {
	for _, p := range ps {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			p.run()
		}()
	}
	for _, p := range ps {
		select {
		case <-p.firstDone:
		case <-ctx.Done():
			return
		}
	}
}

// buildGroups makes channel groups for chs, reusing providers from keep
// (keyed by channel/provider) when their config is unchanged.
func (h *Host) buildGroups(chs []channel.Config, keep map[string]*provider) map[string]*channelGroup {
	groups := make(map[string]*channelGroup, len(chs))
	for _, ch := range chs {
		g := &channelGroup{cfg: ch}
		type ordered struct {
			p   *provider
			pri int
			idx int
		}
		var list []ordered
		for i, pc := range ch.Providers {
			key := ch.Name + "/" + providerName(pc)
			p := keep[key]
			if p == nil {
				p = newProvider(h, ch, pc)
			}
			p.setPriority(pc.Priority)
			p.setBreakerPolicy(h.breakerPolicy(ch))
			list = append(list, ordered{p: p, pri: pc.Priority, idx: i})
		}
		sort.SliceStable(list, func(i, j int) bool { return list[i].pri < list[j].pri })
		for _, o := range list {
			g.providers = append(g.providers, o.p)
		}
		groups[ch.Name] = g
	}
	return groups
}

// breakerPolicy is the breaker policy of ch's providers: the host's, with
// the channel's own cooldown when its rules give one.
func (h *Host) breakerPolicy(ch channel.Config) BreakerPolicy {
	pol := h.cfg.Breaker
	if ch.Breaker.Cooldown > 0 {
		pol.Cooldown = ch.Breaker.Cooldown
	}
	return pol
}

// Send delivers batch through channel's first available provider by
// priority and returns one Result per delivery in batch order
// (results[i].DeliveryID == batch[i].DeliveryID), and the name of the
// provider that handled it. The batch is split by the plugin's MaxBatch.
//
// A non-nil error means the deliveries from len(results) on were not
// delivered and go to RETRY: results holds the answers for the chunks the
// plugin did answer (often none). When the plugin process died or is
// restarting the error wraps sdkhost.ErrPluginExited; when the providers are
// rate limited it is sdk.IsRateLimited with sdk.RetryAfter; when every
// circuit is open it wraps ErrCircuitOpen; a channel nobody configured gives
// ErrUnknownChannel. Every error except ErrUnknownChannel and ErrClosed is
// sdk.IsRetryable or sdk.IsRateLimited.
//
// Outcomes of single deliveries travel in results, never as errors. A
// RateLimited outcome also throttles the whole provider until its
// retry-after.
func (h *Host) Send(ctx context.Context, channel string, batch []sdk.Delivery) ([]sdk.Result, string, error) {
	h.mu.RLock()
	closed := h.closed
	g := h.channels[channel]
	h.mu.RUnlock()
	if closed {
		return nil, "", ErrClosed
	}
	if g == nil {
		return nil, "", fmt.Errorf("pluginhost: send: channel %q: %w", channel, ErrUnknownChannel)
	}
	if len(batch) == 0 {
		return nil, "", nil
	}
	p, inst, probe, err := g.pick(time.Now())
	if err != nil {
		return nil, "", fmt.Errorf("pluginhost: send: channel %q: %w", channel, err)
	}
	defer inst.release()
	results, err := p.send(ctx, inst, batch, probe)
	if err != nil {
		return results, p.name, fmt.Errorf("pluginhost: send: channel %q provider %q: %w", channel, p.name, err)
	}
	return results, p.name, nil
}

// pick returns the first provider by priority that is serving, not
// throttled and whose circuit lets the send through, with its current
// instance acquired (release it after the send).
func (g *channelGroup) pick(now time.Time) (*provider, *instance, bool, error) {
	var restarting, open, refused int
	var throttledUntil time.Time
	for _, p := range g.providers {
		p.mu.Lock()
		inst := p.inst
		switch {
		case inst == nil:
			if p.state == StateRefused || p.state == StateStopped {
				refused++
			} else {
				restarting++
			}
		case now.Before(p.throttleUntil):
			if throttledUntil.IsZero() || p.throttleUntil.Before(throttledUntil) {
				throttledUntil = p.throttleUntil
			}
		default:
			ok, probe := p.breaker.allow(now)
			if !ok {
				open++
				break
			}
			if !inst.acquire() {
				p.breaker.abandon(probe)
				restarting++
				break
			}
			p.mu.Unlock()
			return p, inst, probe, nil
		}
		p.mu.Unlock()
	}
	switch {
	case !throttledUntil.IsZero():
		return nil, nil, false, sdk.RateLimitedError(ErrThrottled, throttledUntil.Sub(now))
	case restarting > 0:
		return nil, nil, false, fmt.Errorf("provider restarting: %w", sdkhost.ErrPluginExited)
	case open > 0:
		return nil, nil, false, ErrCircuitOpen
	}
	return nil, nil, false, ErrNoProvider
}

// Describe returns the Description of the plugin currently serving channel
// (the first serving provider by priority).
func (h *Host) Describe(channel string) (sdk.Description, bool) {
	h.mu.RLock()
	g := h.channels[channel]
	h.mu.RUnlock()
	if g == nil {
		return sdk.Description{}, false
	}
	for _, p := range g.providers {
		p.mu.Lock()
		inst := p.inst
		p.mu.Unlock()
		if inst != nil {
			return inst.desc, true
		}
	}
	return sdk.Description{}, false
}

// Declared returns what the plugins declare about each configured channel
// in Describe: its class and user types, from the channel's first provider
// (by priority) whose plugin has been described; a provider keeps the
// declaration of its last launch while it restarts. A channel none of
// whose plugins has been described is missing. The rules engine takes
// this map (rules.RuleSet.WithDeclared): a channel's class comes from its
// plugin unless the rules set it.
func (h *Host) Declared() map[string]channel.Declared {
	h.mu.RLock()
	groups := make([]*channelGroup, 0, len(h.channels))
	for _, g := range h.channels {
		groups = append(groups, g)
	}
	h.mu.RUnlock()
	out := make(map[string]channel.Declared, len(groups))
	for _, g := range groups {
		byName := make(map[string]*provider, len(g.providers))
		for _, p := range g.providers {
			byName[p.name] = p
		}
		d, ok := channel.DeclarationOf(g.cfg, func(cp channel.Provider) (channel.Declared, bool) {
			p := byName[providerName(cp)]
			if p == nil {
				return channel.Declared{}, false
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.declared == nil {
				return channel.Declared{}, false
			}
			return *p.declared, true
		})
		if ok {
			out[g.cfg.Name] = d
		}
	}
	return out
}

// OnDeclared registers fn to be called, from the goroutine that launched
// the plugin, whenever a plugin's declaration (class, user types) becomes
// known or changes, so that the caller can read Declared again.
func (h *Host) OnDeclared(fn func()) {
	h.declMu.Lock()
	h.onDeclared = append(h.onDeclared, fn)
	h.declMu.Unlock()
}

func (h *Host) declaredChanged() {
	h.declMu.Lock()
	fns := append([]func(){}, h.onDeclared...)
	h.declMu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// Channels returns the names of the configured channels, sorted.
func (h *Host) Channels() []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]string, 0, len(h.channels))
	for n := range h.channels {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Status returns the state of every provider, by channel then priority.
func (h *Host) Status() []ProviderStatus {
	h.mu.RLock()
	names := make([]string, 0, len(h.channels))
	for n := range h.channels {
		names = append(names, n)
	}
	sort.Strings(names)
	var ps []*provider
	for _, n := range names {
		ps = append(ps, h.channels[n].providers...)
	}
	h.mu.RUnlock()
	now := time.Now()
	out := make([]ProviderStatus, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.status(now))
	}
	return out
}

// Reload hot-swaps every provider whose plugin name, provider name, or
// "channel/provider" equals name: it starts the plugin binary now on disk,
// describes, configures and health-checks it, switches traffic to it,
// drains the old process's in-flight sends and stops it. When the new one
// fails, it is stopped and the old one keeps serving; the error says why,
// and the rejected binary is not run again until it changes or the next
// Reload (a restart after a crash runs the kept copy of the old version).
// A refused or restarting provider is simply started again.
func (h *Host) Reload(ctx context.Context, name string) error {
	h.mu.RLock()
	var ps []*provider
	for _, g := range h.channels {
		for _, p := range g.providers {
			if p.cfg.Plugin == name || p.name == name || p.channel+"/"+p.name == name {
				ps = append(ps, p)
			}
		}
	}
	closed := h.closed
	h.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if len(ps) == 0 {
		return fmt.Errorf("pluginhost: reload %q: %w", name, ErrUnknownPlugin)
	}
	var errs []error
	for _, p := range ps {
		if err := p.requestReload(ctx, "reload"); err != nil {
			errs = append(errs, h.redactErr(fmt.Errorf("pluginhost: reload channel %q provider %q: %w", p.channel, p.name, err)))
		}
	}
	return errors.Join(errs...)
}

// redactErr returns err with the registered secret values replaced in its
// text; errors.Is and errors.As still see the original.
func (h *Host) redactErr(err error) error {
	if err == nil {
		return nil
	}
	msg := h.cfg.Redactor.String(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Reconfigure applies new channel config (rules hot reload): providers that
// are new start, removed ones stop, and changed ones (plugin, checksum,
// priority aside config) are replaced by a new process with the new config,
// switched to only once it is serving; when it fails the old one keeps
// serving and the error says why, unless the new config pins a checksum
// the old process's binary does not have: that process is stopped, and the
// new provider (refused, with the reason in Status) stands in its place,
// so the channel's deliveries wait as RETRY. Unchanged providers keep running. A
// removed or replaced provider's process finishes its sends in flight
// (up to DrainTimeout) before it is stopped, in the background.
func (h *Host) Reconfigure(channels []channel.Config) error {
	if err := validateChannels(channels); err != nil {
		return err
	}
	h.mu.RLock()
	if h.closed {
		h.mu.RUnlock()
		return ErrClosed
	}
	old := map[string]*provider{}
	for _, g := range h.channels {
		for _, p := range g.providers {
			old[p.channel+"/"+p.name] = p
		}
	}
	h.mu.RUnlock()

	keep := map[string]*provider{}
	var fresh []*provider
	replaced := map[string]*provider{}
	for _, ch := range channels {
		for _, pc := range ch.Providers {
			key := ch.Name + "/" + providerName(pc)
			if p, ok := old[key]; ok && sameProvider(p.cfg, pc) {
				keep[key] = p
				continue
			}
			np := newProvider(h, ch, pc)
			keep[key] = np
			fresh = append(fresh, np)
			if p, ok := old[key]; ok {
				replaced[key] = p
			}
		}
	}
	ctx, cancel := context.WithTimeout(h.ctx, h.cfg.StartTimeout+h.cfg.CallTimeout*3)
	h.startProviders(ctx, fresh)
	cancel()
	var errs []error
	for _, np := range fresh {
		key := np.channel + "/" + np.name
		prev := replaced[key]
		if prev == nil {
			continue
		}
		if np.serving() || !prev.serving() {
			continue
		}
		st := np.status(time.Now())
		if running, ok := prev.runsPinned(np.cfg.Checksum); !ok {
			// The new config pins a checksum the running process does
			// not have: it must not serve another send. The new provider
			// (refused or restarting, LastError says why) takes its
			// place, so the channel's deliveries wait as RETRY, and the
			// old process is stopped below once its sends in flight end.
			np.log.Error("plugin refused: the running process does not match the new checksum pin; stopping it, the channel's deliveries wait as RETRY",
				"running_sha256", running, "pin", np.cfg.Checksum, "error", st.LastError)
			errs = append(errs, fmt.Errorf("pluginhost: reconfigure channel %q provider %q: the running binary (sha256 %s) does not match the new checksum pin, stopped; the new one is %s: %s",
				np.channel, np.name, running, st.State, st.LastError))
			continue
		}
		// The changed provider failed to start: keep the old one serving.
		np.log.Error("new provider config failed; the old process keeps serving", "error", st.LastError)
		errs = append(errs, fmt.Errorf("pluginhost: reconfigure channel %q provider %q: new config failed (%s), old one keeps serving", np.channel, np.name, st.LastError))
		np.stopAndWait()
		keep[key] = prev
		delete(replaced, key)
	}
	groups := h.buildGroups(channels, keep)
	h.mu.Lock()
	h.channels = groups
	h.mu.Unlock()
	// Stop what is no longer used, in the background: each one finishes
	// its sends in flight first (bounded by DrainTimeout; Close cuts it
	// short), and the reload does not wait for that.
	inUse := map[*provider]bool{}
	for _, p := range keep {
		inUse[p] = true
	}
	for _, p := range old {
		if !inUse[p] {
			h.log.Info("stopping provider removed or changed by new config", "channel", p.channel, "provider", p.name)
			p.stop()
		}
	}
	return errors.Join(errs...)
}

// Close stops every plugin process and waits for them to exit. Send
// returns ErrClosed afterwards.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	var ps []*provider
	for _, g := range h.channels {
		ps = append(ps, g.providers...)
	}
	h.mu.Unlock()
	h.cancel()
	for _, p := range ps {
		p.stop()
	}
	h.wg.Wait()
	h.keeper.close()
	return nil
}

// watch polls the plugin directory and hot-swaps providers whose binary
// changed on disk.
func (h *Host) watch() {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.WatchInterval)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		}
		h.mu.RLock()
		var ps []*provider
		for _, g := range h.channels {
			ps = append(ps, g.providers...)
		}
		h.mu.RUnlock()
		for _, p := range ps {
			if !p.binaryChanged() {
				continue
			}
			h.log.Info("plugin binary changed on disk; hot-swapping", "plugin", p.cfg.Plugin, "channel", p.channel, "provider", p.name)
			ctx, cancel := context.WithTimeout(h.ctx, h.cfg.StartTimeout+h.cfg.CallTimeout*3+h.cfg.DrainTimeout)
			if err := p.requestReload(ctx, "binary changed"); err != nil {
				h.log.Error("hot swap after binary change failed", "channel", p.channel, "provider", p.name, "error", err)
			}
			cancel()
		}
	}
}
