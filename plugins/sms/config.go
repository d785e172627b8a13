package main

import (
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/heraldhq/herald/sdk"
)

// Config field names.
const (
	FieldBaseURL             = "base_url"
	FieldAccountSID          = "account_sid"
	FieldAuthToken           = "auth_token"
	FieldFrom                = "from"
	FieldMessagingServiceSID = "messaging_service_sid"
	FieldTimeout             = "timeout"
	FieldConcurrency         = "concurrency"
)

// Defaults.
const (
	DefaultBaseURL     = "https://api.twilio.com"
	DefaultTimeout     = 10 * time.Second
	DefaultConcurrency = 4
)

var (
	accountSIDPattern = regexp.MustCompile(`^AC[0-9a-fA-F]{32}$`)
	serviceSIDPattern = regexp.MustCompile(`^MG[0-9a-fA-F]{32}$`)
)

// configSpecs declares the plugin's config fields, derived from Config's
// tags.
var configSpecs = sdk.MustConfigFields(Config{})

// Config is the sms plugin's provider config.
type Config struct {
	// BaseURL is the Twilio REST API base URL.
	BaseURL string `config:"base_url" default:"https://api.twilio.com" help:"Base URL of the Twilio REST API; messages go to <base_url>/2010-04-01/Accounts/<account_sid>/Messages.json."`
	// AccountSID identifies the Twilio account (basic auth user).
	AccountSID string `config:"account_sid,required" help:"Twilio account SID (AC followed by 32 hex digits)."`
	// AuthToken is the basic auth password.
	AuthToken string `config:"auth_token,required,secret" help:"Twilio auth token (HTTP basic auth password)."`
	// From is the sender number or id.
	From string `config:"from" help:"Sender: an E.164 number or alphanumeric sender id. Set this or messaging_service_sid."`
	// MessagingServiceSID selects a Messaging Service instead of From.
	MessagingServiceSID string `config:"messaging_service_sid" help:"Messaging Service SID (MG…) that picks the sender. Set this or from."`
	// Timeout bounds one HTTP request.
	Timeout time.Duration `config:"timeout" default:"10s" help:"Timeout of one HTTP request."`
	// Concurrency bounds the requests one Send runs at once.
	Concurrency int `config:"concurrency" default:"4" help:"How many Twilio requests one Send runs at once."`
}

// Validate checks the config's meaning; errors are *sdk.ConfigError.
func (c *Config) Validate() error {
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &sdk.ConfigError{Field: FieldBaseURL, Msg: fmt.Sprintf("must be an http(s) URL, got %q", c.BaseURL)}
	}
	if !accountSIDPattern.MatchString(c.AccountSID) {
		return &sdk.ConfigError{Field: FieldAccountSID, Msg: "must be AC followed by 32 hex digits"}
	}
	if c.AuthToken == "" {
		return &sdk.ConfigError{Field: FieldAuthToken, Msg: "must not be empty"}
	}
	switch {
	case c.From == "" && c.MessagingServiceSID == "":
		return &sdk.ConfigError{Field: FieldFrom, Msg: "set from or messaging_service_sid"}
	case c.From != "" && c.MessagingServiceSID != "":
		return &sdk.ConfigError{Field: FieldMessagingServiceSID, Msg: "set either from or messaging_service_sid, not both"}
	case c.MessagingServiceSID != "" && !serviceSIDPattern.MatchString(c.MessagingServiceSID):
		return &sdk.ConfigError{Field: FieldMessagingServiceSID, Msg: "must be MG followed by 32 hex digits"}
	}
	if c.Timeout <= 0 {
		return &sdk.ConfigError{Field: FieldTimeout, Msg: "must be positive"}
	}
	if c.Concurrency < 1 || c.Concurrency > 20 {
		return &sdk.ConfigError{Field: FieldConcurrency, Msg: fmt.Sprintf("must be between 1 and 20, got %d", c.Concurrency)}
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
