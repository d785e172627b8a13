package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/tracing"
	"github.com/heraldhq/herald/sdk"
	sdkhost "github.com/heraldhq/herald/sdk/host"
)

// State is a provider's state as `herald plugins ls` shows it.
type State string

// Provider states.
const (
	// StateStarting: the first start attempt is under way.
	StateStarting State = "starting"
	// StateServing: the plugin takes traffic.
	StateServing State = "serving"
	// StateRestarting: the plugin crashed or failed to start and is being
	// restarted with backoff; its channel's deliveries wait as RETRY. A
	// provider whose binary was rejected and of which no good version is
	// kept stays here until a new binary is installed (LastError says so).
	StateRestarting State = "restarting"
	// StateCircuitOpen: the plugin runs but its circuit breaker keeps
	// traffic on the next provider (after failed sends or failed health
	// checks).
	StateCircuitOpen State = "circuit_open"
	// StateRefused: the plugin will not be started until the config or the
	// binary changes (checksum mismatch, missing binary, bad config, wrong
	// channel type).
	StateRefused State = "refused"
	// StateStopped: the host stopped the plugin.
	StateStopped State = "stopped"
)

// ProviderStatus describes one provider of one channel.
type ProviderStatus struct {
	// Name is the plugin's short name ("email" for herald-plugin-email).
	Name string `json:"name"`
	// Version is the running plugin's PluginVersion.
	Version string `json:"version"`
	// Channel is the channel the provider serves.
	Channel string `json:"channel"`
	// Provider is the provider's name within the channel.
	Provider string `json:"provider"`
	// Priority orders failover: lower is tried first.
	Priority int `json:"priority"`
	// State is serving, restarting, circuit_open, refused, starting or
	// stopped.
	State State `json:"state"`
	// PID is the plugin process id (0 when none runs).
	PID int `json:"pid"`
	// StartedAt is when the running process started.
	StartedAt time.Time `json:"started_at,omitzero"`
	// Uptime is how long the running process has served, in nanoseconds in
	// JSON.
	Uptime time.Duration `json:"uptime"`
	// Restarts counts restarts after crashes.
	Restarts int `json:"restarts"`
	// ThrottledUntil is set while the provider is rate limited.
	ThrottledUntil time.Time `json:"throttled_until,omitzero"`
	// LastError is the most recent error (start, crash, health, send).
	LastError string `json:"last_error,omitempty"`
	// Binary is where the running process's binary was copied from: the
	// plugin's path, or the host's kept copy of the last good version when
	// a restart found a rejected binary at the plugin's path (LastError
	// then says so). Without a process, the plugin's path.
	Binary string `json:"binary"`
	// Executable is the host's private copy of the binary that the running
	// process executes (SHA256 is its checksum); empty without a process.
	Executable string `json:"executable,omitempty"`
	// SHA256 is the checksum of the running binary.
	SHA256 string `json:"sha256,omitempty"`
	// Capabilities are the optional features the plugin declared in
	// Description.Capabilities at its last launch, sorted. The host records
	// and shows them; it acts on none yet.
	Capabilities []string `json:"capabilities,omitempty"`
	// ProbeReady is set while State is circuit_open and the circuit would
	// let the next send through as its half-open probe (the cooldown has
	// passed and health checks pass).
	ProbeReady bool `json:"probe_ready,omitempty"`
}

// Up reports whether the provider can take the channel's next send: it
// serves, or its circuit is open but ready for the probe. Readiness counts
// the second as up: on a quiet daemon no send comes to close the circuit,
// and a readiness that waited for one would keep the daemon out of service
// (and so without traffic) for good.
func (s ProviderStatus) Up() bool {
	return s.State == StateServing || (s.State == StateCircuitOpen && s.ProbeReady)
}

// refusedError marks a start failure that retrying cannot fix.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

func refused(format string, args ...any) error {
	return &refusedError{err: fmt.Errorf(format, args...)}
}

