// Package config loads Herald's daemon settings and rules files with koanf
// (HCL or YAML, chosen by file extension), decodes them strictly (unknown
// keys are errors) and validates them. Every daemon setting, and every
// value of a provider's config in a rules file, may be a secret reference
// (env:NAME, file:PATH, raw:TEXT; see package secret), resolved at load.
package config

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/hcl"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/v2"

	"github.com/heraldhq/herald/core/internal/secret"
)

// Daemon is the configuration of `herald serve`.
type Daemon struct {
	// Database is the PostgreSQL connection.
	Database DatabaseConfig `koanf:"database"`
	// AMQP is the RabbitMQ connection and topology.
	AMQP AMQPConfig `koanf:"amqp"`
	// HTTP holds the listen addresses of the public and admin APIs.
	HTTP HTTPConfig `koanf:"http"`
	// Plugins locates the plugin binaries.
	Plugins PluginsConfig `koanf:"plugins"`
	// Rules lists rules files or globs, relative to the config file.
	Rules []string `koanf:"rules"`
	// Relay tunes the event relay.
	Relay RelayConfig `koanf:"relay"`
	// Publisher tunes the delivery publisher.
	Publisher PublisherConfig `koanf:"publisher"`
	// Retry tunes the retry poller.
	Retry RetryConfig `koanf:"retry"`
	// Log sets the log level and format.
	Log LogConfig `koanf:"log"`
	// Auth verifies end users' tokens.
	Auth AuthConfig `koanf:"auth"`
	// Live tunes the live (WebSocket) gateway.
	Live LiveConfig `koanf:"live"`
	// Supervisor bounds the daemon's shutdown and how long it runs
	// without its liveness lock.
	Supervisor SupervisorConfig `koanf:"supervisor"`
	// Tracing turns OpenTelemetry tracing on (see package tracing).
	Tracing TracingConfig `koanf:"tracing"`
	// Retention drops old rows of the partitioned tables, whole months
	// at a time (store.ApplyRetention); zero keeps them forever.
	Retention RetentionConfig `koanf:"retention"`
}

// RetentionConfig is how long Herald keeps its rows. The daemon drops a
// monthly partition of a partitioned table once every row in it is older
// than its table's retention (detach and drop, never a DELETE). What a
// whole partition cannot give (events, archived notifications, a tenant's
// shorter periods: a partition holds every tenant's rows of its month) it
// deletes in short bounded batches (store.ApplySweeps). `herald retention
// status` shows what will go when.
type RetentionConfig struct {
	// DeliveryAttempts keeps the attempt log (delivery_attempts) for this
	// long after its delivery was created, e.g. "720h" (30 days). 0 (the
	// default) keeps it forever. At least 24h.
	DeliveryAttempts time.Duration `koanf:"delivery_attempts"`
	// Notifications keeps inbox rows for this long after their event was
	// created, e.g. "8760h" (a year); their unread rows leave the unread
	// counters as the month goes. 0 (the default) keeps them forever. At
	// least 24h.
	Notifications time.Duration `koanf:"notifications"`
	// Deliveries keeps delivery rows (the biggest table: the rendered
	// content of every delivery) for this long after their event was
	// created, e.g. "2160h" (90 days). A delivery not final yet (still
	// owed to its user) is kept until it is SENT or FAILED. 0 (the
	// default) keeps them forever. At least 24h.
	Deliveries time.Duration `koanf:"deliveries"`
	// Events keeps PROCESSED and FAILED events (event_outbox, not
	// partitioned) for this long after they were created, e.g. "720h";
	// older ones are deleted in short bounded batches by the daemon's
	// hourly pass (store.ApplySweeps). PENDING events are never deleted.
	// It is the producers' idempotency window: an event_id enqueued again
	// after its event was deleted is a new event. 0 (the default) keeps
	// them forever. At least 24h.
	Events time.Duration `koanf:"events"`
	// ArchivedNotifications keeps archived notifications for this long
	// after they were archived, e.g. "720h"; older ones are deleted in
	// bounded batches. At most Notifications when both are set. 0 (the
	// default): as long as the other notifications. At least 24h.
	ArchivedNotifications time.Duration `koanf:"archived_notifications"`
	// Tenants holds tenants' own periods (`tenant "acme" { ... }`
	// blocks), keyed by tenant id.
	Tenants map[string]TenantRetentionConfig `koanf:"-"`
}

// TenantRetentionConfig is one tenant's own retention periods, set by a
// `tenant "ID" { ... }` block in retention. Each may only shorten the
// global period of its key (a partition holds every tenant's rows, so the
// global period is what drops months; a tenant's shorter one deletes that
// tenant's older rows in bounded batches). 0 keeps the global period.
type TenantRetentionConfig struct {
	Events                time.Duration `koanf:"events"`
	Notifications         time.Duration `koanf:"notifications"`
	ArchivedNotifications time.Duration `koanf:"archived_notifications"`
	DeliveryAttempts      time.Duration `koanf:"delivery_attempts"`
}

// SupervisorConfig tunes the supervisor every stage of `herald serve`
// runs under.
type SupervisorConfig struct {
	// ShutdownGrace bounds an orderly stop (SIGTERM, SIGINT or a failed
	// stage): the HTTP listeners close, the relay stops claiming, handoffs
	// finish or are left due, listeners finish their in-flight batches and
	// the plugins close within it. Past it the daemon exits non-zero,
	// naming the stages still running.
	ShutdownGrace time.Duration `koanf:"shutdown_grace"`
	// LivenessTimeout is how long the daemon runs without its liveness
	// lock (its PostgreSQL session lost and not taken again) before it
	// stops as a failed stage.
	LivenessTimeout time.Duration `koanf:"liveness_timeout"`
}

// TracingConfig is OpenTelemetry tracing. Everything about the exporter
// but the choice to export (endpoint, headers, protocol, sampler, service
// name) comes from the standard OTEL_* environment variables.
type TracingConfig struct {
	// Exporter is "none" (the default: no spans recorded) or "otlp".
	// OTEL_TRACES_EXPORTER, when set, overrides it; OTEL_SDK_DISABLED=true
	// turns tracing off whatever both say.
	Exporter string `koanf:"exporter"`
}

