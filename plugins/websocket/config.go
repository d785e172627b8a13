package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/plugins/internal/pluginconf"
	"github.com/heraldhq/herald/sdk"
)

// Config field names.
const (
	FieldListen             = "listen"
	FieldPath               = "path"
	FieldJWTSecret          = "jwt_secret"
	FieldJWTIssuer          = "jwt_issuer"
	FieldJWTAudience        = "jwt_audience"
	FieldAllowedOrigins     = "allowed_origins"
	FieldPingInterval       = "ping_interval"
	FieldWriteTimeout       = "write_timeout"
	FieldSendBuffer         = "send_buffer"
	FieldMaxSessionsPerUser = "max_sessions_per_user"
)

// Defaults.
const (
	DefaultListen             = "127.0.0.1:8090"
	DefaultPath               = "/v1/ws"
	DefaultPingInterval       = 30 * time.Second
	DefaultWriteTimeout       = 10 * time.Second
	DefaultSendBuffer         = 64
	DefaultMaxSessionsPerUser = 16
)

// MinSecretLen is the shortest jwt_secret accepted: HS256 wants a key at
// least as long as its 256-bit output.
const MinSecretLen = 32

// configSpecs declares the plugin's config fields.
var configSpecs = []sdk.FieldSpec{
	{Name: FieldListen, Type: sdk.FieldString, Default: DefaultListen, Description: "Address the WebSocket server listens on (host:port)."},
	{Name: FieldPath, Type: sdk.FieldString, Default: DefaultPath, Description: "HTTP path browsers connect to."},
	{Name: FieldJWTSecret, Type: sdk.FieldString, Required: true, Secret: true, Description: "HS256 key (at least 32 bytes) that signs end-user JWTs (claims: tenant, sub = user id, user_type, exp)."},
	{Name: FieldJWTIssuer, Type: sdk.FieldString, Description: "When set, tokens must carry this iss claim."},
	{Name: FieldJWTAudience, Type: sdk.FieldString, Description: "When set, tokens must carry this aud claim."},
	{Name: FieldAllowedOrigins, Type: sdk.FieldList, Description: "Origin host patterns (e.g. app.example.com, *.example.com) allowed besides the server's own host."},
	{Name: FieldPingInterval, Type: sdk.FieldDuration, Default: DefaultPingInterval.String(), Description: "How often each session is pinged; a session that does not answer within the interval is closed."},
	{Name: FieldWriteTimeout, Type: sdk.FieldDuration, Default: DefaultWriteTimeout.String(), Description: "How long one frame may take to write before the session is dropped."},
	{Name: FieldSendBuffer, Type: sdk.FieldInt, Default: strconv.Itoa(DefaultSendBuffer), Description: "Frames queued per session; a session whose queue is full is dropped as a slow consumer."},
	{Name: FieldMaxSessionsPerUser, Type: sdk.FieldInt, Default: strconv.Itoa(DefaultMaxSessionsPerUser), Description: "Open sessions one user may hold; further connections are refused with 429."},
}

// Config is the websocket plugin's provider config.
type Config struct {
	// Listen is the server's host:port.
	Listen string `mapstructure:"listen"`
	// Path is the URL path of the WebSocket endpoint.
	Path string `mapstructure:"path"`
	// JWTSecret is the HS256 key for end-user tokens.
	JWTSecret string `mapstructure:"jwt_secret"`
	// JWTIssuer, when set, is the required iss claim.
	JWTIssuer string `mapstructure:"jwt_issuer"`
	// JWTAudience, when set, is the required aud claim.
	JWTAudience string `mapstructure:"jwt_audience"`
	// AllowedOrigins are extra origin host patterns browsers may connect from.
	AllowedOrigins []string `mapstructure:"allowed_origins"`
	// PingInterval is the keepalive period.
	PingInterval time.Duration `mapstructure:"ping_interval"`
	// WriteTimeout bounds writing one frame.
	WriteTimeout time.Duration `mapstructure:"write_timeout"`
	// SendBuffer is the per-session frame queue length.
	SendBuffer int `mapstructure:"send_buffer"`
	// MaxSessionsPerUser caps one user's open sessions.
	MaxSessionsPerUser int `mapstructure:"max_sessions_per_user"`
}

// setDefaults fills the fields an operator may leave out.
func (c *Config) setDefaults() {
	c.Listen = DefaultListen
	c.Path = DefaultPath
	c.PingInterval = DefaultPingInterval
	c.WriteTimeout = DefaultWriteTimeout
	c.SendBuffer = DefaultSendBuffer
	c.MaxSessionsPerUser = DefaultMaxSessionsPerUser
}

// Validate checks the config's meaning; errors are *sdk.ConfigError.
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return &sdk.ConfigError{Field: FieldListen, Msg: fmt.Sprintf("must be host:port: %v", err)}
	}
	if !strings.HasPrefix(c.Path, "/") {
		return &sdk.ConfigError{Field: FieldPath, Msg: fmt.Sprintf("must start with /, got %q", c.Path)}
	}
	if len(c.JWTSecret) < MinSecretLen {
		return &sdk.ConfigError{Field: FieldJWTSecret, Msg: fmt.Sprintf("must be at least %d bytes", MinSecretLen)}
	}
	if c.PingInterval < time.Second {
		return &sdk.ConfigError{Field: FieldPingInterval, Msg: "must be at least 1s"}
	}
	if c.WriteTimeout <= 0 {
		return &sdk.ConfigError{Field: FieldWriteTimeout, Msg: "must be positive"}
	}
	if c.SendBuffer < 1 || c.SendBuffer > 4096 {
		return &sdk.ConfigError{Field: FieldSendBuffer, Msg: fmt.Sprintf("must be between 1 and 4096, got %d", c.SendBuffer)}
	}
	if c.MaxSessionsPerUser < 1 {
		return &sdk.ConfigError{Field: FieldMaxSessionsPerUser, Msg: "must be at least 1"}
	}
	return nil
}

// configFromParsed decodes the operator's config map strictly, applies
// defaults and validates the result.
func configFromParsed(raw map[string]any) (Config, error) {
	var c Config
	c.setDefaults()
	return pluginconf.Load(raw, configSpecs, c)
}