// provider is one configured plugin instance serving one channel. Its
// supervisor goroutine (run) owns starting, health checks, restarts and
// swaps; Send reads the current instance under mu.
type provider struct {
	h       *Host
	channel string
	cfg     channel.Provider
	name    string
	log     hclog.Logger

	mu            sync.Mutex
	priority      int
	inst          *instance
	state         State
	lastErr       string
	restarts      int
	throttleUntil time.Time
	breaker       breaker
	// badSum is the checksum of a binary that failed to start, so the
	// watcher does not retry it until it changes again, and a restart after
	// a crash runs good instead. badErr says why it failed.
	badSum string
	badErr string
	// good is the kept copy of the last binary that passed a launch here
	// (nil when none could be kept).
	good *keptBinary
	// lastSeen is the binary's stat when last looked at.
	lastSeen fileStamp
	// declared is what the plugin of the last launch declared in
	// Describe (nil: never launched).
	declared *channel.Declared
	// capabilities is what the plugin of the last launch listed in
	// Description.Capabilities, sorted. The host records and shows it
	// (ProviderStatus.Capabilities); it acts on none yet.
	capabilities []string
	// logLim bounds the plugin's log lines the host re-emits, across
	// restarts.
	logLim *logLimit

	crashed   chan *instance
	reloads   chan reloadRequest
	quit      chan struct{}
	quitOnce  sync.Once
	done      chan struct{}
	firstDone chan struct{}
	drains    sync.WaitGroup
}

type reloadRequest struct {
	ctx    context.Context
	reason string
	result chan error
}

// setDeclared records what desc declares about the channel and reports
// whether it changed; it records the plugin's capabilities too (they
// change no decision, so they are not counted as a change). p.mu is held.
func (p *provider) setDeclared(desc sdk.Description) bool {
	p.capabilities = slices.Sorted(slices.Values(desc.Capabilities))
	d := channel.Declared{Plugin: p.cfg.Plugin, BestEffort: desc.Class == sdk.BestEffort, UserTypes: slices.Clone(desc.UserTypes)}
	if old := p.declared; old != nil && old.Plugin == d.Plugin && old.BestEffort == d.BestEffort && slices.Equal(old.UserTypes, d.UserTypes) {
		return false
	}
	p.declared = &d
	return true
}

func providerName(p channel.Provider) string {
	if p.Name != "" {
		return p.Name
	}
	return p.Plugin
}

func sameProvider(a, b channel.Provider) bool {
	return a.Plugin == b.Plugin && strings.EqualFold(a.Checksum, b.Checksum) && providerName(a) == providerName(b) &&
		reflect.DeepEqual(a.Config, b.Config)
}

func newProvider(h *Host, ch channel.Config, cfg channel.Provider) *provider {
	name := providerName(cfg)
	return &provider{
		h:        h,
		channel:  ch.Name,
		cfg:      cfg,
		name:     name,
		log:      h.log.With("plugin", cfg.Plugin, "channel", ch.Name, "provider", name),
		priority: cfg.Priority,
		state:    StateStarting,
		breaker:  breaker{policy: h.breakerPolicy(ch)},
		logLim: newLogLimit(func(n int) {
			h.cfg.Metrics.PluginLogDropped(ch.Name, name, n)
		}),
		crashed:   make(chan *instance, 4),
		reloads:   make(chan reloadRequest),
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
		firstDone: make(chan struct{}),
	}
}

func (p *provider) binaryPath() string { return binaryPath(p.h.cfg.Dir, p.cfg.Plugin) }

