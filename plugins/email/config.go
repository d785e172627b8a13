package main

import (
	"crypto/x509"
	"fmt"
	"net/mail"
	"os"
	"strconv"
	"time"

	"github.com/heraldhq/herald/plugins/internal/pluginconf"
	"github.com/heraldhq/herald/sdk"
)

// Config field names.
const (
	FieldHost     = "host"
	FieldPort     = "port"
	FieldUsername = "username"
	FieldPassword = "password"
	FieldFrom     = "from"
	FieldTLS      = "tls"
	FieldCAFile   = "ca_file"
	FieldTimeout  = "timeout"
	FieldHELO     = "helo"
)

// TLS modes.
const (
	TLSNone     = "none"
	TLSStartTLS = "starttls"
	TLSImplicit = "tls"
)

// Defaults.
const (
	DefaultPort    = 587
	DefaultTLS     = TLSStartTLS
	DefaultTimeout = 10 * time.Second
)

// configSpecs declares the plugin's config fields.
var configSpecs = []sdk.FieldSpec{
	{Name: FieldHost, Type: sdk.FieldString, Required: true, Description: "SMTP server host name or address."},
	{Name: FieldPort, Type: sdk.FieldInt, Default: strconv.Itoa(DefaultPort), Description: "SMTP server port (587 submission, 465 implicit TLS, 25 relay)."},
	{Name: FieldUsername, Type: sdk.FieldString, Description: "SMTP AUTH user name; empty disables authentication."},
	{Name: FieldPassword, Type: sdk.FieldString, Secret: true, Description: "SMTP AUTH password."},
	{Name: FieldFrom, Type: sdk.FieldString, Required: true, Description: `Sender address, e.g. "Herald <noreply@example.com>".`},
	{Name: FieldTLS, Type: sdk.FieldString, Default: DefaultTLS, Enum: []string{TLSNone, TLSStartTLS, TLSImplicit}, Description: "Transport security: none, starttls (mandatory STARTTLS) or tls (implicit TLS)."},
	{Name: FieldCAFile, Type: sdk.FieldString, Description: "PEM file of CA certificates to trust instead of the system pool."},
	{Name: FieldTimeout, Type: sdk.FieldDuration, Default: DefaultTimeout.String(), Description: "Timeout for the connection and for each SMTP command."},
	{Name: FieldHELO, Type: sdk.FieldString, Description: "Name sent in EHLO; defaults to the machine's host name."},
}

// Config is the email plugin's provider config.
type Config struct {
	// Host is the SMTP server's host name or address.
	Host string `mapstructure:"host"`
	// Port is the SMTP server's port.
	Port int `mapstructure:"port"`
	// Username enables SMTP AUTH when set.
	Username string `mapstructure:"username"`
	// Password is the SMTP AUTH password.
	Password string `mapstructure:"password"`
	// From is the sender address (RFC 5322 mailbox).
	From string `mapstructure:"from"`
	// TLS is one of TLSNone, TLSStartTLS, TLSImplicit.
	TLS string `mapstructure:"tls"`
	// CAFile, when set, replaces the system CA pool.
	CAFile string `mapstructure:"ca_file"`
	// Timeout bounds the dial and every SMTP command.
	Timeout time.Duration `mapstructure:"timeout"`
	// HELO is the name sent in EHLO.
	HELO string `mapstructure:"helo"`

	// fromAddr is From, parsed by Validate.
	fromAddr *mail.Address
	// rootCAs is CAFile, loaded by Validate.
	rootCAs *x509.CertPool
}

// setDefaults fills the fields an operator may leave out.
func (c *Config) setDefaults() {
	c.Port = DefaultPort
	c.TLS = DefaultTLS
	c.Timeout = DefaultTimeout
}

// Validate checks the config's meaning; errors are *sdk.ConfigError.
func (c *Config) Validate() error {
	if c.Host == "" {
		return &sdk.ConfigError{Field: FieldHost, Msg: "must not be empty"}
	}
	if c.Port < 1 || c.Port > 65535 {
		return &sdk.ConfigError{Field: FieldPort, Msg: fmt.Sprintf("must be between 1 and 65535, got %d", c.Port)}
	}
	addr, err := mail.ParseAddress(c.From)
	if err != nil {
		return &sdk.ConfigError{Field: FieldFrom, Msg: fmt.Sprintf("not an email address: %v", err)}
	}
	c.fromAddr = addr
	switch c.TLS {
	case TLSNone, TLSStartTLS, TLSImplicit:
	default:
		return &sdk.ConfigError{Field: FieldTLS, Msg: fmt.Sprintf("must be none, starttls or tls, got %q", c.TLS)}
	}
	if c.Password != "" && c.Username == "" {
		return &sdk.ConfigError{Field: FieldUsername, Msg: "is required when password is set"}
	}
	if c.Timeout <= 0 {
		return &sdk.ConfigError{Field: FieldTimeout, Msg: "must be positive"}
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return &sdk.ConfigError{Field: FieldCAFile, Msg: err.Error()}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return &sdk.ConfigError{Field: FieldCAFile, Msg: "no PEM certificates found"}
		}
		c.rootCAs = pool
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
