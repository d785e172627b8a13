package maintenance

import (
	"time"

	"github.com/heraldhq/herald/core/internal/config/field"
)

// Config tunes the maintenance stage and the listeners' lease (the
// daemon file's retry section).
type Config struct {
	// PollInterval is how often expired leases and DEFERRED deliveries
	// whose quiet hours ended are released.
	PollInterval time.Duration `koanf:"poll_interval"`
	// Lease bounds one attempt: a listener gives a plugin's Send half of it.
	// (SENDING rows left by Herald versions that claimed before sending are
	// moved to RETRY once it has passed.)
	Lease time.Duration `koanf:"lease"`
}

// DefaultConfig returns the defaults: a round every DefaultInterval, a
// two-minute lease.
func DefaultConfig() Config {
	return Config{PollInterval: DefaultInterval, Lease: 2 * time.Minute}
}

// Validate checks the settings; it returns field.Errors naming the keys.
func (c Config) Validate() error {
	var errs field.Errors
	errs.PositiveDuration("poll_interval", c.PollInterval)
	errs.PositiveDuration("lease", c.Lease)
	return errs.Err()
}