// run is the provider's supervisor.
func (p *provider) run() {
	defer close(p.done)
	defer func() {
		p.mu.Lock()
		inst := p.inst
		p.inst = nil
		p.state = StateStopped
		p.mu.Unlock()
		if inst != nil {
			p.drainAndKill(inst)
		}
		p.drains.Wait()
		p.mu.Lock()
		good := p.good
		p.good = nil
		p.mu.Unlock()
		if good != nil {
			p.h.keeper.release(good.path)
		}
	}()
	health := time.NewTicker(p.h.cfg.HealthInterval)
	defer health.Stop()
	attempt := 0
	first := true
	for {
		p.mu.Lock()
		inst, state := p.inst, p.state
		p.mu.Unlock()
		if inst == nil && state != StateRefused {
			if d := p.h.restartDelay(attempt); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-p.quit:
					t.Stop()
					return
				case req := <-p.reloads:
					t.Stop()
					req.result <- p.startNow(req.ctx, &attempt, true)
					continue
				case <-t.C:
				}
			}
			ctx, cancel := context.WithTimeout(p.h.ctx, p.h.cfg.StartTimeout+3*p.h.cfg.CallTimeout)
			p.startNow(ctx, &attempt, false)
			cancel()
			if first {
				first = false
				close(p.firstDone)
			}
			continue
		}
		if first {
			first = false
			close(p.firstDone)
		}
		var exited <-chan struct{}
		if inst != nil {
			exited = inst.done
		}
		select {
		case <-p.quit:
			return
		case <-exited:
			p.onCrash(inst, "plugin process exited", &attempt)
		case c := <-p.crashed:
			if c == inst {
				p.onCrash(inst, "plugin connection lost", &attempt)
			}
		case req := <-p.reloads:
			req.result <- p.swap(req.ctx, req.reason, &attempt)
		case <-health.C:
			if inst != nil {
				p.checkHealth(inst, &attempt)
			}
		}
	}
}

// startNow launches an instance when none serves; it records the outcome
// in the provider's state. An explicit start (a reload) runs the binary at
// the plugin's path. An automatic one (restart after a crash or a failed
// start) runs the kept copy of the last binary that passed a launch, never
// whatever is on disk now: a changed binary runs only after `herald
// plugins reload` or a watched hot swap. Without a kept copy (the first
// start, or the copy was lost) it runs the plugin's path, unless the host
// rejected that binary: then it waits, retrying with backoff, for a new
// binary or a reload.
func (p *provider) startNow(ctx context.Context, attempt *int, explicit bool) error {
	p.mu.Lock()
	if p.inst != nil {
		p.mu.Unlock()
		return p.swap(ctx, "reload", attempt)
	}
	good, badSum, badErr, crashErr := p.good, p.badSum, p.badErr, p.lastErr
	p.mu.Unlock()
	var kept *keptBinary
	rejected := false
	if !explicit && badSum != "" {
		st, err := stampFile(p.binaryPath(), p.lastStamp())
		rejected = err == nil && st.sum == badSum
	}
	switch {
	case !explicit && good != nil:
		kept = good
		if rejected {
			p.log.Warn("the plugin binary on disk was rejected; restarting the last good version from its kept copy",
				"rejected_sha256", badSum, "reason", badErr, "good_version", good.version, "good_sha256", good.sum, "copy", good.path)
		} else if st, err := stampFile(p.binaryPath(), p.lastStamp()); err == nil && st.sum != good.sum {
			p.log.Warn("the plugin binary on disk changed; restarting the verified kept copy (the new binary runs after `herald plugins reload` or a hot swap)",
				"on_disk_sha256", st.sum, "version", good.version, "sha256", good.sum, "copy", good.path)
		}
	case rejected:
		err := fmt.Errorf("not restarting %s: that binary (sha256 %s) was rejected (%s) and no copy of a good version is kept; install a good binary or run `herald plugins reload %s`",
			p.binaryPath(), badSum, badErr, p.cfg.Plugin)
		p.mu.Lock()
		p.state = StateRestarting
		p.lastErr = err.Error()
		*attempt++
		p.mu.Unlock()
		p.log.Error("plugin not restarted: its binary was rejected and no good version is kept", "rejected_sha256", badSum,
			"reason", badErr, "next_check_in", p.h.restartDelay(*attempt))
		return err
	}
	inst, tried, err := p.launch(ctx, kept)
	if err != nil {
		p.startFailed(err, tried, kept, attempt)
		return err
	}
	p.mu.Lock()
	p.inst = inst
	p.state = StateServing
	p.breaker.health(time.Now(), true)
	declChanged := p.setDeclared(inst.desc)
	if kept == nil {
		p.badSum, p.badErr = "", ""
	} else if rejected {
		// Say so until the next error: ls shows why an old version runs.
		p.lastErr = fmt.Sprintf("serving the last good version %s from its kept copy %s: the binary on disk (sha256 %s) was rejected: %s",
			kept.version, kept.path, badSum, badErr)
		if crashErr != "" {
			p.lastErr = crashErr + "; " + p.lastErr
		}
	}
	p.mu.Unlock()
	if declChanged {
		p.h.declaredChanged()
	}
	p.log.Info("plugin serving", "version", inst.desc.PluginVersion, "pid", inst.pid, "sha256", inst.stamp.sum, "binary", inst.path, "executable", inst.exe)
	p.keepGood(inst)
	return nil
}

