package main

import (
	"crypto/x509"
	"fmt"
	"net/mail"
	"os"
	"time"

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

// configSpecs declares the plugin's config fields, derived from Config's
// tags.
var configSpecs = sdk.MustConfigFields(Config{})

// Config is the email plugin's provider config.
type Config struct {
	// Host is the SMTP server's host name or address.
	Host string `config:"host,required" help:"SMTP server host name or address."`
	// Port is the SMTP server's port.
	Port int `config:"port" default:"587" help:"SMTP server port (587 submission, 465 implicit TLS, 25 relay)."`
	// Username enables SMTP AUTH when set.
	Username string `config:"username" help:"SMTP AUTH user name; empty disables authentication."`
	// Password is the SMTP AUTH password.
	Password string `config:"password,secret" help:"SMTP AUTH password."`
	// From is the sender address (RFC 5322 mailbox).
	From string `config:"from,required" help:"Sender address, e.g. \"Herald <noreply@example.com>\"."`
	// TLS is one of TLSNone, TLSStartTLS, TLSImplicit.
	TLS string `config:"tls" default:"starttls" enum:"none,starttls,tls" help:"Transport security: none, starttls (mandatory STARTTLS) or tls (implicit TLS)."`
	// CAFile, when set, replaces the system CA pool.
	CAFile string `config:"ca_file" help:"PEM file of CA certificates to trust instead of the system pool."`
	// Timeout bounds the dial and every SMTP command.
	Timeout time.Duration `config:"timeout" default:"10s" help:"Timeout for the connection and for each SMTP command."`
	// HELO is the name sent in EHLO.
	HELO string `config:"helo" help:"Name sent in EHLO; defaults to the machine's host name."`

	// fromAddr is From, parsed by Validate.
	fromAddr *mail.Address
	// rootCAs is CAFile, loaded by Validate.
	rootCAs *x509.CertPool
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

// configFromParsed decodes the operator's config map strictly (defaults
// from the tags) and validates the result (Config.Validate).
func configFromParsed(raw map[string]any) (Config, error) {
	var c Config
	if err := sdk.DecodeConfig(raw, &c); err != nil {
		return Config{}, err
	}
	return c, nil
}
