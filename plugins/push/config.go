package main

import (
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/heraldhq/herald/sdk"
)

// Config field names.
const (
	FieldEndpoint        = "endpoint"
	FieldProjectID       = "project_id"
	FieldAccessToken     = "access_token"
	FieldCredentialsFile = "credentials_file"
	FieldTimeout         = "timeout"
	FieldConcurrency     = "concurrency"
	FieldValidateOnly    = "validate_only"
)

// Defaults.
const (
	DefaultEndpoint    = "https://fcm.googleapis.com"
	DefaultTimeout     = 10 * time.Second
	DefaultConcurrency = 8
)

// configSpecs declares the plugin's config fields, derived from Config's
// tags.
var configSpecs = sdk.MustConfigFields(Config{})

// Config is the push plugin's provider config.
type Config struct {
	// Endpoint is the FCM API base URL.
	Endpoint string `config:"endpoint" default:"https://fcm.googleapis.com" help:"Base URL of the FCM HTTP v1 API; messages go to <endpoint>/v1/projects/<project_id>/messages:send."`
	// ProjectID is the Firebase project.
	ProjectID string `config:"project_id,required" help:"Firebase project id."`
	// AccessToken is a static bearer token (not refreshed).
	AccessToken string `config:"access_token,secret" help:"Static OAuth 2.0 bearer token; it is not refreshed. Set this or credentials_file."`
	// CredentialsFile is a service-account JSON key file.
	CredentialsFile string `config:"credentials_file" help:"Service-account JSON key file; the plugin signs a JWT with it and exchanges it at the file's token_uri for access tokens, refreshed before they expire. Set this or access_token."`
	// Timeout bounds one HTTP request.
	Timeout time.Duration `config:"timeout" default:"10s" help:"Timeout of one HTTP request."`
	// Concurrency bounds the requests one Send runs at once.
	Concurrency int `config:"concurrency" default:"8" help:"How many FCM requests one Send runs at once."`
	// ValidateOnly sends messages as a dry run.
	ValidateOnly bool `config:"validate_only" default:"false" help:"Ask FCM to validate messages without delivering them (dry run)."`

	// creds is CredentialsFile, parsed by Validate.
	creds *serviceAccount
}

// Validate checks the config's meaning; errors are *sdk.ConfigError.
func (c *Config) Validate() error {
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &sdk.ConfigError{Field: FieldEndpoint, Msg: fmt.Sprintf("must be an http(s) URL, got %q", c.Endpoint)}
	}
	if c.ProjectID == "" {
		return &sdk.ConfigError{Field: FieldProjectID, Msg: "must not be empty"}
	}
	switch {
	case c.AccessToken == "" && c.CredentialsFile == "":
		return &sdk.ConfigError{Field: FieldAccessToken, Msg: "set access_token or credentials_file"}
	case c.AccessToken != "" && c.CredentialsFile != "":
		return &sdk.ConfigError{Field: FieldCredentialsFile, Msg: "set either access_token or credentials_file, not both"}
	}
	if c.CredentialsFile != "" {
		b, err := os.ReadFile(c.CredentialsFile)
		if err != nil {
			return &sdk.ConfigError{Field: FieldCredentialsFile, Msg: err.Error()}
		}
		sa, err := parseServiceAccount(b)
		if err != nil {
			return &sdk.ConfigError{Field: FieldCredentialsFile, Msg: err.Error()}
		}
		c.creds = sa
	}
	if c.Timeout <= 0 {
		return &sdk.ConfigError{Field: FieldTimeout, Msg: "must be positive"}
	}
	if c.Concurrency < 1 || c.Concurrency > 100 {
		return &sdk.ConfigError{Field: FieldConcurrency, Msg: fmt.Sprintf("must be between 1 and 100, got %d", c.Concurrency)}
	}
	return nil
}

// configFromParsed decodes the operator's config map strictly (defaults
// from the tags) and validates the result (Config.Validate).
func configFromParsed(raw map[string]any) (Config, error) {
	var c Config
	if err := sdk.DecodeConfig(raw, &c); err != nil {
		return Config{}, err
	}
	return c, nil
}