// startFailed records a failed start from kept (nil: the plugin's path),
// whose binary had stamp tried.
func (p *provider) startFailed(err error, tried fileStamp, kept *keptBinary, attempt *int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastErr = err.Error()
	var re *refusedError
	switch {
	case kept != nil:
		if errors.Is(err, errKeptCopyBad) && p.good == kept {
			p.good = nil
			p.h.keeper.release(kept.path)
		}
		p.state = StateRestarting
		*attempt++
		p.log.Error("the last good version failed to start from its kept copy; retrying with backoff", "error", err,
			"attempt", *attempt, "next_in", p.h.restartDelay(*attempt))
	case p.good != nil && tried.sum != "" && tried.sum != p.good.sum:
		// A new binary that fails while a good version is kept is
		// rejected, as in a failed hot swap: the next attempt runs the
		// good version.
		p.state = StateRestarting
		p.badSum, p.badErr = tried.sum, err.Error()
		*attempt++
		p.log.Error("plugin binary on disk failed to start; rejected, the next attempt restarts the last good version from its kept copy",
			"error", err, "rejected_sha256", tried.sum, "good_version", p.good.version, "next_in", p.h.restartDelay(*attempt))
	case errors.As(err, &re):
		p.state = StateRefused
		p.badSum, p.badErr = rejectedSum(tried, p.lastSeen), err.Error()
		p.log.Error("plugin refused", "error", err)
	default:
		p.state = StateRestarting
		*attempt++
		p.log.Error("plugin failed to start; retrying with backoff", "error", err, "attempt", *attempt,
			"next_in", p.h.restartDelay(*attempt))
	}
}

// rejectedSum is the checksum of a binary that failed to launch: the one
// launch read, else the last one seen at the plugin's path.
func rejectedSum(tried, lastSeen fileStamp) string {
	if tried.sum != "" {
		return tried.sum
	}
	return lastSeen.sum
}

// keepGood keeps the private copy inst runs, which has just passed its
// launch, as the provider's last good version (unless it already is).
func (p *provider) keepGood(inst *instance) {
	p.mu.Lock()
	cur := p.good
	p.mu.Unlock()
	if cur != nil && cur.path == inst.exe {
		return
	}
	if err := p.h.keeper.ref(inst.exe); err != nil {
		p.log.Warn("the verified plugin binary is not kept as the last good version: a restart after a rejected hot swap will wait for a good binary", "error", err)
		return
	}
	p.mu.Lock()
	prev := p.good
	p.good = &keptBinary{path: inst.exe, sum: inst.stamp.sum, version: inst.desc.PluginVersion}
	p.mu.Unlock()
	if prev != nil {
		p.h.keeper.release(prev.path)
	}
	p.log.Debug("kept the verified plugin binary as the last good version", "version", inst.desc.PluginVersion, "sha256", inst.stamp.sum, "copy", inst.exe)
}

