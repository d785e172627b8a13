package main

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heraldhq/herald/sdk"
)

// Config field names.
const (
	FieldMode           = "mode"
	FieldToken          = "token"
	FieldAPIURL         = "api_url"
	FieldDefaultChannel = "default_channel"
	FieldWebhooks       = "webhooks"
	FieldDefaultWebhook = "default_webhook"
	FieldTimeout        = "timeout"
)

// Modes of the plugin.
const (
	// ModeBot posts with a bot token through chat.postMessage.
	ModeBot = "bot"
	// ModeWebhook posts to incoming webhooks, with no bot token.
	ModeWebhook = "webhook"
)

// Defaults.
const (
	DefaultAPIURL  = "https://slack.com/api/"
	DefaultTimeout = 10 * time.Second
)

// MaxWebhooks bounds the webhooks one provider config names.
const MaxWebhooks = 256

// MaxWebhookName bounds the length of a webhook's name.
const MaxWebhookName = 64

// AttrSlackUserID is the recipient attribute holding the user's Slack id
// (U…/W…); messages to it arrive as a direct message from the app.
const AttrSlackUserID = "slack_user_id"

// AttrSlackWebhook is the recipient attribute naming the webhook (a key of
// the webhooks config) that the recipient's deliveries go to in webhook
// mode.
const AttrSlackWebhook = "slack_webhook"

// configSpecs declares the plugin's config fields, derived from Config's
// tags.
var configSpecs = sdk.MustConfigFields(Config{})

// Config is the slack plugin's provider config.
type Config struct {
	// Mode is "bot" or "webhook"; empty means the mode the other fields
	// imply (token → bot, webhooks → webhook).
	Mode string `config:"mode" enum:"bot,webhook" help:"bot (chat.postMessage with token) or webhook (incoming webhooks, no token); empty picks the one whose fields are set."`
	// Token is the bot token (bot mode).
	Token string `config:"token,secret" help:"Bot mode: Slack bot token (xoxb-…) with the chat:write scope."`
	// APIURL is the Web API base URL, ending in a slash (bot mode).
	APIURL string `config:"api_url" default:"https://slack.com/api/" help:"Bot mode: Slack Web API base URL (tests point it to a slacktest server)."`
	// DefaultChannel receives deliveries for recipients without a Slack id
	// (bot mode).
	DefaultChannel string `config:"default_channel" help:"Bot mode: channel id or name for recipients without a slack_user_id attribute; empty means such deliveries fail with no_address."`
	// Webhooks maps a name to an incoming webhook URL (webhook mode).
	Webhooks map[string]string `config:"webhooks,secret" help:"Webhook mode: name → incoming webhook URL (https; http only to a loopback host). A delivery picks one by the template's data.webhook, else the recipient's slack_webhook attribute, else default_webhook."`
	// DefaultWebhook names the webhook for deliveries that pick none
	// (webhook mode); with a single webhook, that one.
	DefaultWebhook string `config:"default_webhook" help:"Webhook mode: name of the webhook for deliveries that pick none; defaults to the only webhook when there is one."`
	// Timeout bounds one Web API or webhook call.
	Timeout time.Duration `config:"timeout" default:"10s" help:"Timeout of one Web API or webhook call."`

	// hooks is Webhooks parsed, by name.
	hooks map[string]*url.URL
}

// Validate checks the config's meaning; errors are *sdk.ConfigError.
func (c *Config) Validate() error {
	if c.Timeout <= 0 {
		return &sdk.ConfigError{Field: FieldTimeout, Msg: "must be positive"}
	}
	hasToken := strings.TrimSpace(c.Token) != ""
	hasHooks := len(c.Webhooks) > 0
	if c.Mode == "" {
		switch {
		case hasToken && hasHooks:
			return &sdk.ConfigError{Field: FieldMode, Msg: `token and webhooks are both set: set mode = "bot" or mode = "webhook"`}
		case hasHooks:
			c.Mode = ModeWebhook
		default:
			c.Mode = ModeBot
		}
	}
	if c.Mode == ModeWebhook {
		return c.validateWebhook(hasToken)
	}
	return c.validateBot(hasHooks)
}