// AuthConfig is how end users' tokens are checked (keys: `herald tokens
// keys add`).
type AuthConfig struct {
	// Audience is the aud claim every token must carry.
	Audience string `koanf:"audience"`
	// MaxTokenLifetime caps a token's exp - iat.
	MaxTokenLifetime time.Duration `koanf:"max_token_lifetime"`
}

// LiveConfig tunes the live gateway at /v1/live.
type LiveConfig struct {
	// Exchange is the direct exchange live updates travel on; the
	// WEBSOCKET plugin's exchange must be the same.
	Exchange string `koanf:"exchange"`
	// TicketTTL is how long a session ticket may wait to be used.
	TicketTTL time.Duration `koanf:"ticket_ttl"`
	// AllowedOrigins are origin host patterns (app.example.com,
	// *.example.com) browsers may connect from besides the API's own host.
	AllowedOrigins []string `koanf:"allowed_origins"`
	// MaxSessionsPerUser caps one user's open sessions on one daemon.
	MaxSessionsPerUser int `koanf:"max_sessions_per_user"`
	// PingInterval is the sessions' keepalive period.
	PingInterval time.Duration `koanf:"ping_interval"`
	// WriteTimeout bounds writing one frame to a browser.
	WriteTimeout time.Duration `koanf:"write_timeout"`
	// SendBuffer is the frames queued per session before it is dropped
	// as a slow consumer.
	SendBuffer int `koanf:"send_buffer"`
}

// DatabaseConfig is the PostgreSQL connection and the roles each part of
// the daemon runs as. Row-level security keeps tenants apart: the public
// API runs as APIRole with its tenant set per transaction, the pipeline as
// WorkerRole (every tenant), the superadmin API as AdminRole (read only).
type DatabaseConfig struct {
	// URL is a libpq-style URL for the pipeline and the CLI; the role it
	// logs in as owns Herald's tables when it runs the migrations. Env:
	// HERALD_DATABASE_URL. For TLS add sslmode=verify-full and
	// sslrootcert=<CA file> (pgx reads libpq's ssl* parameters).
	URL string `koanf:"url"`
	// MaxConns caps the pipeline's connection pool.
	MaxConns int `koanf:"max_conns"`
	// APIURL is where the HTTP API connects (empty: URL). Env:
	// HERALD_DATABASE_API_URL.
	APIURL string `koanf:"api_url"`
	// APIMaxConns caps the HTTP API's connection pool.
	APIMaxConns int `koanf:"api_max_conns"`
	// WorkerRole is the role the pipeline sets on its connections (SET
	// ROLE); empty keeps the login role.
	WorkerRole string `koanf:"worker_role"`
	// APIRole is the role the HTTP API sets on its connections; empty keeps
	// the login role of APIURL. Either way the API refuses to start unless
	// the role it ends up as is subject to row-level security.
	APIRole string `koanf:"api_role"`
	// AdminRole is the role the superadmin API sets on its connections
	// (read-only, every tenant).
	AdminRole string `koanf:"admin_role"`
}

// AMQPConfig is the RabbitMQ connection and topology.
type AMQPConfig struct {
	// URL is the broker URL: amqp://, or amqps:// for TLS. Env:
	// HERALD_AMQP_URL. With URLs set it is URLs[0].
	URL string `koanf:"url"`
	// URLs are the nodes of a RabbitMQ cluster, one URL each (same scheme,
	// credentials and vhost, as a rule). Herald connects to the first that
	// answers, in order, and after a lost connection starts with the next
	// one, so a dead node is tried last. Give url or urls, not both. Env:
	// HERALD_AMQP_URLS (comma-separated).
	URLs []string `koanf:"urls"`
	// QueueType is the type of every delivery queue Herald declares:
	// "classic" (the default) or "quorum" (replicated on the cluster's
	// nodes: a queue survives the loss of a minority of them). A queue's
	// type cannot change once it exists: RabbitMQ refuses the declaration,
	// and Herald logs an error naming this setting and the queue.
	QueueType string `koanf:"queue_type"`
	// TLSCAFile is a PEM file of the CA certificates that sign the broker's
	// certificate (amqps:// only; empty: the system's roots). The broker's
	// certificate must also name the URL's host (or TLSServerName).
	TLSCAFile string `koanf:"tls_ca_file"`
	// TLSCertFile and TLSKeyFile are a PEM client certificate and key, for
	// brokers that want one (amqps:// only; both or neither).
	TLSCertFile string `koanf:"tls_cert_file"`
	TLSKeyFile  string `koanf:"tls_key_file"`
	// TLSServerName is the name the broker's certificate must hold when it
	// is not the URL's host (empty: the URL's host).
	TLSServerName string `koanf:"tls_server_name"`
	// Exchange is the durable topic exchange deliveries are published to.
	Exchange string `koanf:"exchange"`
	// Queues maps queue names to their bindings and consumer settings. When
	// empty, one queue per configured channel is declared:
	// "herald.<channel>" bound to "*.<CHANNEL>".
	Queues map[string]QueueConfig `koanf:"queue"`
}

// QueueConfig is one durable queue, its bindings and its consumers.
type QueueConfig struct {
	// Bindings are routing-key patterns; keys are "<user type>.<channel>".
	Bindings []string `koanf:"bindings"`
	// Prefetch is the consumer's prefetch count.
	Prefetch int `koanf:"prefetch"`
	// Concurrency is the number of goroutines handling messages.
	Concurrency int `koanf:"concurrency"`
	// Quorum declares this queue as a quorum queue whatever
	// amqp.queue_type says.
	Quorum bool `koanf:"quorum"`
}