// onCrash drops a dead instance; the loop restarts it with backoff.
func (p *provider) onCrash(inst *instance, why string, attempt *int) {
	p.mu.Lock()
	if p.inst != inst {
		p.mu.Unlock()
		return
	}
	p.inst = nil
	p.state = StateRestarting
	p.restarts++
	p.lastErr = why
	served := time.Since(inst.started)
	if served > p.h.cfg.Restart.Max {
		*attempt = 0
	}
	*attempt++
	p.mu.Unlock()
	p.log.Error("plugin crashed; restarting", "reason", why, "pid", inst.pid, "version", inst.desc.PluginVersion,
		"restart_in", p.h.restartDelay(*attempt))
	inst.kill()
}

// checkHealth asks the plugin about its provider. A failed check (an
// unhealthy report, an error or no answer within CallTimeout) counts
// toward the circuit breaker: BreakerPolicy.HealthFailures of them in a row
// open the circuit, so traffic goes to the channel's next provider, and no
// probe goes to this one until a check passes again.
func (p *provider) checkHealth(inst *instance, attempt *int) {
	ctx, cancel := context.WithTimeout(p.h.ctx, p.h.cfg.CallTimeout)
	defer cancel()
	rep, err := inst.ch.Health(ctx, sdk.HealthRequest{})
	if p.h.ctx.Err() != nil {
		return // the host is closing
	}
	if errors.Is(err, sdkhost.ErrPluginExited) {
		p.onCrash(inst, "health: "+err.Error(), attempt)
		return
	}
	healthy := err == nil && rep.Healthy
	p.mu.Lock()
	if p.inst != inst {
		// Swapped or crashed meanwhile: the answer is about a process
		// that no longer serves.
		p.mu.Unlock()
		return
	}
	wasFailing := p.breaker.healthFails
	opened := p.breaker.health(time.Now(), healthy)
	fails, open, threshold := p.breaker.healthFails, p.breaker.open(), p.breaker.policy.HealthFailures
	msg := rep.Message
	if err != nil {
		msg = err.Error()
	}
	if !healthy {
		p.lastErr = "health: " + msg
	}
	p.mu.Unlock()
	switch {
	case healthy && wasFailing > 0 && open:
		p.log.Info("plugin reports its provider healthy again; the next send after the breaker cooldown probes it", "failed_checks", wasFailing)
	case healthy && wasFailing > 0:
		p.log.Info("plugin reports its provider healthy again", "failed_checks", wasFailing)
	case opened:
		p.log.Error("provider unhealthy: circuit opened, traffic goes to the channel's next provider", "message", msg, "failed_checks", fails)
	case !healthy:
		p.log.Warn("plugin reports unhealthy provider", "message", msg, "failed_checks", fails,
			"opens_circuit_at", threshold)
	}
}

// swap is the hot swap: start a new instance from the binary now on disk,
// switch traffic to it when it is healthy, then drain and stop the old one.
// When the new instance fails, the old one keeps serving.
func (p *provider) swap(ctx context.Context, reason string, attempt *int) error {
	p.mu.Lock()
	old := p.inst
	p.mu.Unlock()
	if old == nil {
		return p.startNow(ctx, attempt, true)
	}
	next, tried, err := p.launch(ctx, nil)
	if err != nil {
		p.mu.Lock()
		p.lastErr = "swap: " + err.Error()
		p.badSum, p.badErr = rejectedSum(tried, p.lastSeen), p.lastErr
		p.mu.Unlock()
		p.log.Error("hot swap failed; the old version keeps serving", "reason", reason, "error", err,
			"serving_version", old.desc.PluginVersion, "serving_pid", old.pid)
		return fmt.Errorf("new plugin failed, version %s (pid %d) keeps serving: %w", old.desc.PluginVersion, old.pid, err)
	}
	p.mu.Lock()
	p.inst = next
	p.state = StateServing
	p.badSum, p.badErr = "", ""
	p.breaker.health(time.Now(), true)
	declChanged := p.setDeclared(next.desc)
	p.mu.Unlock()
	if declChanged {
		p.h.declaredChanged()
	}
	p.log.Info("hot swap: traffic switched", "reason", reason,
		"old_version", old.desc.PluginVersion, "old_pid", old.pid,
		"new_version", next.desc.PluginVersion, "new_pid", next.pid)
	p.drains.Add(1)
	go func() {
		defer p.drains.Done()
		dctx, cancel := context.WithTimeout(context.Background(), p.h.cfg.DrainTimeout)
		defer cancel()
		if err := old.drain(dctx); err != nil {
			p.log.Warn("hot swap: old plugin still busy after drain timeout; stopping it", "pid", old.pid, "error", err)
		}
		old.kill()
		p.log.Info("hot swap: old plugin stopped", "version", old.desc.PluginVersion, "pid", old.pid)
	}()
	p.keepGood(next)
	return nil
}

