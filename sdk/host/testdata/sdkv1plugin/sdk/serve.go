package sdk

import (
	"context"
	"log"
	"os"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

// Version is the SDK's own semantic version. It is separate from
// ProtocolVersion and from each plugin's PluginVersion.
const Version = "1.0.0"

// ProtocolVersion is the plugin protocol version this SDK speaks
// (herald.channel.v1). It must match the "Protocol version:" line in
// proto/herald/channel/v1/channel.proto.
const ProtocolVersion = 1

// DispenseName is the name the channel plugin is dispensed under in the
// plugin set (plugin.ClientProtocol.Dispense(sdk.DispenseName)).
const DispenseName = "channel"

// Environment variables the host sets for a plugin.
const (
	// EnvHostPID carries the host's pid; a plugin whose parent is no longer
	// that process exits (no orphans when the host is killed).
	EnvHostPID = "HERALD_PLUGIN_HOST_PID"
	// EnvLogLevel sets the plugin's log level (trace, debug, info, warn,
	// error); info when unset.
	EnvLogLevel = "HERALD_PLUGIN_LOG_LEVEL"
)

// Handshake is the go-plugin handshake shared by the host and every plugin.
// The protocol version is negotiated through VersionedPlugins, not here.
var Handshake = plugin.HandshakeConfig{
	MagicCookieKey:   "HERALD_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "c3156d02fb53fa45fbc249579d3112d2f6eff4756ddbae5adca569380627cbcd",
}

// HostPluginSet returns the VersionedPlugins a host puts in
// plugin.ClientConfig. Dispensing DispenseName from a client gives an
// sdk.Channel whose methods call the plugin process.
func HostPluginSet() map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		ProtocolVersion: {DispenseName: &channelPlugin{}},
	}
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
// cookie, protocol version 1 through VersionedPlugins, AutoMTLS when the
// host asks for it), serves herald.channel.v1 over gRPC and logs JSON
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
	if cfg.test == nil {
		go watchHost(logger, os.Getenv(EnvHostPID), time.Second/2)
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{
			ProtocolVersion: {DispenseName: &channelPlugin{impl: impl, logger: logger}},
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

// watchHost exits the process when its parent is no longer the host: the
// kernel re-parents an orphan, so getppid changes. hostPID, when set, is
// the host's pid as the host saw it.
func watchHost(logger hclog.Logger, hostPID string, every time.Duration) {
	want := os.Getppid()
	if pid, err := strconv.Atoi(hostPID); err == nil && pid > 0 {
		want = pid
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for range t.C {
		if ppid := os.Getppid(); ppid != want {
			logger.Warn("host process is gone; exiting", "host_pid", want, "ppid", ppid)
			os.Exit(3)
		}
	}
}