// HTTPConfig holds the listen addresses of the public and admin APIs and
// what bounds a client of either: timeouts, header size, connections and,
// on the public API, request rates.
type HTTPConfig struct {
	// Listen is the public API address. Env: HERALD_HTTP_LISTEN.
	Listen string `koanf:"listen"`
	// AdminListen is the admin API address (plugins, rules reload, pprof);
	// empty turns the admin API off. Anywhere but loopback it needs
	// AdminTokenFile.
	AdminListen string `koanf:"admin_listen"`
	// AdminTokenFile holds the bearer token every admin API request must
	// carry (read at start; mode 0600 or stricter). Relative to the config
	// file. Env: HERALD_HTTP_ADMIN_TOKEN_FILE.
	AdminTokenFile string `koanf:"admin_token_file"`
	// Pprof exposes /debug/pprof on the admin listener, behind its token.
	Pprof bool `koanf:"pprof"`
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration `koanf:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout time.Duration `koanf:"read_timeout"`
	// WriteTimeout bounds a public API request from the end of its headers
	// to the end of its response.
	WriteTimeout time.Duration `koanf:"write_timeout"`
	// AdminWriteTimeout is WriteTimeout on the admin listener: long enough
	// for a plugin reload (up to 2m) and a pprof profile or trace (whose
	// seconds must stay below it).
	AdminWriteTimeout time.Duration `koanf:"admin_write_timeout"`
	// IdleTimeout closes a keep-alive connection that waits this long for
	// its next request.
	IdleTimeout time.Duration `koanf:"idle_timeout"`
	// MaxHeaderBytes bounds a request's headers (larger: 431).
	MaxHeaderBytes int `koanf:"max_header_bytes"`
	// MaxConns caps the open connections of each listener (0: no cap);
	// connections beyond it wait in the kernel's backlog.
	MaxConns int `koanf:"max_conns"`
	// RateLimit bounds the public API's request rates.
	RateLimit RateLimitConfig `koanf:"rate_limit"`
}

// RateLimitConfig bounds the public API's request rates with token
// buckets; a request over its rate gets 429 with Retry-After.
type RateLimitConfig struct {
	// PerKey is the requests per second one API key may make (0: no limit),
	// counted after authentication.
	PerKey float64 `koanf:"per_key"`
	// PerIP is the requests per second one client IP may make (0: no
	// limit), counted before authentication, for every route.
	PerIP float64 `koanf:"per_ip"`
	// Burst is how many requests a key or an IP may make at once above
	// its rate.
	Burst int `koanf:"burst"`
}

// PluginsConfig locates plugin binaries and says how far to trust them.
type PluginsConfig struct {
	// Dir holds herald-plugin-* binaries. It and the binaries must be
	// owned by herald's user or root and writable by nobody else. Env:
	// HERALD_PLUGINS_DIR.
	Dir string `koanf:"dir"`
	// Watch hot-swaps a plugin when its binary changes in Dir (checked
	// every 2s). Off by default: a new binary runs after `herald plugins
	// reload NAME`.
	Watch bool `koanf:"watch"`
	// Env names variables of the daemon's environment that plugins get on
	// top of the allow-list (PATH, HOME, TMPDIR, TZ, LANG, LC_*, ...), e.g.
	// ["HTTPS_PROXY"]. HERALD_* names are refused: they are the daemon's
	// own settings and secrets. Env: HERALD_PLUGINS_ENV (comma-separated).
	Env []string `koanf:"env"`
	// InsecurePermissions runs plugins from a directory or binaries that
	// other users could write. For development only.
	InsecurePermissions bool `koanf:"insecure_permissions"`
}

// RelayConfig tunes the event relay.
type RelayConfig struct {
	// BatchSize is how many events one transaction claims.
	BatchSize int `koanf:"batch_size"`
	// PollInterval is the fallback poll when no notification arrives.
	PollInterval time.Duration `koanf:"poll_interval"`
	// MaxAttempts bounds how often a failing event is tried before FAILED.
	MaxAttempts int `koanf:"max_attempts"`
	// Workers is the number of concurrent relay loops.
	Workers int `koanf:"workers"`
}

// PublisherConfig tunes the delivery publisher.
type PublisherConfig struct {
	// BatchSize is how many deliveries one claim takes.
	BatchSize int `koanf:"batch_size"`
	// ConfirmWindow bounds unconfirmed publishes in flight.
	ConfirmWindow int `koanf:"confirm_window"`
	// PerMessage is how many deliveries one broker message carries at most.
	PerMessage int `koanf:"per_message"`
	// Workers is the number of concurrent publishing loops.
	Workers int `koanf:"workers"`
	// PollInterval is the fallback poll when no notification arrives.
	PollInterval time.Duration `koanf:"poll_interval"`
	// ReclaimAfter republishes PUBLISHED deliveries not consumed in time
	// (a message lost with its queue).
	ReclaimAfter time.Duration `koanf:"reclaim_after"`
	// Handoff lets the relay publish the deliveries it writes itself
	// (false: the publisher claims every new delivery).
	Handoff bool `koanf:"handoff"`
}

// RetryConfig tunes the retry poller.
type RetryConfig struct {
	// PollInterval is how often due RETRY and DEFERRED deliveries are claimed.
	PollInterval time.Duration `koanf:"poll_interval"`
	// Lease bounds one attempt: a listener gives a plugin's Send half of it.
	// (SENDING rows left by Herald versions that claimed before sending are
	// moved to RETRY once it has passed.)
	Lease time.Duration `koanf:"lease"`
}

// LogConfig sets logging.
type LogConfig struct {
	// Level is trace, debug, info, warn or error. Env: HERALD_LOG_LEVEL.
	Level string `koanf:"level"`
	// JSON switches to JSON log lines.
	JSON bool `koanf:"json"`
}

