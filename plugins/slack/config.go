package main

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/heraldhq/herald/sdk"
)

// Config field names.
const (
	FieldToken          = "token"
	FieldAPIURL         = "api_url"
	FieldDefaultChannel = "default_channel"
	FieldTimeout        = "timeout"
)

// Defaults.
const (
	DefaultAPIURL  = "https://slack.com/api/"
	DefaultTimeout = 10 * time.Second
)

// AttrSlackUserID is the recipient attribute holding the user's Slack id
// (U…/W…); messages to it arrive as a direct message from the app.
const AttrSlackUserID = "slack_user_id"

// configSpecs declares the plugin's config fields, derived from Config's
// tags.
var configSpecs = sdk.MustConfigFields(Config{})

// Config is the slack plugin's provider config.
type Config struct {
	// Token is the bot token.
	Token string `config:"token,required,secret" help:"Slack bot token (xoxb-…) with the chat:write scope."`
	// APIURL is the Web API base URL, ending in a slash.
	APIURL string `config:"api_url" default:"https://slack.com/api/" help:"Slack Web API base URL (tests point it to a slacktest server)."`
	// DefaultChannel receives deliveries for recipients without a Slack id.
	DefaultChannel string `config:"default_channel" help:"Channel id or name for recipients without a slack_user_id attribute; empty means such deliveries fail with no_address."`
	// Timeout bounds one Web API call.
	Timeout time.Duration `config:"timeout" default:"10s" help:"Timeout of one Web API call."`
}

// Validate checks the config's meaning; errors are *sdk.ConfigError.
func (c *Config) Validate() error {
	if strings.TrimSpace(c.Token) == "" {
		return &sdk.ConfigError{Field: FieldToken, Msg: "must not be empty"}
	}
	u, err := url.Parse(c.APIURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &sdk.ConfigError{Field: FieldAPIURL, Msg: fmt.Sprintf("must be an http(s) URL, got %q", c.APIURL)}
	}
	if !strings.HasSuffix(c.APIURL, "/") {
		c.APIURL += "/"
	}
	if c.Timeout <= 0 {
		return &sdk.ConfigError{Field: FieldTimeout, Msg: "must be positive"}
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
