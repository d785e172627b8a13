package httpguard

import (
	"net"
	"strings"
	"time"

	"github.com/heraldhq/herald/core/internal/config/field"
)

// Config is the daemon's http { ... } settings: the listen addresses of
// the public and admin APIs and what bounds a client of either: timeouts,
// header size, connections and, on the public API, request rates.
type Config struct {
	// Listen is the public API address.
	Listen string `koanf:"listen"`
	// AdminListen is the admin API address (/metrics, plugins, rules
	// reload, pprof); empty turns the admin API off. Anywhere but loopback
	// it needs admin_token_file.
	AdminListen string `koanf:"admin_listen"`
	// AdminTokenFile holds the bearer token every admin API request must
	// carry (read at start; mode 0600 or stricter, or owned by root and
	// readable by herald's own group alone, as Kubernetes mounts a Secret
	// under fsGroup): at least 16 printable
	// ASCII characters without spaces (surrounding white space and the
	// trailing newline are trimmed), the file at most 4 KiB. Relative to
	// the config file.
	AdminTokenFile string `koanf:"admin_token_file"`
	// Pprof exposes /debug/pprof on the admin listener, behind its token.
	Pprof bool `koanf:"pprof"`
	// ReadHeaderTimeout bounds reading a request's headers, on both
	// listeners; it also bounds how long a new connection may stay silent.
	ReadHeaderTimeout time.Duration `koanf:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, body included, on both
	// listeners.
	ReadTimeout time.Duration `koanf:"read_timeout"`
	// WriteTimeout bounds a public API request from the end of its headers
	// to the end of its response.
	WriteTimeout time.Duration `koanf:"write_timeout"`
	// AdminWriteTimeout is write_timeout on the admin listener: long
	// enough for a plugin reload (up to 2m) and a pprof profile or trace
	// (whose seconds must stay below it).
	AdminWriteTimeout time.Duration `koanf:"admin_write_timeout"`
	// IdleTimeout closes a keep-alive connection that waits this long for
	// its next request.
	IdleTimeout time.Duration `koanf:"idle_timeout"`
	// MaxHeaderBytes bounds a request's headers (larger: 431).
	MaxHeaderBytes int `koanf:"max_header_bytes"`
	// MaxConns caps the open connections of each listener (0: no cap);
	// connections beyond it wait in the kernel's backlog.
	MaxConns int `koanf:"max_conns"`
	// MaxConnsPerIP caps the open connections of one client address (an
	// IPv4 address or an IPv6 /64; the TCP peer, so behind a reverse proxy
	// the proxy) on the public listener, live sessions included (0: no
	// cap). A connection past it is answered 429 (a problem document,
	// Retry-After: 1, Connection: close) and closed at once, holding no
	// slot of max_conns. Behind a reverse proxy, cap per client there and
	// set it to 0.
	MaxConnsPerIP int `koanf:"max_conns_per_ip"`
	// PressureIdleTimeout is idle_timeout while the public listener's
	// open connections are at three quarters of max_conns or more: idle
	// keep-alive connections are then closed after this long (0: never
	// early).
	PressureIdleTimeout time.Duration `koanf:"pressure_idle_timeout"`
	// RateLimit bounds the public API's request rates: each rate has a
	// token bucket of burst requests, and a request over its rate gets 429
	// with Retry-After.
	RateLimit RateLimits `koanf:"rate_limit"`
	// DirectoryBatch bounds one batch of the directory API (POST
	// /v1/recipients:batch); larger batches get 413.
	DirectoryBatch DirectoryBatch `koanf:"directory_batch"`
}

// DirectoryBatch bounds one batch of the directory API.
type DirectoryBatch struct {
	// MaxEntries is how many entries (JSON lines) one batch may hold.
	MaxEntries int `koanf:"max_entries"`
	// MaxBytes bounds the body of one batch.
	MaxBytes int64 `koanf:"max_bytes"`
}

// RateLimits are the public API's request rates, in requests per second
// (0: no limit), each with a token bucket of Burst requests; a request
// over its rate gets 429 with Retry-After.
type RateLimits struct {
	// PerKey is the requests per second one API key may make (0: no
	// limit), counted after authentication.
	PerKey float64 `koanf:"per_key"`
	// PerIP is the requests per second one client IP (IPv4 address or IPv6
	// /64; the TCP peer, so behind a reverse proxy the proxy) may make (0:
	// no limit), counted before authentication, for every route. Behind a
	// reverse proxy, limit per client there and set per_ip to 0.
	PerIP float64 `koanf:"per_ip"`
	// Burst is how many requests a key or an IP may make at once above
	// its rate.
	Burst int `koanf:"burst"`
}

// DefaultConfig returns the HTTP listeners' default settings.
func DefaultConfig() Config {
	return Config{Listen: "127.0.0.1:8080", AdminListen: "127.0.0.1:8081",
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		AdminWriteTimeout: 5 * time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10, MaxConns: 1024,
		MaxConnsPerIP: 128, PressureIdleTimeout: 5 * time.Second,
		RateLimit:      RateLimits{PerKey: 100, PerIP: 200, Burst: 200},
		DirectoryBatch: DirectoryBatch{MaxEntries: 5000, MaxBytes: 16 << 20}}
}

// Validate checks the settings; it returns field.Errors naming the keys.
func (c Config) Validate() error {
	var errs field.Errors
	errs.NotEmpty("listen", c.Listen)
	if c.AdminListen != "" && c.AdminTokenFile == "" && !IsLoopback(c.AdminListen) {
		errs.Add("admin_listen", "%q is not a loopback address, so the admin API needs a token: set http.admin_token_file "+
			"(env HERALD_HTTP_ADMIN_TOKEN_FILE) to a mode-0600 file holding one, or listen on 127.0.0.1", c.AdminListen)
	}
	if c.MaxHeaderBytes <= 0 {
		errs.Add("max_header_bytes", "must be positive, got %d", c.MaxHeaderBytes)
	}
	if c.MaxConns < 0 {
		errs.Add("max_conns", "must not be negative (0: no cap), got %d", c.MaxConns)
	}
	if c.MaxConnsPerIP < 0 {
		errs.Add("max_conns_per_ip", "must not be negative (0: no cap), got %d", c.MaxConnsPerIP)
	}
	if c.PressureIdleTimeout < 0 {
		errs.Add("pressure_idle_timeout", "must not be negative (0: never early), got %s", c.PressureIdleTimeout)
	}
	rl := c.RateLimit
	if rl.PerKey < 0 || rl.PerIP < 0 {
		errs.Add("rate_limit", "per_key and per_ip must not be negative (0: no limit), got %g and %g", rl.PerKey, rl.PerIP)
	}
	if (rl.PerKey > 0 || rl.PerIP > 0) && rl.Burst < 1 {
		errs.Add("rate_limit.burst", "must be at least 1 while a rate limit is on, got %d", rl.Burst)
	}
	if c.DirectoryBatch.MaxEntries < 1 {
		errs.Add("directory_batch.max_entries", "must be at least 1, got %d", c.DirectoryBatch.MaxEntries)
	}
	if c.DirectoryBatch.MaxBytes < 1<<10 {
		errs.Add("directory_batch.max_bytes", "must be at least 1024, got %d", c.DirectoryBatch.MaxBytes)
	}
	errs.PositiveDuration("read_header_timeout", c.ReadHeaderTimeout)
	errs.PositiveDuration("read_timeout", c.ReadTimeout)
	errs.PositiveDuration("write_timeout", c.WriteTimeout)
	errs.PositiveDuration("admin_write_timeout", c.AdminWriteTimeout)
	errs.PositiveDuration("idle_timeout", c.IdleTimeout)
	return errs.Err()
}

// Limits are the bounds of a listener of c; the admin listener's writes
// may take longer (plugin reloads, profiles), and it has no per-address
// cap (its clients are the operator's).
func (c Config) Limits(admin bool) Limits {
	l := Limits{ReadHeaderTimeout: c.ReadHeaderTimeout, ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout,
		IdleTimeout: c.IdleTimeout, MaxHeaderBytes: c.MaxHeaderBytes, MaxConns: c.MaxConns,
		MaxConnsPerIP: c.MaxConnsPerIP, PressureIdleTimeout: c.PressureIdleTimeout}
	if admin {
		l.WriteTimeout = c.AdminWriteTimeout
		l.MaxConnsPerIP, l.PressureIdleTimeout = 0, 0
	}
	return l
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
