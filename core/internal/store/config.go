package store

import (
	"strings"

	"github.com/heraldhq/herald/core/internal/config/field"
)

// Config is the PostgreSQL connection and the roles each part of the
// daemon runs as: the daemon's database { ... } settings. Row-level
// security keeps tenants apart: the public API runs as APIRole with its
// tenant set per transaction, the pipeline as WorkerRole (every tenant),
// the superadmin API as AdminRole (read only).
type Config struct {
	// URL is a libpq-style URL (or a libpq key/value string, "host=...
	// dbname=...") for the pipeline and the CLI; the role it logs in as
	// owns Herald's tables when it runs the migrations. For TLS add
	// sslmode=verify-full and sslrootcert=<CA file> (pgx reads libpq's
	// ssl* parameters). A connection attempt (TCP, TLS, startup and
	// authentication) is bounded by the connect_timeout url gives, 10s when
	// it gives none; and on Linux the kernel closes a connection whose sent
	// data stays unacknowledged for 10s (TCP_USER_TIMEOUT): the statement
	// fails and the pool dials again, so a network partition is noticed
	// and retried rather than waited out on TCP's retransmission backoff.
	URL string `koanf:"url"`
	// MaxConns caps the pipeline's connection pool.
	MaxConns int `koanf:"max_conns"`
	// APIURL is where the HTTP API logs in: a login role of its own that
	// is only a member of herald_api (herald db roles creates it from this
	// URL's user, with the password this URL gives or one it generates
	// into the file its passfile parameter names). Empty: url, the tables'
	// owner, which herald serve refuses unless allow_owner_login is set.
	APIURL string `koanf:"api_url"`
	// APIMaxConns caps the HTTP API's connection pool.
	APIMaxConns int `koanf:"api_max_conns"`
	// WorkerRole is the role the pipeline sets on its connections (SET
	// ROLE); empty keeps the login role.
	WorkerRole string `koanf:"worker_role"`
	// APIRole is the role the HTTP API sets on its connections; empty keeps
	// the login role of api_url. Either way the API refuses to start unless
	// the role it ends up as is subject to row-level security.
	APIRole string `koanf:"api_role"`
	// AdminRole is the role the superadmin API sets on its connections
	// (read-only, every tenant); empty keeps the login role of admin_url.
	// The daemon refuses to start unless it is a member of herald_admin
	// that may write nothing: not a superuser, the tables' owner,
	// herald_worker or herald_api.
	AdminRole string `koanf:"admin_role"`
	// AdminURL is where the superadmin API logs in: a login role of its
	// own that is only a member of herald_admin (herald db roles creates
	// it, as for api_url). Empty: url, the tables' owner, which herald
	// serve refuses unless allow_owner_login is set.
	AdminURL string `koanf:"admin_url"`
	// AllowOwnerLogin lets the API and superadmin pools log in as a role
	// that could leave their group role for more (the tables' owner, a
	// superuser, BYPASSRLS, a member of another of Herald's groups): the
	// behaviour before api_url and admin_url were required. A query that
	// SQL injection made could then RESET ROLE and read or write every
	// tenant; herald serve logs a warning at every start.
	AllowOwnerLogin bool `koanf:"allow_owner_login"`
}

// DefaultConfig returns the database's default settings: the quick
// start's local server.
func DefaultConfig() Config {
	return Config{URL: "postgres://herald:herald@127.0.0.1:5432/herald?sslmode=disable", MaxConns: 16,
		APIMaxConns: 8, WorkerRole: RoleWorker, APIRole: RoleAPI, AdminRole: RoleAdmin}
}

// Validate checks the settings; it returns field.Errors naming the keys.
func (c Config) Validate() error {
	var errs field.Errors
	errs.NotEmpty("url", c.URL)
	for _, r := range []struct{ key, role string }{{"worker_role", c.WorkerRole}, {"api_role", c.APIRole}, {"admin_role", c.AdminRole}} {
		if len(r.role) > 63 || strings.ContainsAny(r.role, "\x00\"") {
			errs.Add(r.key, "%q is not a PostgreSQL role name", r.role)
		}
	}
	errs.Positive("max_conns", c.MaxConns)
	errs.Positive("api_max_conns", c.APIMaxConns)
	return errs.Err()
}
