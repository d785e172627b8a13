package main

import (
	"net/url"
	"time"

	"github.com/heraldhq/herald/sdk"
)

// Config field names.
const (
	fieldURL     = "url"
	fieldSecret  = "secret"
	fieldTimeout = "timeout"
)

// configSpecs declares the plugin's config; the host checks the operator's
// config against it (unknown keys, types, required) before Configure.
var configSpecs = []sdk.FieldSpec{
	{Name: fieldURL, Type: sdk.FieldString, Required: true, Description: "the receiver's http(s) URL"},
	{Name: fieldSecret, Type: sdk.FieldString, Required: true, Secret: true, Description: "HMAC-SHA256 key for X-Herald-Signature"},
	{Name: fieldTimeout, Type: sdk.FieldDuration, Default: "10s", Description: "timeout of one POST"},
}

// config is the checked provider config.
type config struct {
	url     *url.URL
	secret  []byte
	timeout time.Duration
}

// configFromParsed reads config that sdk.CheckConfig already typed, and
// checks what the types cannot say.
func configFromParsed(m map[string]any) (config, error) {
	raw, _ := m[fieldURL].(string)
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return config{}, &sdk.ConfigError{Field: fieldURL, Msg: "must be an absolute http or https URL, got " + raw}
	}
	secret, _ := m[fieldSecret].(string)
	if len(secret) < 16 {
		return config{}, &sdk.ConfigError{Field: fieldSecret, Msg: "must be at least 16 characters"}
	}
	timeout, _ := m[fieldTimeout].(time.Duration)
	if timeout <= 0 {
		return config{}, &sdk.ConfigError{Field: fieldTimeout, Msg: "must be positive"}
	}
	return config{url: u, secret: []byte(secret), timeout: timeout}, nil
}
