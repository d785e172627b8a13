package sdk

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

// Version is the SDK's own semantic version. It is separate from
// ProtocolVersion and from each plugin's PluginVersion.
const Version = "1.0.0"

// ProtocolVersion is the plugin protocol version this SDK serves
// (herald.channel.v2). It matches the "Protocol version:" line in
// proto/herald/channel/v2/channel.proto.
const ProtocolVersion = 2

// Environment variables the host sets for a plugin.
const (
	// EnvHostPID carries the host's pid; a plugin whose parent is no longer
	// that process exits (no orphans when the host is killed).
	EnvHostPID = "HERALD_PLUGIN_HOST_PID"
	// EnvHostFD names a file descriptor the plugin inherits from the host:
	// the read end of a pipe whose write end only the host holds. The
	// kernel closes the write end when the host dies, however it dies,
	// so a read that returns tells the plugin at once that its host is
	// gone.
	EnvHostFD = "HERALD_PLUGIN_HOST_FD"
	// EnvLogLevel sets the plugin's log level (trace, debug, info, warn,
	// error); info when unset.
	EnvLogLevel = "HERALD_PLUGIN_LOG_LEVEL"
)

// Handshake is the go-plugin handshake shared by the host and every plugin:
// a plugin in another language checks that the environment variable
// MagicCookieKey holds MagicCookieValue. The protocol version is negotiated
// through VersionedPlugins, not here.
var Handshake = plugin.HandshakeConfig{
	MagicCookieKey:   "HERALD_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "c3156d02fb53fa45fbc249579d3112d2f6eff4756ddbae5adca569380627cbcd",
}

// Closer is implemented by plugins that hold resources (connections,
// files): Serve calls Close once the host has stopped the plugin.
type Closer interface {
	Close() error
}

// ServeOpt configures Serve.
type ServeOpt func(*serveConfig)

type serveConfig struct {
	logger hclog.Logger
	test   *plugin.ServeTestConfig
}

// WithLogger replaces the plugin's logger (JSON to stderr by default, which
// the host re-emits under plugin=<name>).
func WithLogger(l hclog.Logger) ServeOpt {
	return func(c *serveConfig) { c.logger = l }
}

// WithDebug runs the plugin in go-plugin's debug (reattach) mode for
// tests and debuggers: the handshake cookie is not checked, the reattach
// config is sent on reattach, serving stops when ctx is done, and closed
// (if not nil) is closed when it has stopped. The host connects with
// plugin.ClientConfig.Reattach.
func WithDebug(ctx context.Context, reattach chan<- *plugin.ReattachConfig, closed chan<- struct{}) ServeOpt {
	return func(c *serveConfig) {
		c.test = &plugin.ServeTestConfig{Context: ctx, ReattachConfigCh: reattach, CloseCh: closed}
	}
}

// Logger returns the logger Serve set up (hclog's default logger before
// Serve runs). Plugins log through it, or through hclog.Default() and the
// standard log package, which Serve redirects to it.
func Logger() hclog.Logger { return hclog.Default() }