// DefaultDaemon returns the settings used for every key the file omits.
func DefaultDaemon() Daemon {
	return Daemon{
		Database: DatabaseConfig{URL: "postgres://herald:herald@127.0.0.1:5432/herald?sslmode=disable", MaxConns: 16,
			APIMaxConns: 8, WorkerRole: "herald_worker", APIRole: "herald_api", AdminRole: "herald_admin"},
		AMQP: AMQPConfig{URL: "amqp://guest:guest@127.0.0.1:5672/", URLs: []string{}, QueueType: QueueClassic, Exchange: "herald.deliveries"},
		HTTP: HTTPConfig{Listen: "127.0.0.1:8080", AdminListen: "127.0.0.1:8081",
			ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
			AdminWriteTimeout: 5 * time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10, MaxConns: 1024,
			RateLimit: RateLimitConfig{PerKey: 100, PerIP: 200, Burst: 200}},
		Plugins:   PluginsConfig{Dir: "bin/plugins", Env: []string{}},
		Relay:     RelayConfig{BatchSize: 100, PollInterval: 200 * time.Millisecond, MaxAttempts: 5, Workers: 2},
		Publisher: PublisherConfig{BatchSize: 500, ConfirmWindow: 1000, PerMessage: 50, Workers: 2, PollInterval: time.Second, ReclaimAfter: 5 * time.Minute, Handoff: true},
		Retry:     RetryConfig{PollInterval: time.Second, Lease: 2 * time.Minute},
		Log:       LogConfig{Level: "info"},
		Auth:      AuthConfig{Audience: "herald", MaxTokenLifetime: 15 * time.Minute},
		Live: LiveConfig{Exchange: "herald.live", TicketTTL: 30 * time.Second, AllowedOrigins: []string{}, MaxSessionsPerUser: 16,
			PingInterval: 30 * time.Second, WriteTimeout: 10 * time.Second, SendBuffer: 64},
		Supervisor: SupervisorConfig{ShutdownGrace: 30 * time.Second, LivenessTimeout: time.Minute},
		Tracing:    TracingConfig{Exporter: "none"},
	}
}

// parserFor returns the koanf parser for path's extension.
func parserFor(path string) (koanf.Parser, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".hcl":
		return hcl.Parser(true), nil
	case ".yaml", ".yml":
		return yaml.Parser(), nil
	}
	return nil, fmt.Errorf("%s: unknown config format %q (want .hcl, .yaml or .yml)", path, filepath.Ext(path))
}

// daemonEnvPrefix prefixes every environment override.
const daemonEnvPrefix = "HERALD_"

// LoadDaemon reads the daemon config at path (empty: defaults only), applies
// HERALD_* environment overrides (HERALD_DATABASE_URL for database.url and so
// on: the key path upper-cased with dots as underscores), resolves secret
// references (env:NAME, file:PATH, raw:TEXT) in every value of the file and
// of the environment overrides, decodes strictly and validates. Relative
// rules paths, plugins.dir and file: references are resolved against the
// config file's directory.
func LoadDaemon(path string) (Daemon, error) {
	k := koanf.New(".")
	def := DefaultDaemon()
	if err := k.Load(confmap.Provider(daemonDefaultsMap(def), "."), nil); err != nil {
		return Daemon{}, err
	}
	fromFile := koanf.New(".")
	var queues map[string]QueueConfig
	var tenantRetention map[string]TenantRetentionConfig
	if path != "" {
		p, err := parserFor(path)
		if err != nil {
			return Daemon{}, err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return Daemon{}, err
		}
		raw, err := p.Unmarshal(b)
		if err != nil {
			return Daemon{}, fmt.Errorf("%s: %w", path, err)
		}
		var refErrs []string
		resolveDaemonRefs(raw, filepath.Dir(path), "", &refErrs)
		if len(refErrs) > 0 {
			return Daemon{}, fmt.Errorf("%s: %s", path, strings.Join(refErrs, "; "))
		}
		// Queue names may hold dots ("notification.restaurant"), which
		// koanf would read as nesting, and HCL gives repeated queue blocks
		// as a list: take them out and decode them on their own.
		queues, err = takeQueues(raw)
		if err != nil {
			return Daemon{}, fmt.Errorf("%s: %w", path, err)
		}
		tenantRetention, err = takeTenantRetention(raw)
		if err != nil {
			return Daemon{}, fmt.Errorf("%s: %w", path, err)
		}
		if err := fromFile.Load(confmap.Provider(raw, ""), nil); err != nil {
			return Daemon{}, fmt.Errorf("%s: %w", path, err)
		}
		if err := k.Merge(fromFile); err != nil {
			return Daemon{}, err
		}
	}
	// Environment overrides for every scalar key the defaults know.
	known := map[string]string{}
	for _, key := range k.Keys() {
		known[daemonEnvPrefix+strings.ToUpper(strings.ReplaceAll(key, ".", "_"))] = key
	}
	known[daemonEnvPrefix+"RULES"] = "rules"
	overrides := map[string]any{}
	envBase := "."
	if path != "" {
		envBase = filepath.Dir(path)
	}
	var envErrs []string
	for _, kv := range os.Environ() {
		name, val, _ := strings.Cut(kv, "=")
		key, ok := known[name]
		if !ok {
			continue
		}
		if key == "rules" {
			overrides[key] = strings.Split(val, ",")
			continue
		}
		v, _, err := secret.Resolve(val, envBase)
		if err != nil {
			envErrs = append(envErrs, fmt.Sprintf("%s (%s): %v", name, key, err))
			continue
		}
		overrides[key] = v
	}
	if len(envErrs) > 0 {
		sort.Strings(envErrs)
		return Daemon{}, fmt.Errorf("environment: %s", strings.Join(envErrs, "; "))
	}
	if err := k.Load(confmap.Provider(overrides, "."), nil); err != nil {
		return Daemon{}, err
	}
	var d Daemon
	err := k.UnmarshalWithConf("", &d, koanf.UnmarshalConf{Tag: "koanf", DecoderConfig: &mapstructure.DecoderConfig{
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			numberNotDuration,
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
		),
		ErrorUnused:      true,
		WeaklyTypedInput: true,
		Result:           &d,
		TagName:          "koanf",
	}})
	if err != nil {
		name := path
		if name == "" {
			name = "environment"
		}
		return Daemon{}, fmt.Errorf("%s: %w", name, err)
	}
	if queues != nil {
		d.AMQP.Queues = queues
	}
	if tenantRetention != nil {
		d.Retention.Tenants = tenantRetention
	}
	if len(d.AMQP.URLs) > 0 {
		// url has a default, so only one given on purpose conflicts.
		if fromFile.Exists("amqp.url") || os.Getenv(daemonEnvPrefix+"AMQP_URL") != "" {
			name := cmp.Or(path, "environment")
			return Daemon{}, fmt.Errorf("%s: amqp.url and amqp.urls: give one of them (urls for the nodes of a cluster)", name)
		}
		d.AMQP.URL = d.AMQP.URLs[0]
	}
	if path != "" {
		base := filepath.Dir(path)
		for i, r := range d.Rules {
			if !filepath.IsAbs(r) {
				d.Rules[i] = filepath.Join(base, r)
			}
		}
		// Paths the file gives are relative to it; the environment's to
		// the working directory.
		for key, p := range map[string]*string{"plugins.dir": &d.Plugins.Dir, "amqp.tls_ca_file": &d.AMQP.TLSCAFile,
			"amqp.tls_cert_file": &d.AMQP.TLSCertFile, "amqp.tls_key_file": &d.AMQP.TLSKeyFile} {
			env := daemonEnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
			if os.Getenv(env) == "" && *p != "" && !filepath.IsAbs(*p) && fromFile.Exists(key) {
				*p = filepath.Join(base, *p)
			}
		}
		if os.Getenv(daemonEnvPrefix+"HTTP_ADMIN_TOKEN_FILE") == "" && d.HTTP.AdminTokenFile != "" && !filepath.IsAbs(d.HTTP.AdminTokenFile) {
			d.HTTP.AdminTokenFile = filepath.Join(base, d.HTTP.AdminTokenFile)
		}
	}
	if err := d.Validate(); err != nil {
		name := path
		if name == "" {
			name = "config"
		}
		return Daemon{}, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}

