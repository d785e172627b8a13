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
	FieldAMQPURL        = "amqp_url"
	FieldExchange       = "exchange"
	FieldPublishTimeout = "publish_timeout"
)

// Defaults.
const (
	DefaultAMQPURL        = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultPublishTimeout = 5 * time.Second
)

// configSpecs declares the plugin's config fields, derived from Config's
// tags.
var configSpecs = sdk.MustConfigFields(Config{})

// Config is the websocket plugin's provider config.
type Config struct {
	// AMQPURL is the broker, or the nodes of a cluster as URLs separated
	// by commas.
	AMQPURL string `config:"amqp_url,secret" default:"amqp://guest:guest@127.0.0.1:5672/" help:"RabbitMQ the daemons' live gateways consume from (amqp:// or amqps://; the vhost of herald serve's amqp.url); the nodes of a cluster as URLs separated by commas (herald serve's amqp.urls), tried in turn."`
	// Exchange is the live exchange.
	Exchange string `config:"exchange" default:"herald.live" help:"The live exchange (herald serve's live.exchange)."`
	// PublishTimeout bounds waiting for a batch's confirms.
	PublishTimeout time.Duration `config:"publish_timeout" default:"5s" help:"How long one batch may wait for the broker's confirms."`
}

// Validate checks the config's meaning; errors are *sdk.ConfigError.
func (c *Config) Validate() error {
	urls := c.URLs()
	for i, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
			msg := "must be an amqp:// or amqps:// URL with a host"
			if len(urls) > 1 {
				// The URLs hold passwords: say which one, not what it is.
				msg = fmt.Sprintf("URL %d of %d (comma-separated) must be an amqp:// or amqps:// URL with a host", i+1, len(urls))
			}
			return &sdk.ConfigError{Field: FieldAMQPURL, Msg: msg}
		}
	}
	if c.Exchange == "" || len(c.Exchange) > 255 {
		return &sdk.ConfigError{Field: FieldExchange, Msg: "must be 1 to 255 bytes"}
	}
	if c.PublishTimeout < 100*time.Millisecond {
		return &sdk.ConfigError{Field: FieldPublishTimeout, Msg: fmt.Sprintf("must be at least 100ms, got %s", c.PublishTimeout)}
	}
	return nil
}

// URLs are the broker URLs of AMQPURL: one, or the nodes of a cluster.
func (c *Config) URLs() []string {
	parts := strings.Split(c.AMQPURL, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts
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