func (c *Config) validateBot(hasHooks bool) error {
	if strings.TrimSpace(c.Token) == "" {
		return &sdk.ConfigError{Field: FieldToken, Msg: `must not be empty: set token (bot mode) or webhooks (webhook mode)`}
	}
	if hasHooks {
		return &sdk.ConfigError{Field: FieldWebhooks, Msg: `only used in webhook mode (mode is "bot")`}
	}
	if c.DefaultWebhook != "" {
		return &sdk.ConfigError{Field: FieldDefaultWebhook, Msg: `only used in webhook mode (mode is "bot")`}
	}
	u, err := url.Parse(c.APIURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &sdk.ConfigError{Field: FieldAPIURL, Msg: fmt.Sprintf("must be an http(s) URL, got %q", c.APIURL)}
	}
	if !strings.HasSuffix(c.APIURL, "/") {
		c.APIURL += "/"
	}
	return nil
}

func (c *Config) validateWebhook(hasToken bool) error {
	if len(c.Webhooks) == 0 {
		return &sdk.ConfigError{Field: FieldWebhooks, Msg: "must name at least one incoming webhook URL in webhook mode"}
	}
	if len(c.Webhooks) > MaxWebhooks {
		return &sdk.ConfigError{Field: FieldWebhooks, Msg: fmt.Sprintf("names %d webhooks; at most %d", len(c.Webhooks), MaxWebhooks)}
	}
	if hasToken {
		return &sdk.ConfigError{Field: FieldToken, Msg: `only used in bot mode (mode is "webhook")`}
	}
	if c.DefaultChannel != "" {
		return &sdk.ConfigError{Field: FieldDefaultChannel, Msg: `only used in bot mode (mode is "webhook"; a webhook posts to the channel it was created for)`}
	}
	names := make([]string, 0, len(c.Webhooks))
	for name := range c.Webhooks {
		names = append(names, name)
	}
	slices.Sort(names)
	c.hooks = make(map[string]*url.URL, len(names))
	for _, name := range names {
		if err := checkWebhookName(name); err != nil {
			return &sdk.ConfigError{Field: FieldWebhooks, Msg: err.Error()}
		}
		u, err := parseWebhookURL(c.Webhooks[name])
		if err != nil {
			return &sdk.ConfigError{Field: FieldWebhooks, Msg: fmt.Sprintf("webhook %q: %v", name, err)}
		}
		c.hooks[name] = u
	}
	switch {
	case c.DefaultWebhook != "":
		if _, ok := c.hooks[c.DefaultWebhook]; !ok {
			return &sdk.ConfigError{Field: FieldDefaultWebhook, Msg: fmt.Sprintf("%q is not a name in webhooks (names: %s)", c.DefaultWebhook, strings.Join(names, ", "))}
		}
	case len(names) == 1:
		c.DefaultWebhook = names[0]
	}
	return nil
}

// checkWebhookName accepts the names an operator would write as HCL or
// YAML keys: 1 to 64 printable characters without spaces.
func checkWebhookName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a webhook has an empty name")
	case !utf8.ValidString(name):
		return fmt.Errorf("webhook name %q is not valid UTF-8", name)
	case utf8.RuneCountInString(name) > MaxWebhookName:
		return fmt.Errorf("webhook name %.20q… is longer than %d characters", name, MaxWebhookName)
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("webhook name %q holds a space or control character", name)
		}
	}
	return nil
}

// parseWebhookURL checks an incoming webhook URL: absolute, https (or http
// to a loopback host, for local stand-ins), with a host. Its errors never
// repeat the URL's path or query, which hold the webhook's secret.
func parseWebhookURL(raw string) (*url.URL, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, fmt.Errorf("URL is empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("not a URL (the value is secret and not shown)")
	}
	if u.Host == "" || u.Opaque != "" {
		return nil, fmt.Errorf("not an absolute URL with a host (the value is secret and not shown)")
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !loopbackHost(u.Hostname()) {
			return nil, fmt.Errorf("scheme is http to host %q: must be https (plain http is allowed only to a loopback host, for local stand-ins)", u.Hostname())
		}
	default:
		return nil, fmt.Errorf("scheme is %q: must be https", u.Scheme)
	}
	if u.User != nil {
		return nil, fmt.Errorf("URL holds user info; incoming webhooks take none")
	}
	return u, nil
}

// loopbackHost reports whether host is localhost or a loopback IP.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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