func daemonDefaultsMap(d Daemon) map[string]any {
	return map[string]any{
		"database.url":                     d.Database.URL,
		"database.max_conns":               d.Database.MaxConns,
		"database.api_url":                 d.Database.APIURL,
		"database.api_max_conns":           d.Database.APIMaxConns,
		"database.worker_role":             d.Database.WorkerRole,
		"database.api_role":                d.Database.APIRole,
		"database.admin_role":              d.Database.AdminRole,
		"amqp.url":                         d.AMQP.URL,
		"amqp.urls":                        d.AMQP.URLs,
		"amqp.queue_type":                  d.AMQP.QueueType,
		"amqp.exchange":                    d.AMQP.Exchange,
		"http.listen":                      d.HTTP.Listen,
		"http.admin_listen":                d.HTTP.AdminListen,
		"http.admin_token_file":            d.HTTP.AdminTokenFile,
		"http.pprof":                       d.HTTP.Pprof,
		"http.read_header_timeout":         d.HTTP.ReadHeaderTimeout.String(),
		"http.read_timeout":                d.HTTP.ReadTimeout.String(),
		"http.write_timeout":               d.HTTP.WriteTimeout.String(),
		"http.admin_write_timeout":         d.HTTP.AdminWriteTimeout.String(),
		"http.idle_timeout":                d.HTTP.IdleTimeout.String(),
		"http.max_header_bytes":            d.HTTP.MaxHeaderBytes,
		"http.max_conns":                   d.HTTP.MaxConns,
		"http.rate_limit.per_key":          d.HTTP.RateLimit.PerKey,
		"http.rate_limit.per_ip":           d.HTTP.RateLimit.PerIP,
		"http.rate_limit.burst":            d.HTTP.RateLimit.Burst,
		"plugins.dir":                      d.Plugins.Dir,
		"relay.batch_size":                 d.Relay.BatchSize,
		"relay.poll_interval":              d.Relay.PollInterval.String(),
		"relay.max_attempts":               d.Relay.MaxAttempts,
		"relay.workers":                    d.Relay.Workers,
		"publisher.batch_size":             d.Publisher.BatchSize,
		"publisher.confirm_window":         d.Publisher.ConfirmWindow,
		"publisher.per_message":            d.Publisher.PerMessage,
		"publisher.workers":                d.Publisher.Workers,
		"publisher.poll_interval":          d.Publisher.PollInterval.String(),
		"publisher.reclaim_after":          d.Publisher.ReclaimAfter.String(),
		"publisher.handoff":                d.Publisher.Handoff,
		"retry.poll_interval":              d.Retry.PollInterval.String(),
		"retry.lease":                      d.Retry.Lease.String(),
		"supervisor.shutdown_grace":        d.Supervisor.ShutdownGrace.String(),
		"supervisor.liveness_timeout":      d.Supervisor.LivenessTimeout.String(),
		"log.level":                        d.Log.Level,
		"log.json":                         d.Log.JSON,
		"auth.audience":                    d.Auth.Audience,
		"auth.max_token_lifetime":          d.Auth.MaxTokenLifetime.String(),
		"live.exchange":                    d.Live.Exchange,
		"live.ticket_ttl":                  d.Live.TicketTTL.String(),
		"live.allowed_origins":             d.Live.AllowedOrigins,
		"live.max_sessions_per_user":       d.Live.MaxSessionsPerUser,
		"live.ping_interval":               d.Live.PingInterval.String(),
		"live.write_timeout":               d.Live.WriteTimeout.String(),
		"live.send_buffer":                 d.Live.SendBuffer,
		"plugins.watch":                    d.Plugins.Watch,
		"plugins.env":                      d.Plugins.Env,
		"plugins.insecure_permissions":     d.Plugins.InsecurePermissions,
		"amqp.tls_ca_file":                 d.AMQP.TLSCAFile,
		"amqp.tls_cert_file":               d.AMQP.TLSCertFile,
		"amqp.tls_key_file":                d.AMQP.TLSKeyFile,
		"amqp.tls_server_name":             d.AMQP.TLSServerName,
		"tracing.exporter":                 d.Tracing.Exporter,
		"retention.delivery_attempts":      d.Retention.DeliveryAttempts.String(),
		"retention.notifications":          d.Retention.Notifications.String(),
		"retention.events":                 d.Retention.Events.String(),
		"retention.archived_notifications": d.Retention.ArchivedNotifications.String(),
		"retention.deliveries":             d.Retention.Deliveries.String(),
	}
}

