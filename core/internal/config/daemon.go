// Package config loads the daemon file of `herald serve` (HCL2 or YAML,
// chosen by file extension) with koanf: the defaults, the file and the
// HERALD_* environment overrides, layered in that order. Every section of
// the file is a component's own Config type (relay.Config for relay
// { ... }, and so on), which holds each setting's doc comment, default and
// Validate; the keys, their defaults and environment variables derive
// from those structs by reflection over their koanf tags, and so does the
// configuration reference (docs/configuration.md, see Reference). The file
// is decoded strictly: an unknown key or a value of the wrong type is an
// error naming the file, the line and the key. Every value of the file
// and of the environment may be a secret reference (env:NAME, file:PATH,
// raw:TEXT; see package secret), resolved at load.
package config

import (
	"time"

	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/config/field"
	"github.com/heraldhq/herald/core/internal/delivery"
	"github.com/heraldhq/herald/core/internal/digest"
	"github.com/heraldhq/herald/core/internal/httpguard"
	"github.com/heraldhq/herald/core/internal/live"
	"github.com/heraldhq/herald/core/internal/maintenance"
	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/relay"
	"github.com/heraldhq/herald/core/internal/secret"
	"github.com/heraldhq/herald/core/internal/source"
	"github.com/heraldhq/herald/core/internal/statusev"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/tracing"
)

// Daemon is the configuration of `herald serve`: one field per section
// of the daemon file, each a component's Config. Fields without a koanf
// tag are not settings.
type Daemon struct {
	// Database is the PostgreSQL connection and the roles each part of the
	// daemon runs as.
	Database store.Config `koanf:"database"`
	// AMQP is the RabbitMQ connection and topology.
	AMQP broker.Config `koanf:"amqp"`
	// HTTP holds the listen addresses of the public and admin APIs and the
	// bounds of their clients.
	HTTP httpguard.Config `koanf:"http"`
	// Plugins locates the plugin binaries and says how far to trust them.
	Plugins pluginhost.Config `koanf:"plugins"`
	// Rules lists rules files or globs, relative to the config file (in
	// the environment, comma-separated).
	Rules []string `koanf:"rules"`
	// Relay tunes the event relay (events to notifications and
	// deliveries).
	Relay relay.Config `koanf:"relay"`
	// Publisher tunes the delivery publisher and the relay's handoff.
	Publisher delivery.PublisherConfig `koanf:"publisher"`
	// Retry tunes the maintenance stage and the listeners' lease.
	Retry maintenance.Config `koanf:"retry"`
	// Log sets the level and format of the daemon's log (hclog, on
	// standard error).
	Log LogConfig `koanf:"log"`
	// Auth verifies end users' tokens (keys: `herald tokens keys add`).
	Auth auth.Config `koanf:"auth"`
	// Live tunes the live (WebSocket) gateway at /v1/live.
	Live live.Config `koanf:"live"`
	// Supervisor bounds the daemon's shutdown and how long it runs
	// without its liveness lock.
	Supervisor SupervisorConfig `koanf:"supervisor"`
	// Runtime tunes the Go runtime the daemon runs on: its soft memory
	// limit.
	Runtime RuntimeConfig `koanf:"runtime"`
	// Tracing turns OpenTelemetry tracing on.
	Tracing tracing.Config `koanf:"tracing"`
	// Retention drops old rows of the partitioned tables, whole months
	// at a time, and sweeps what a partition cannot give; zero keeps them
	// forever. The daemon applies it at start and every hour; `herald
	// retention status` shows what will go when.
	Retention RetentionConfig `koanf:"retention"`
	// Sources are services' own databases whose outbox (`herald outbox
	// install`) the daemon forwards into Herald, exactly once: `source
	// "orders" { url = "...", tenants = ["acme"] }`, one block per
	// database (docs/producers.md).
	Sources map[string]source.Config `koanf:"source"`
	// StatusEvents publishes every final delivery outcome, inbox read and
	// action to the broker (tenant in the routing key) and POSTs them to
	// the webhooks tenants configure (docs/api.md, "Status events").
	StatusEvents statusev.Config `koanf:"status_events"`
	// Digest tunes the flusher that sends each digest window as one
	// message once it falls due (rules' digest blocks, docs/rules.md).
	Digest digest.Config `koanf:"digest"`

	// Warnings are what LoadDaemon accepted but the operator should fix
	// (a setting that is no longer read), each naming the file, line and
	// key; herald serve logs them at start.
	Warnings []string
}

// SupervisorConfig tunes the supervisor every stage of `herald serve`
// runs under.
type SupervisorConfig struct {
	// ShutdownGrace bounds an orderly stop (SIGTERM, SIGINT or a failed
	// stage): the HTTP listeners close, the relay stops claiming, handoffs
	// finish or are left due, listeners finish their in-flight batches and
	// the plugins close within it. Past it `herald serve` exits with
	// status 1, naming the stages still running.
	ShutdownGrace time.Duration `koanf:"shutdown_grace"`
	// LivenessTimeout is how long the daemon runs without its liveness
	// lock (its PostgreSQL session lost and not taken again) before the
	// liveness stage fails: the daemon stops in order (within
	// shutdown_grace) and exits with status 1.
	LivenessTimeout time.Duration `koanf:"liveness_timeout"`
}

// Validate checks the settings; it returns field.Errors naming the keys.
func (c SupervisorConfig) Validate() error {
	var errs field.Errors
	errs.PositiveDuration("shutdown_grace", c.ShutdownGrace)
	errs.PositiveDuration("liveness_timeout", c.LivenessTimeout)
	return errs.Err()
}