// Serve runs a channel plugin: plugins call it from main as sdk.Serve(New).
// factory is called once. Serve speaks the go-plugin handshake (magic
// cookie, protocol version 2 through VersionedPlugins, AutoMTLS when the
// host asks for it), serves herald.channel.v2 over gRPC and logs JSON
// through hclog to stderr. It returns when the host stops the plugin, after
// calling Close if the Channel implements Closer. When the host process dies
// the plugin exits by itself.
func Serve(factory func() Channel, opts ...ServeOpt) {
	var cfg serveConfig
	for _, o := range opts {
		o(&cfg)
	}
	logger := cfg.logger
	if logger == nil {
		level := hclog.LevelFromString(os.Getenv(EnvLogLevel))
		if level == hclog.NoLevel {
			level = hclog.Info
		}
		logger = hclog.New(&hclog.LoggerOptions{
			Level:      level,
			Output:     os.Stderr,
			JSONFormat: true,
		})
	}
	hclog.SetDefault(logger)
	log.SetFlags(0)
	log.SetOutput(logger.StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true}))

	impl := factory()
	if impl == nil {
		logger.Error("sdk.Serve: factory returned a nil Channel")
		os.Exit(1)
	}
	var host *hostWatch
	if cfg.test == nil {
		host = newHostWatch()
		go host.watch(logger, os.Getenv(EnvHostPID), os.Getenv(EnvHostFD), hostPoll, os.Exit)
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{
			ProtocolVersion: {dispenseName: &channelPlugin{impl: impl, logger: logger, host: host}},
		},
		GRPCServer: plugin.DefaultGRPCServer,
		Logger:     logger,
		Test:       cfg.test,
	})
	if c, ok := impl.(Closer); ok {
		if err := c.Close(); err != nil {
			logger.Warn("close", "error", err)
		}
	}
}

// hostPoll is how often a plugin compares its parent pid with the host's,
// the fallback for hosts that pass no EnvHostFD.
const hostPoll = 50 * time.Millisecond

// hostGoneWait bounds how long a plugin whose host died waits for its
// cancelled Send calls to return before it exits.
const hostGoneWait = 2 * time.Second

// hostWatch tells a plugin that its host process is gone. Its ctx is
// cancelled then, and every Send runs under it too (grpcServer.Send), so
// a batch in flight stops at once instead of going on to the provider for
// a host that can no longer record the outcome: the host's restart sends
// those deliveries again, and whatever the plugin sent meanwhile would
// reach the provider twice.
type hostWatch struct {
	ctx      context.Context
	gone     context.CancelFunc
	inflight atomic.Int64 // Send calls running
}

func newHostWatch() *hostWatch {
	ctx, cancel := context.WithCancel(context.Background())
	return &hostWatch{ctx: ctx, gone: cancel}
}

// watch waits until the host is gone: the pipe named by hostFD
// (EnvHostFD) reads EOF, or the parent is no longer the host (the kernel
// re-parents an orphan, so getppid changes; checked every poll). hostPID,
// when set, is the host's pid as the host saw it. Then it cancels w.ctx,
// gives in-flight Send calls up to hostGoneWait to return and calls exit
// with 3 (os.Exit in Serve).
func (w *hostWatch) watch(logger hclog.Logger, hostPID, hostFD string, poll time.Duration, exit func(int)) {
	want := os.Getppid()
	if pid, err := strconv.Atoi(hostPID); err == nil && pid > 0 {
		want = pid
	}
	gone := make(chan string, 2)
	if fd, err := strconv.Atoi(hostFD); err == nil && fd > 2 {
		if f := os.NewFile(uintptr(fd), "herald-host"); f != nil {
			go func() {
				var b [1]byte
				_, err := f.Read(b[:]) // the host never writes: this returns when it dies
				gone <- fmt.Sprintf("host pipe closed (%v)", err)
			}()
		}
	}
	go func() {
		t := time.NewTicker(poll)
		defer t.Stop()
		for range t.C {
			if ppid := os.Getppid(); ppid != want {
				gone <- fmt.Sprintf("parent is pid %d", ppid)
				return
			}
		}
	}()
	why := <-gone
	w.gone()
	logger.Warn("host process is gone; in-flight sends cancelled, exiting", "host_pid", want, "reason", why,
		"sends", w.inflight.Load())
	deadline := time.Now().Add(hostGoneWait)
	for w.inflight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	exit(3)
}

// bind returns ctx, also cancelled when the host is gone, and the
// function that ends the call. w may be nil (debug mode, tests).
func (w *hostWatch) bind(ctx context.Context) (context.Context, func()) {
	if w == nil {
		return ctx, func() {}
	}
	w.inflight.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(w.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
		w.inflight.Add(-1)
	}
}