// Validate checks the settings' meaning and names the first bad field.
func (d Daemon) Validate() error {
	var errs []string
	bad := func(field, msg string, args ...any) {
		errs = append(errs, fmt.Sprintf("%s: %s", field, fmt.Sprintf(msg, args...)))
	}
	if d.Database.URL == "" {
		bad("database.url", "must not be empty")
	}
	for f, r := range map[string]string{"database.worker_role": d.Database.WorkerRole, "database.api_role": d.Database.APIRole,
		"database.admin_role": d.Database.AdminRole} {
		if len(r) > 63 || strings.ContainsAny(r, "\x00\"") {
			bad(f, "%q is not a PostgreSQL role name", r)
		}
	}
	if len(d.AMQP.URLs) > 0 {
		for i, u := range d.AMQP.URLs {
			field := fmt.Sprintf("amqp.urls[%d]", i)
			if u == "" {
				bad(field, "must not be empty")
			} else if err := d.AMQP.checkURL(u); err != nil {
				bad(field, "%v", err)
			}
		}
	} else if d.AMQP.URL == "" {
		bad("amqp.url", "must not be empty")
	} else if err := d.AMQP.checkURL(d.AMQP.URL); err != nil {
		bad("amqp.url", "%v", err)
	}
	switch d.Tracing.Exporter {
	case "none", "otlp":
	default:
		bad("tracing.exporter", "unknown exporter %q (want \"none\" or \"otlp\")", d.Tracing.Exporter)
	}
	switch d.AMQP.QueueType {
	case QueueClassic, QueueQuorum:
	default:
		bad("amqp.queue_type", "unknown queue type %q (want %q or %q)", d.AMQP.QueueType, QueueClassic, QueueQuorum)
	}
	if (d.AMQP.TLSCertFile == "") != (d.AMQP.TLSKeyFile == "") {
		bad("amqp.tls_cert_file", "give amqp.tls_cert_file and amqp.tls_key_file together")
	}
	if d.AMQP.Exchange == "" {
		bad("amqp.exchange", "must not be empty")
	}
	if d.Auth.Audience == "" {
		bad("auth.audience", "must not be empty")
	}
	if d.Live.Exchange == "" || d.Live.Exchange == d.AMQP.Exchange {
		bad("live.exchange", "must be set and differ from amqp.exchange")
	}
	if d.Live.PingInterval > 0 && d.Live.PingInterval < time.Second {
		bad("live.ping_interval", "must be at least 1s")
	}
	names := make([]string, 0, len(d.AMQP.Queues))
	for n := range d.AMQP.Queues {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		q := d.AMQP.Queues[n]
		if len(q.Bindings) == 0 {
			bad("amqp.queue."+n+".bindings", "needs at least one routing-key pattern")
		}
		if q.Prefetch < 0 || q.Concurrency < 0 {
			bad("amqp.queue."+n, "prefetch and concurrency must not be negative")
		}
	}
	if d.HTTP.Listen == "" {
		bad("http.listen", "must not be empty")
	}
	if d.HTTP.AdminListen != "" && d.HTTP.AdminTokenFile == "" && !IsLoopback(d.HTTP.AdminListen) {
		bad("http.admin_listen", "%q is not a loopback address, so the admin API needs a token: set http.admin_token_file "+
			"(env HERALD_HTTP_ADMIN_TOKEN_FILE) to a mode-0600 file holding one, or listen on 127.0.0.1", d.HTTP.AdminListen)
	}
	if d.HTTP.MaxHeaderBytes <= 0 {
		bad("http.max_header_bytes", "must be positive, got %d", d.HTTP.MaxHeaderBytes)
	}
	if d.HTTP.MaxConns < 0 {
		bad("http.max_conns", "must not be negative (0: no cap), got %d", d.HTTP.MaxConns)
	}
	rl := d.HTTP.RateLimit
	if rl.PerKey < 0 || rl.PerIP < 0 {
		bad("http.rate_limit", "per_key and per_ip must not be negative (0: no limit), got %g and %g", rl.PerKey, rl.PerIP)
	}
	if (rl.PerKey > 0 || rl.PerIP > 0) && rl.Burst < 1 {
		bad("http.rate_limit.burst", "must be at least 1 while a rate limit is on, got %d", rl.Burst)
	}
	for _, n := range d.Plugins.Env {
		if msg := pluginEnvName(n); msg != "" {
			bad("plugins.env", "%s", msg)
		}
	}
	positive := map[string]int{
		"relay.batch_size": d.Relay.BatchSize, "relay.max_attempts": d.Relay.MaxAttempts, "relay.workers": d.Relay.Workers,
		"publisher.batch_size": d.Publisher.BatchSize, "publisher.confirm_window": d.Publisher.ConfirmWindow,
		"publisher.per_message": d.Publisher.PerMessage, "publisher.workers": d.Publisher.Workers, "database.max_conns": d.Database.MaxConns,
		"database.api_max_conns":     d.Database.APIMaxConns,
		"live.max_sessions_per_user": d.Live.MaxSessionsPerUser, "live.send_buffer": d.Live.SendBuffer,
	}
	for _, f := range sortedKeys(positive) {
		if positive[f] <= 0 {
			bad(f, "must be positive, got %d", positive[f])
		}
	}
	durations := map[string]time.Duration{
		"relay.poll_interval": d.Relay.PollInterval, "publisher.poll_interval": d.Publisher.PollInterval,
		"publisher.reclaim_after": d.Publisher.ReclaimAfter, "retry.poll_interval": d.Retry.PollInterval, "retry.lease": d.Retry.Lease,
		"http.read_header_timeout": d.HTTP.ReadHeaderTimeout, "http.read_timeout": d.HTTP.ReadTimeout,
		"http.write_timeout": d.HTTP.WriteTimeout, "http.admin_write_timeout": d.HTTP.AdminWriteTimeout,
		"http.idle_timeout":       d.HTTP.IdleTimeout,
		"auth.max_token_lifetime": d.Auth.MaxTokenLifetime, "live.ticket_ttl": d.Live.TicketTTL, "live.ping_interval": d.Live.PingInterval,
		"live.write_timeout":        d.Live.WriteTimeout,
		"supervisor.shutdown_grace": d.Supervisor.ShutdownGrace, "supervisor.liveness_timeout": d.Supervisor.LivenessTimeout,
	}
	for _, f := range sortedKeys(durations) {
		if durations[f] <= 0 {
			bad(f, "must be a positive duration, got %s", durations[f])
		}
	}
	for _, f := range []struct {
		name string
		r    time.Duration
	}{{"retention.delivery_attempts", d.Retention.DeliveryAttempts}, {"retention.notifications", d.Retention.Notifications},
		{"retention.deliveries", d.Retention.Deliveries}} {
		if f.r != 0 && f.r < 24*time.Hour {
			bad(f.name, "must be 0 (keep forever) or at least 24h, got %s", f.r)
		}
	}
	errs = append(errs, d.Retention.validate()...)
	switch d.Log.Level {
	case "trace", "debug", "info", "warn", "error":
	default:
		bad("log.level", "unknown level %q (want trace, debug, info, warn or error)", d.Log.Level)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// IsLoopback reports whether the listen address addr ("host:port") can
// only be reached from this machine: a loopback IP or "localhost". An
// empty host (every interface) is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// pluginEnvName says what is wrong with n as a name of plugins.env ("" when
// nothing is).
func pluginEnvName(n string) string {
	for i, r := range n {
		if r != '_' && (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (i == 0 || r < '0' || r > '9') {
			return fmt.Sprintf("%q is not a variable name (letters, digits and _, not starting with a digit)", n)
		}
	}
	switch {
	case n == "":
		return "an empty variable name"
	case strings.HasPrefix(n, daemonEnvPrefix):
		return fmt.Sprintf("%s: HERALD_* variables are the daemon's own settings and secrets (HERALD_DATABASE_URL holds a password) and are never passed to plugins", n)
	case strings.HasPrefix(n, "PLUGIN_"):
		return fmt.Sprintf("%s: PLUGIN_* variables belong to the plugin protocol and are set by the host", n)
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// takeQueues removes amqp.queue from a parsed config file and decodes it:
// a map of queue name to settings (YAML), or the list of single-entry maps
// HCL makes of repeated `queue "name" { ... }` blocks.
func takeQueues(raw map[string]any) (map[string]QueueConfig, error) {
	return takeBlocks[QueueConfig](raw, "amqp", "queue", `queue "name" { ... }`, mapstructure.StringToSliceHookFunc(","))
}

// takeBlocks removes section.block from a parsed config file and decodes
// it into a map of label to T: a map of label to settings (YAML), or the
// list of single-entry maps HCL makes of repeated `block "label" { ... }`
// blocks (labels may hold dots, which koanf would read as nesting). Errors
// name the key (section.block.label); hook converts the values.
func takeBlocks[T any](raw map[string]any, section, block, example string, hook mapstructure.DecodeHookFunc) (map[string]T, error) {
	sec, ok := raw[section].(map[string]any)
	if !ok {
		return nil, nil
	}
	v, ok := sec[block]
	if !ok {
		return nil, nil
	}
	delete(sec, block)
	key := section + "." + block
	out := map[string]T{}
	var walk func(v any) error
	walk = func(v any) error {
		switch t := v.(type) {
		case []map[string]any:
			for _, m := range t {
				if err := walk(m); err != nil {
					return err
				}
			}
		case []any:
			for _, m := range t {
				if err := walk(m); err != nil {
					return err
				}
			}
		case map[string]any:
			for name, body := range t {
				if _, dup := out[name]; dup {
					return fmt.Errorf("%s.%s: declared twice", key, name)
				}
				x, err := decodeBlock[T](key+"."+name, body, hook)
				if err != nil {
					return err
				}
				out[name] = x
			}
		default:
			return fmt.Errorf("%s: want %s blocks (%s), got %T", key, block, example, v)
		}
		return nil
	}
	if err := walk(v); err != nil {
		return nil, err
	}
	return out, nil
}

// decodeBlock decodes one labelled block, key naming it in errors.
func decodeBlock[T any](key string, body any, hook mapstructure.DecodeHookFunc) (T, error) {
	var x T
	switch t := body.(type) {
	case []map[string]any:
		if len(t) != 1 {
			return x, fmt.Errorf("%s: want one block", key)
		}
		body = t[0]
	case []any:
		if len(t) != 1 {
			return x, fmt.Errorf("%s: want one block", key)
		}
		body = t[0]
	}
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		ErrorUnused: true, WeaklyTypedInput: true, Result: &x, TagName: "koanf", DecodeHook: hook,
	})
	if err != nil {
		return x, err
	}
	if err := dec.Decode(body); err != nil {
		return x, fmt.Errorf("%s: %w", key, err)
	}
	return x, nil
}

// resolveDaemonRefs replaces every string of a parsed config file that is a
// secret reference with what it stands for, in place, and collects the
// problems (named by key path) in errs. Lists of blocks (HCL) keep their
// key; lists of values add the index.
func resolveDaemonRefs(v any, baseDir, path string, errs *[]string) any {
	sub := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch t := v.(type) {
	case string:
		val, _, err := secret.Resolve(t, baseDir)
		if err != nil {
			*errs = append(*errs, fmt.Sprintf("%s: %v", path, err))
			return t
		}
		return val
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			t[k] = resolveDaemonRefs(t[k], baseDir, sub(k), errs)
		}
		return t
	case []map[string]any:
		for _, m := range t {
			resolveDaemonRefs(m, baseDir, path, errs)
		}
		return t
	case []any:
		for i, x := range t {
			p := path
			if _, isMap := x.(map[string]any); !isMap {
				p = sub(strconv.Itoa(i))
			}
			t[i] = resolveDaemonRefs(x, baseDir, p, errs)
		}
		return t
	case []string:
		for i, x := range t {
			t[i], _ = resolveDaemonRefs(x, baseDir, sub(strconv.Itoa(i)), errs).(string)
		}
		return t
	}
	return v
}

// The values of amqp.queue_type.
const (
	QueueClassic = "classic"
	QueueQuorum  = "quorum"
)

// BrokerURLs returns the broker URLs to connect to, in order: amqp.urls,
// or amqp.url alone.
func (a AMQPConfig) BrokerURLs() []string {
	if len(a.URLs) > 0 {
		return a.URLs
	}
	return []string{a.URL}
}

// checkURL checks the syntax of a broker URL without repeating the URL
// (and its password) in the error, and that the TLS settings fit its
// scheme.
func (a AMQPConfig) checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("not a valid URL (%v); percent-encode reserved characters in the user name and password", err)
	}
	switch u.Scheme {
	case "amqp":
		if a.TLSCAFile != "" || a.TLSCertFile != "" || a.TLSKeyFile != "" || a.TLSServerName != "" {
			return errors.New("amqp.tls_* settings need an amqps:// URL")
		}
	case "amqps":
	default:
		return fmt.Errorf("scheme %q: want amqp:// or amqps://", u.Scheme)
	}
	return nil
}

