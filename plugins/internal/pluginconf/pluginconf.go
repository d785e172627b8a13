// Package pluginconf decodes a plugin's provider config strictly: every key
// must be a declared field, every value must have the declared type, and
// every failure is an *sdk.ConfigError that names the field.
//
// The host checks the map against the plugin's FieldSpecs before Configure;
// the plugins check again (sdk.CheckConfig), so a plugin driven by a host
// that skipped the check, or by a test, still refuses bad config.
package pluginconf

import (
	"fmt"
	"sort"

	"github.com/go-viper/mapstructure/v2"

	"github.com/heraldhq/herald/sdk"
)

// Decode checks raw against specs with sdk.CheckConfig (unknown keys, types,
// required fields, enums, defaults) and decodes the typed result into out, a
// pointer to a struct whose fields carry `mapstructure:"<field name>"` tags
// and have the Go types CheckConfig produces (string, int, bool,
// time.Duration, []string).
func Decode(raw map[string]any, specs []sdk.FieldSpec, out any) error {
	checked, err := sdk.CheckConfig(specs, raw)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(checked))
	for k := range checked {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
			ErrorUnused: true,
			Result:      out,
			TagName:     "mapstructure",
		})
		if err != nil {
			return fmt.Errorf("pluginconf: decoder: %w", err)
		}
		if err := dec.Decode(map[string]any{k: checked[k]}); err != nil {
			// CheckConfig typed the value already, so a failure here means
			// the Config struct disagrees with the field specs.
			return &sdk.ConfigError{Field: k, Msg: fmt.Sprintf("cannot decode (plugin bug): %v", err)}
		}
	}
	return nil
}

// Load decodes raw strictly (Decode) over the defaults c already holds and
// validates the result: a plugin's whole reading of its provider config.
func Load[C any, P interface {
	*C
	Validate() error
}](raw map[string]any, specs []sdk.FieldSpec, c C) (C, error) {
	var zero C
	if err := Decode(raw, specs, P(&c)); err != nil {
		return zero, err
	}
	if err := P(&c).Validate(); err != nil {
		return zero, err
	}
	return c, nil
}
