package source

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/heraldhq/herald/core/internal/config/field"
)

// Config is one `source "NAME" { ... }` block of the daemon file: a
// service's own PostgreSQL database holding the outbox `herald outbox
// install` created, and the tenants its events may be for.
type Config struct {
	// URL connects to the service's database (postgres://...; a secret
	// reference such as file:/run/secrets/orders-db.url keeps the password
	// out of the file). The login needs SELECT and DELETE on herald_outbox
	// and UPDATE of its refused_at and refusal columns.
	URL string `koanf:"url"`
	// Tenants are the tenants this source may write events for. A row for
	// any other tenant is refused: it stays in herald_outbox with
	// refused_at and refusal set, is counted in
	// herald_source_refused_total, and is never forwarded.
	Tenants []string `koanf:"tenants"`
	// BatchSize is the most rows forwarded in one pair of transactions
	// (one in the service's database, one in Herald's); 0 is 500.
	BatchSize int `koanf:"batch_size"`
	// PollInterval is how often the source is read when no NOTIFY woke the
	// stage (the fallback while its LISTEN session is down); 0 is 1s.
	PollInterval time.Duration `koanf:"poll_interval"`
}

// DefaultConfig returns the defaults of a source block.
func DefaultConfig() Config {
	return Config{BatchSize: 500, PollInterval: time.Second}
}

// Defaults returns c with every zero setting given its default (a
// labelled block is decoded on its own, without the defaults map).
func (c Config) Defaults() Config {
	d := DefaultConfig()
	if c.BatchSize == 0 {
		c.BatchSize = d.BatchSize
	}
	if c.PollInterval == 0 {
		c.PollInterval = d.PollInterval
	}
	return c
}

// tenantID is the form of a tenant id (migration 0045's check).
var tenantID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,99}$`)

// nameRE is the form of a source's name: it labels metrics and logs.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// Validate checks the settings; it returns field.Errors naming the keys.
func (c Config) Validate() error {
	var errs field.Errors
	errs.NotEmpty("url", c.URL)
	if len(c.Tenants) == 0 {
		errs.Add("tenants", "must name at least one tenant the source may write for")
	}
	for i, t := range c.Tenants {
		if !tenantID.MatchString(t) {
			errs.Add(fmt.Sprintf("tenants[%d]", i), "%q is not a tenant id (1-100 characters of A-Z a-z 0-9 . _ : @ - starting with a letter or digit)", t)
		}
		if slices.Index(c.Tenants, t) < i {
			errs.Add(fmt.Sprintf("tenants[%d]", i), "%q is listed twice", t)
		}
	}
	if c.BatchSize < 0 || c.BatchSize > 10000 {
		errs.Add("batch_size", "must be 1 to 10000 (0: the default, 500), got %d", c.BatchSize)
	}
	if c.PollInterval < 0 {
		errs.Add("poll_interval", "must be a positive duration (0: the default, 1s), got %s", c.PollInterval)
	}
	return errs.Err()
}

// ValidateAll checks every block of sources (the daemon's source map);
// the errors are keyed by the block's name.
func ValidateAll(sources map[string]Config) error {
	var errs field.Errors
	names := make([]string, 0, len(sources))
	for n := range sources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !nameRE.MatchString(n) {
			errs.Add(n, "a source's name is 1-63 characters of A-Z a-z 0-9 . _ - starting with a letter or digit")
			continue
		}
		errs.Merge(n, sources[n].Validate())
	}
	return errs.Err()
}