// TLSConfig returns the TLS settings for an amqps:// URL: the CA file's
// roots (the system's when none is given), the client certificate and the
// server name. It returns nil when no tls_* key is set, so that the AMQP
// client's defaults apply (the system's roots, the URL's host).
func (a AMQPConfig) TLSConfig() (*tls.Config, error) {
	if a.TLSCAFile == "" && a.TLSCertFile == "" && a.TLSServerName == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: a.TLSServerName}
	if a.TLSCAFile != "" {
		pem, err := os.ReadFile(a.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("amqp.tls_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("amqp.tls_ca_file: %s holds no PEM certificate", a.TLSCAFile)
		}
		c.RootCAs = pool
	}
	if a.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(a.TLSCertFile, a.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("amqp.tls_cert_file/amqp.tls_key_file: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// SecretValues returns the passwords of the database and broker URLs, for
// a secret.Redactor.
func (d Daemon) SecretValues() []string {
	var out []string
	for _, u := range append([]string{d.Database.URL, d.Database.APIURL, d.AMQP.URL}, d.AMQP.URLs...) {
		if p := secret.URLPassword(u); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// numberNotDuration refuses a bare number where a duration goes: read
// weakly it would be nanoseconds (shutdown_grace = 30 meaning 30ns).
func numberNotDuration(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeOf(time.Duration(0)) {
		return data, nil
	}
	switch from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16,
		reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return nil, fmt.Errorf("%v is not a duration: write it with a unit, such as \"%vs\"", data, data)
	}
	return data, nil
}

// validate checks the periods added to retention after delivery_attempts
// and notifications (which Validate checks), and the tenants' blocks.
func (r RetentionConfig) validate() []string {
	var errs []string
	bad := func(field, msg string, args ...any) {
		errs = append(errs, fmt.Sprintf("%s: %s", field, fmt.Sprintf(msg, args...)))
	}
	period := func(key string, v time.Duration) {
		if v != 0 && v < 24*time.Hour {
			bad(key, "must be 0 (keep forever) or at least 24h, got %s", v)
		}
	}
	period("retention.events", r.Events)
	period("retention.archived_notifications", r.ArchivedNotifications)
	if r.ArchivedNotifications > 0 && r.Notifications > 0 && r.ArchivedNotifications > r.Notifications {
		bad("retention.archived_notifications", "%s is longer than retention.notifications (%s): archived notifications may only go sooner",
			r.ArchivedNotifications, r.Notifications)
	}
	for _, t := range sortedKeys(r.Tenants) {
		tr := r.Tenants[t]
		prefix := "retention.tenant." + t + "."
		if t == "" {
			bad("retention.tenant", "a tenant block needs the tenant id as its label")
			continue
		}
		for _, k := range []struct {
			key         string
			own, global time.Duration
			globalKey   string
		}{
			{"events", tr.Events, r.Events, "retention.events"},
			{"notifications", tr.Notifications, r.Notifications, "retention.notifications"},
			{"archived_notifications", tr.ArchivedNotifications, r.ArchivedNotifications, "retention.archived_notifications"},
			{"delivery_attempts", tr.DeliveryAttempts, r.DeliveryAttempts, "retention.delivery_attempts"},
		} {
			period(prefix+k.key, k.own)
			if k.own > 0 && k.global > 0 && k.own > k.global {
				bad(prefix+k.key, "%s is longer than %s (%s): a tenant's period may only shorten the global one "+
					"(a monthly partition holds every tenant's rows and goes at the global period)", k.own, k.globalKey, k.global)
			}
		}
		notes := cmp.Or(tr.Notifications, r.Notifications)
		if tr.ArchivedNotifications > 0 && notes > 0 && tr.ArchivedNotifications > notes {
			bad(prefix+"archived_notifications", "%s is longer than the tenant's notifications period (%s): archived notifications may only go sooner",
				tr.ArchivedNotifications, notes)
		}
	}
	return errs
}

// takeTenantRetention removes retention.tenant from a parsed config file
// and decodes it: a map of tenant id to periods (YAML), or the list of
// single-entry maps HCL makes of repeated `tenant "id" { ... }` blocks.
func takeTenantRetention(raw map[string]any) (map[string]TenantRetentionConfig, error) {
	return takeBlocks[TenantRetentionConfig](raw, "retention", "tenant", `tenant "id" { ... }`,
		mapstructure.ComposeDecodeHookFunc(numberNotDuration, mapstructure.StringToTimeDurationHookFunc()))
}