// RuntimeConfig tunes the Go runtime of `herald serve`.
type RuntimeConfig struct {
	// MemoryLimitMiB is the daemon's soft memory limit in MiB (Go's
	// runtime/debug.SetMemoryLimit, what GOMEMLIMIT sets). While the Go
	// heap, stacks and runtime structures stay well under it the garbage
	// collector paces itself as usual (the heap grows to about twice what
	// is live); near it the collector runs sooner and returns freed memory
	// to the system, so a burst does not leave the daemon's resident
	// memory at twice its live heap. It is a safety net, not a cap: a
	// daemon whose live data needs more goes over it and is not killed,
	// its collector then taking up to about half of the CPU. Raise it with
	// the load (many live sessions, larger batches or prefetch); 0 turns it
	// off; a GOMEMLIMIT in the environment wins over it. Resident memory
	// also counts what is mapped from the binary (about 30 MiB), which the
	// limit does not cover.
	MemoryLimitMiB int `koanf:"memory_limit_mib"`
}

// Validate checks the settings; it returns field.Errors naming the keys.
func (c RuntimeConfig) Validate() error {
	var errs field.Errors
	if c.MemoryLimitMiB < 0 {
		errs.Add("memory_limit_mib", "must not be negative (0: no limit), got %d", c.MemoryLimitMiB)
	} else if c.MemoryLimitMiB > 0 && c.MemoryLimitMiB < MinMemoryLimitMiB {
		errs.Add("memory_limit_mib", "%d MiB is below the %d MiB the daemon needs idle (0: no limit)", c.MemoryLimitMiB, MinMemoryLimitMiB)
	}
	return errs.Err()
}

// DefaultMemoryLimitMiB is runtime.memory_limit_mib's default.
const DefaultMemoryLimitMiB = 80

// MinMemoryLimitMiB is the smallest runtime.memory_limit_mib accepted:
// below it the collector would run without pause from the start.
const MinMemoryLimitMiB = 32

// LogConfig sets logging.
type LogConfig struct {
	// Level is trace, debug, info, warn or error.
	Level string `koanf:"level"`
	// JSON switches to JSON log lines.
	JSON bool `koanf:"json"`
}

// Validate checks the settings; it returns field.Errors naming the keys.
func (c LogConfig) Validate() error {
	var errs field.Errors
	switch c.Level {
	case "trace", "debug", "info", "warn", "error":
	default:
		errs.Add("level", "unknown level %q (want trace, debug, info, warn or error)", c.Level)
	}
	return errs.Err()
}

// DefaultDaemon returns the settings used for every key the file and the
// environment omit: each component's defaults.
func DefaultDaemon() Daemon {
	return Daemon{
		Database:     store.DefaultConfig(),
		AMQP:         broker.DefaultConfig(),
		HTTP:         httpguard.DefaultConfig(),
		Plugins:      pluginhost.DefaultConfig(),
		Relay:        relay.DefaultConfig(),
		Publisher:    delivery.DefaultPublisherConfig(),
		Retry:        maintenance.DefaultConfig(),
		Log:          LogConfig{Level: "info"},
		Auth:         auth.DefaultConfig(),
		Live:         live.DefaultConfig(),
		Supervisor:   SupervisorConfig{ShutdownGrace: 30 * time.Second, LivenessTimeout: time.Minute},
		Runtime:      RuntimeConfig{MemoryLimitMiB: DefaultMemoryLimitMiB},
		Tracing:      tracing.DefaultConfig(),
		StatusEvents: statusev.DefaultConfig(),
		Digest:       digest.DefaultConfig(),
	}
}

// Validate checks every section with its component's Validate, then what
// spans sections. It returns field.Errors naming the keys.
func (d Daemon) Validate() error {
	var errs field.Errors
	errs.Merge("database", d.Database.Validate())
	errs.Merge("amqp", d.AMQP.Validate())
	errs.Merge("tracing", d.Tracing.Validate())
	errs.Merge("auth", d.Auth.Validate())
	errs.Merge("live", d.Live.Validate())
	if d.Live.Exchange != "" && d.Live.Exchange == d.AMQP.Exchange {
		errs.Add("live.exchange", "must be set and differ from amqp.exchange")
	}
	errs.Merge("http", d.HTTP.Validate())
	plugins := d.Plugins
	errs.Merge("plugins", plugins.Validate())
	errs.Merge("relay", d.Relay.Validate())
	errs.Merge("publisher", d.Publisher.Validate())
	errs.Merge("retry", d.Retry.Validate())
	errs.Merge("supervisor", d.Supervisor.Validate())
	errs.Merge("runtime", d.Runtime.Validate())
	errs.Merge("retention", d.Retention.Validate())
	errs.Merge("log", d.Log.Validate())
	errs.Merge("source", source.ValidateAll(d.Sources))
	errs.Merge("status_events", d.StatusEvents.Validate())
	errs.Merge("digest", d.Digest.Validate())
	if d.StatusEvents.Exchange == d.AMQP.Exchange || d.StatusEvents.Exchange == d.Live.Exchange {
		errs.Add("status_events.exchange", "must differ from amqp.exchange and live.exchange")
	}
	return errs.Err()
}

// SecretValues returns the passwords of the database and broker URLs, for
// a secret.Redactor.
func (d Daemon) SecretValues() []string {
	var out []string
	urls := append([]string{d.Database.URL, d.Database.APIURL, d.Database.AdminURL, d.AMQP.URL}, d.AMQP.URLs...)
	for _, s := range d.Sources {
		urls = append(urls, s.URL)
	}
	for _, u := range urls {
		if p := secret.URLPassword(u); p != "" {
			out = append(out, p)
		}
	}
	return out
}