// requestReload asks the supervisor to swap and waits for the outcome.
func (p *provider) requestReload(ctx context.Context, reason string) error {
	req := reloadRequest{ctx: ctx, reason: reason, result: make(chan error, 1)}
	select {
	case p.reloads <- req:
	case <-p.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.result:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// binaryChanged reports whether the binary on disk differs from what the
// provider last ran or last refused.
func (p *provider) binaryChanged() bool {
	st, err := stampFile(p.binaryPath(), p.lastStamp())
	if err != nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := p.lastSeen
	p.lastSeen = st
	if p.inst != nil {
		return st.sum != p.inst.stamp.sum && st.sum != p.badSum
	}
	if p.state == StateRefused {
		return st.sum != prev.sum && st.sum != p.badSum
	}
	return false
}

func (p *provider) lastStamp() fileStamp {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastSeen
}

// send delivers batch through inst in chunks of MaxBatch.
func (p *provider) send(ctx context.Context, inst *instance, batch []sdk.Delivery, probe bool) ([]sdk.Result, error) {
	max := inst.desc.MaxBatch
	if max <= 0 {
		max = 1
	}
	results := make([]sdk.Result, 0, len(batch))
	failed := false
	// gaveUp: the caller's context ended the call before the provider
	// answered, which says nothing about the provider.
	gaveUp := false
	var sendErr error
	for start := 0; start < len(batch); start += max {
		chunk := batch[start:min(start+max, len(batch))]
		// The host's own bound applies under any deadline of the caller's:
		// a provider that hangs past it has failed (and counts toward its
		// breaker), while a caller's earlier deadline only ends the call.
		callCtx, cancel := context.WithTimeout(ctx, p.h.cfg.SendTimeout)
		// The host's span of the call; the sdk sends its context to the
		// plugin as gRPC metadata, where the plugin's Send continues it.
		callCtx, span := tracing.StartLinked(callCtx, "herald.plugin.send", trace.SpanKindClient,
			tracing.Channel.String(p.channel), tracing.Provider.String(p.name), tracing.BatchSize.Int(len(chunk)))
		called := time.Now()
		resp, err := inst.ch.Send(callCtx, sdk.SendRequest{Deliveries: chunk})
		p.h.cfg.Metrics.PluginSend(p.channel, p.name, time.Since(called))
		res := resp.Results
		cancel()
		tracing.End(span, sendOutcome(res, err), err != nil)
		if err != nil {
			sendErr = err
			switch {
			case errors.Is(err, sdkhost.ErrPluginExited):
				failed = true
				select {
				case p.crashed <- inst:
				default:
				}
			case sdk.IsRateLimited(err):
				p.throttle(sdk.RetryAfter(err))
			case ctx.Err() != nil:
				// The caller gave up; not the provider's fault.
				gaveUp = true
			default:
				failed = true
			}
			break
		}
		norm, issues, anyDone, rateLimit := normalize(chunk, res)
		for _, is := range issues {
			p.log.Warn("plugin broke the contract", "issue", is)
		}
		if rateLimit >= 0 {
			p.throttle(rateLimit)
		}
		if !anyDone {
			failed = true
		}
		results = append(results, norm...)
	}
	p.mu.Lock()
	if gaveUp && !failed && len(results) == 0 {
		// Inconclusive: neither a success nor a failure. A half-open probe
		// cut short this way leaves the circuit half-open for the next
		// send to probe (see breaker.abandon).
		p.breaker.abandon(probe)
	} else {
		p.breaker.record(time.Now(), failed, probe)
	}
	if sendErr != nil {
		p.lastErr = "send: " + sendErr.Error()
	}
	p.mu.Unlock()
	return results, sendErr
}

// sendOutcome sums up a Send call for its span: "error" when the call
// failed, else the outcome its results share, or "mixed".
func sendOutcome(res []sdk.Result, err error) string {
	if err != nil {
		return "error"
	}
	out := ""
	for _, r := range res {
		switch o := r.Outcome.String(); {
		case out == "":
			out = o
		case out != o:
			return "mixed"
		}
	}
	return out
}

// throttle holds the provider back for d (1s when the plugin gave none).
func (p *provider) throttle(d time.Duration) {
	if d <= 0 {
		d = time.Second
	}
	d = min(d, time.Hour)
	until := time.Now().Add(d)
	p.mu.Lock()
	if until.After(p.throttleUntil) {
		p.throttleUntil = until
	}
	p.mu.Unlock()
	p.log.Warn("provider rate limited; throttling", "for", d)
}

// normalize orders results like chunk and fills gaps: a delivery without a
// result, or with an unspecified outcome, is Retryable. It reports contract violations, whether any delivery
// reached a final answer from the provider (sent, permanent or rate
// limited), and the longest rate-limit hint (-1 when none).
func normalize(chunk []sdk.Delivery, res []sdk.Result) (out []sdk.Result, issues []string, anyDone bool, rateLimit time.Duration) {
	rateLimit = -1
	byID := make(map[string]sdk.Result, len(res))
	for _, r := range res {
		if _, dup := byID[r.DeliveryID]; dup {
			issues = append(issues, fmt.Sprintf("duplicate result for delivery %q", r.DeliveryID))
			continue
		}
		byID[r.DeliveryID] = r
	}
	out = make([]sdk.Result, len(chunk))
	for i, d := range chunk {
		r, ok := byID[d.DeliveryID]
		if !ok {
			issues = append(issues, fmt.Sprintf("no result for delivery %q", d.DeliveryID))
			r = sdk.Retry(d.DeliveryID, "plugin returned no result for this delivery", 0)
		}
		delete(byID, d.DeliveryID)
		if r.Outcome != sdk.OutcomeSent && r.Outcome != sdk.OutcomeRetryable &&
			r.Outcome != sdk.OutcomeRateLimited && r.Outcome != sdk.OutcomePermanent && r.Outcome != sdk.OutcomeSkipped {
			// An unset (or unknown) outcome breaks the contract; retrying is
			// the reading that loses nothing.
			issues = append(issues, fmt.Sprintf("contract violation: delivery %q has outcome %s; retrying it", d.DeliveryID, r.Outcome))
			r = sdk.Retry(d.DeliveryID, "plugin contract violation: result with outcome "+r.Outcome.String(), r.RetryAfter)
		}
		r.Reason = Bound(r.Reason, MaxReasonBytes)
		r.Code = Bound(r.Code, MaxCodeBytes)
		r.ProviderMessageID = Bound(r.ProviderMessageID, MaxMessageIDBytes)
		switch r.Outcome {
		case sdk.OutcomeSent, sdk.OutcomePermanent, sdk.OutcomeSkipped:
			anyDone = true
		case sdk.OutcomeRateLimited:
			anyDone = true
			rateLimit = max(rateLimit, r.RetryAfter)
		}
		out[i] = r
	}
	for id := range byID {
		issues = append(issues, fmt.Sprintf("result for unknown delivery %q", Bound(id, 128)))
	}
	return out, issues, anyDone, rateLimit
}

// Bounds of what a plugin's result carries into the store, the API and the
// logs; longer values are cut by Bound.
const (
	MaxReasonBytes    = 1024
	MaxCodeBytes      = 128
	MaxMessageIDBytes = 256
)

// Bound returns s as valid UTF-8 (invalid bytes become U+FFFD) of at most
// n bytes: a longer s is cut at a rune boundary and ends in a marker
// saying how many bytes were cut.
func Bound(s string, n int) string {
	if len(s) <= n && utf8.ValidString(s) {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	marker := fmt.Sprintf("…[truncated from %d bytes]", len(s))
	keep := max(n-len(marker), 0)
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + marker
}

// runsPinned reports whether p's running process may serve under the
// checksum pin (hex SHA-256, optionally "sha256:"-prefixed; empty pins
// nothing), and the running binary's checksum.
func (p *provider) runsPinned(pin string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inst == nil {
		return "", true
	}
	sum := p.inst.stamp.sum
	if pin == "" {
		return sum, true
	}
	return sum, strings.TrimPrefix(strings.ToLower(pin), "sha256:") == sum
}

func (p *provider) serving() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inst != nil
}

func (p *provider) status(now time.Time) ProviderStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := ProviderStatus{
		Name:      p.cfg.Plugin,
		Channel:   p.channel,
		Provider:  p.name,
		Priority:  p.priority,
		State:     p.state,
		Restarts:  p.restarts,
		LastError: p.h.cfg.Redactor.String(p.lastErr),
		Binary:    p.binaryPath(),
	}
	s.Capabilities = slices.Clone(p.capabilities)
	if p.inst != nil {
		s.Binary, s.Executable = p.inst.path, p.inst.exe
	}
	if now.Before(p.throttleUntil) {
		s.ThrottledUntil = p.throttleUntil
	}
	if p.inst != nil {
		s.Version = p.inst.desc.PluginVersion
		s.PID = p.inst.pid
		s.StartedAt = p.inst.started
		s.Uptime = now.Sub(p.inst.started).Truncate(time.Millisecond)
		s.SHA256 = p.inst.stamp.sum
		if p.state == StateServing && p.breaker.open() {
			s.State = StateCircuitOpen
			s.ProbeReady = p.breaker.probeReady(now)
		}
	}
	return s
}

func (p *provider) stop() {
	p.quitOnce.Do(func() { close(p.quit) })
}

// drainAndKill stops a provider's last instance. While the host runs (the
// provider was removed or replaced by new config) the sends in flight
// finish first, up to DrainTimeout, as in a hot swap: killing them would
// turn deliveries already handed to the plugin into failed attempts, and
// best-effort ones into FAILED. Once the host is closing it kills at once.
func (p *provider) drainAndKill(inst *instance) {
	if p.h.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(p.h.ctx, p.h.cfg.DrainTimeout)
		if err := inst.drain(ctx); err != nil {
			p.log.Warn("stopping provider: plugin still busy after the drain timeout; stopping it", "pid", inst.pid, "error", err)
		}
		cancel()
	}
	inst.kill()
}

// stopAndWait stops the supervisor (which drains and kills the plugin) and
// waits.
func (p *provider) stopAndWait() {
	p.stop()
	<-p.done
}

func (p *provider) setPriority(pri int) {
	p.mu.Lock()
	p.priority = pri
	p.mu.Unlock()
}

// setBreakerPolicy applies a (possibly reloaded) policy; the circuit keeps
// its state.
func (p *provider) setBreakerPolicy(pol BreakerPolicy) {
	p.mu.Lock()
	p.breaker.policy = pol
	p.mu.Unlock()
}
