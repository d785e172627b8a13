package tracing

import "github.com/heraldhq/herald/core/internal/config/field"

// Config is the daemon's tracing { ... } settings. Everything about the
// exporter but the choice to export (endpoint, headers, protocol,
// sampler, service name) comes from the standard OTEL_* environment
// variables (see Resolve).
type Config struct {
	// Exporter is "none" (no spans recorded) or "otlp".
	// OTEL_TRACES_EXPORTER, when set, overrides it; OTEL_SDK_DISABLED=true
	// turns tracing off whatever both say.
	Exporter string `koanf:"exporter"`
}

// DefaultConfig returns the default settings: tracing off.
func DefaultConfig() Config {
	return Config{Exporter: ExporterNone}
}

// Validate checks the settings; it returns field.Errors naming the keys.
func (c Config) Validate() error {
	var errs field.Errors
	switch c.Exporter {
	case ExporterNone, ExporterOTLP:
	default:
		errs.Add("exporter", "unknown exporter %q (want %q or %q)", c.Exporter, ExporterNone, ExporterOTLP)
	}
	return errs.Err()
}
