package main

import (
	"net/url"
	"time"

	"github.com/heraldhq/herald/sdk"
)

// config is the webhook's provider config. The SDK derives the field specs
// the host checks (sdk.ConfigFields) from its tags and decodes the
// operator's config into it (sdk.DecodeConfig), refusing unknown keys,
// wrong types and missing required fields with an error naming the field;
// Validate checks what the types cannot say.
type config struct {
	// URL is the receiver's http(s) URL.
	URL string `config:"url,required" help:"the receiver's http(s) URL"`
	// Secret is the HMAC-SHA256 key for X-Herald-Signature.
	Secret string `config:"secret,required,secret" help:"HMAC-SHA256 key for X-Herald-Signature"`
	// Timeout bounds one POST.
	Timeout time.Duration `config:"timeout" default:"10s" help:"timeout of one POST"`

	// url is URL, parsed by Validate.
	url *url.URL
}

// configSpecs declares the plugin's config in Describe.
var configSpecs = sdk.MustConfigFields(config{})

// Validate checks the meaning of the values.
func (c *config) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &sdk.ConfigError{Field: "url", Msg: "must be an absolute http or https URL, got " + c.URL}
	}
	if len(c.Secret) < 16 {
		return &sdk.ConfigError{Field: "secret", Msg: "must be at least 16 characters"}
	}
	if c.Timeout <= 0 {
		return &sdk.ConfigError{Field: "timeout", Msg: "must be positive"}
	}
	c.url = u
	return nil
}

// configFromParsed decodes the operator's config strictly and validates it.
func configFromParsed(m map[string]any) (config, error) {
	var c config
	if err := sdk.DecodeConfig(m, &c); err != nil {
		return config{}, err
	}
	return c, nil
}
