package main

import (
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/mail"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/heraldhq/herald/sdk"
)

// Config field names.
const (
	FieldProviders       = "providers"
	FieldEndpoint        = "endpoint"
	FieldProjectID       = "project_id"
	FieldAccessToken     = "access_token"
	FieldCredentialsFile = "credentials_file"
	FieldTimeout         = "timeout"
	FieldConcurrency     = "concurrency"
	FieldValidateOnly    = "validate_only"
	FieldCAFile          = "ca_file"

	FieldVAPIDSubject    = "vapid_subject"
	FieldVAPIDPublicKey  = "vapid_public_key"
	FieldVAPIDPrivateKey = "vapid_private_key"
	FieldWebPushTTL      = "webpush_ttl"
	FieldWebPushUrgency  = "webpush_urgency"
	FieldWebPushPrivate  = "webpush_private_endpoints"

	FieldAPNsEndpoint   = "apns_endpoint"
	FieldAPNsKey        = "apns_key"
	FieldAPNsKeyID      = "apns_key_id"
	FieldAPNsTeamID     = "apns_team_id"
	FieldAPNsTopic      = "apns_topic"
	FieldAPNsPushType   = "apns_push_type"
	FieldAPNsPriority   = "apns_priority"
	FieldAPNsExpiration = "apns_expiration"
)

// Providers the plugin speaks; each sends to the devices of its kind.
const (
	ProviderFCM     = sdk.DeviceFCM
	ProviderWebPush = sdk.DeviceWebPush
	ProviderAPNs    = sdk.DeviceAPNs
)

// Defaults.
const (
	DefaultEndpoint     = "https://fcm.googleapis.com"
	DefaultAPNsEndpoint = "https://api.push.apple.com"
	DefaultTimeout      = 10 * time.Second
	DefaultConcurrency  = 8
	// DefaultWebPushTTL keeps a web push message a day for an offline
	// browser.
	DefaultWebPushTTL     = 24 * time.Hour
	DefaultWebPushUrgency = "normal"
	DefaultAPNsPushType   = "alert"
	DefaultAPNsPriority   = 10
	// MaxWebPushTTL is the longest TTL push services keep a message (FCM's
	// web push caps it at 4 weeks).
	MaxWebPushTTL = 28 * 24 * time.Hour
)

// configSpecs declares the plugin's config fields, derived from Config's
// tags.
var configSpecs = sdk.MustConfigFields(Config{})

// Config is the push plugin's provider config.
type Config struct {
	// Providers lists the push services this provider sends through.
	Providers []string `config:"providers" default:"fcm" help:"Push services to send through, any of fcm, webpush, apns: each sends to the recipient's devices of its kind (fcm also to tokens of no kind). Each needs its own fields below."`

	// Endpoint is the FCM API base URL.
	Endpoint string `config:"endpoint" default:"https://fcm.googleapis.com" help:"fcm: base URL of the FCM HTTP v1 API; messages go to <endpoint>/v1/projects/<project_id>/messages:send."`
	// ProjectID is the Firebase project.
	ProjectID string `config:"project_id" help:"fcm (required): Firebase project id."`
	// AccessToken is a static bearer token (not refreshed).
	AccessToken string `config:"access_token,secret" help:"fcm: static OAuth 2.0 bearer token; it is not refreshed. Set this or credentials_file."`
	// CredentialsFile is a service-account JSON key file.
	CredentialsFile string `config:"credentials_file" help:"fcm: service-account JSON key file; the plugin signs a JWT with it and exchanges it at the file's token_uri for access tokens, refreshed before they expire. Set this or access_token."`
	// ValidateOnly sends messages as a dry run.
	ValidateOnly bool `config:"validate_only" default:"false" help:"fcm: ask FCM to validate messages without delivering them (dry run)."`

	// VAPIDSubject is the contact in every VAPID JWT.
	VAPIDSubject string `config:"vapid_subject" help:"webpush (required): contact for the push services, a mailto: or https: URI (RFC 8292 sub)."`
	// VAPIDPublicKey is the application server key browsers subscribed with.
	VAPIDPublicKey string `config:"vapid_public_key" help:"webpush (required): VAPID public key, base64url of the uncompressed P-256 point (the applicationServerKey the web app subscribes with); herald webpush keys makes a pair."`
	// VAPIDPrivateKey signs the VAPID JWTs.
	VAPIDPrivateKey string `config:"vapid_private_key,secret" help:"webpush (required): VAPID private key, base64url of the 32-byte P-256 scalar."`
	// WebPushTTL is how long a push service keeps an undelivered message.
	WebPushTTL time.Duration `config:"webpush_ttl" default:"24h" help:"webpush: how long the push service keeps a message for an offline browser (TTL header, 0s to 672h); a template's data key webpush_ttl overrides it."`
	// WebPushPrivateEndpoints lets subscriptions point at private addresses.
	WebPushPrivateEndpoints bool `config:"webpush_private_endpoints" default:"false" help:"webpush: allow subscription endpoints on non-public addresses (loopback, private, link-local and every other special-purpose range) (tests, herald devpeers, an in-house push service); off, such a subscription is refused (endpoint_refused), so that users cannot make Herald post into its own network."`
	// WebPushUrgency is the default Urgency header.
	WebPushUrgency string `config:"webpush_urgency" default:"normal" enum:"very-low,low,normal,high" help:"webpush: Urgency header (RFC 8030); a template's data key webpush_urgency overrides it."`

	// APNsEndpoint is the APNs provider API base URL.
	APNsEndpoint string `config:"apns_endpoint" default:"https://api.push.apple.com" help:"apns: provider API base URL (https://api.sandbox.push.apple.com for development builds); notifications go to <apns_endpoint>/3/device/<token> over HTTP/2."`
	// APNsKey is the .p8 signing key (PEM).
	APNsKey string `config:"apns_key,secret" help:"apns (required): the .p8 token signing key from the Apple developer account, as PEM text; give it as file:/path/AuthKey_XXXXXXXXXX.p8."`
	// APNsKeyID is the key's 10-character id.
	APNsKeyID string `config:"apns_key_id" help:"apns (required): the key's 10-character Key ID (JWT kid)."`
	// APNsTeamID is the 10-character developer team id.
	APNsTeamID string `config:"apns_team_id" help:"apns (required): the 10-character Team ID (JWT iss)."`
	// APNsTopic is the app's bundle id.
	APNsTopic string `config:"apns_topic" help:"apns (required): the app's bundle id (apns-topic); a template's data key apns_topic overrides it."`
	// APNsPushType is the default apns-push-type.
	APNsPushType string `config:"apns_push_type" default:"alert" enum:"alert,background,voip,complication,fileprovider,mdm,liveactivity,location,pushtotalk" help:"apns: apns-push-type header; a template's data key apns_push_type overrides it."`
	// APNsPriority is the default apns-priority.
	APNsPriority int `config:"apns_priority" default:"10" help:"apns: apns-priority, 10 (immediately), 5 (power considerations) or 1 (prioritise power); background pushes need 5 or 1; a template's data key apns_priority overrides it."`
	// APNsExpiration is how long APNs keeps an undelivered notification.
	APNsExpiration time.Duration `config:"apns_expiration" default:"0s" help:"apns: how long APNs stores a notification for an offline device (apns-expiration = now + this); 0s sends no header; a template's data key apns_expiration overrides it."`

	// Timeout bounds one HTTP request.
	Timeout time.Duration `config:"timeout" default:"10s" help:"Timeout of one HTTP request."`
	// Concurrency bounds the requests one Send runs at once.
	Concurrency int `config:"concurrency" default:"8" help:"How many requests one Send runs at once."`
	// CAFile replaces the system CAs for the push services.
	CAFile string `config:"ca_file" help:"PEM file of CAs to trust for the push services instead of the system pool (private gateways, herald devpeers)."`

	// creds is CredentialsFile, parsed by Validate.
	creds *serviceAccount
	// apnsKey is APNsKey, parsed by Validate.
	apnsKey *ecdsa.PrivateKey
	// caPEM is CAFile's content, read by Validate.
	caPEM []byte
}

// has reports whether provider is one of c.Providers.
func (c *Config) has(provider string) bool { return slices.Contains(c.Providers, provider) }

var appleID = regexp.MustCompile(`^[A-Z0-9]{10}$`)

// Validate checks the config's meaning; errors are *sdk.ConfigError.
func (c *Config) Validate() error {
	if len(c.Providers) == 0 {
		return &sdk.ConfigError{Field: FieldProviders, Msg: "list at least one of fcm, webpush, apns"}
	}
	for i, p := range c.Providers {
		if p != ProviderFCM && p != ProviderWebPush && p != ProviderAPNs {
			return &sdk.ConfigError{Field: FieldProviders, Msg: fmt.Sprintf("%q is not one of fcm, webpush, apns", p)}
		}
		if slices.Contains(c.Providers[:i], p) {
			return &sdk.ConfigError{Field: FieldProviders, Msg: fmt.Sprintf("%q listed twice", p)}
		}
	}
	// A field of a provider not listed is a mistake: say so rather than
	// ignore it.
	unused := []struct {
		provider, field string
		set             bool
	}{
		{ProviderFCM, FieldProjectID, c.ProjectID != ""},
		{ProviderFCM, FieldAccessToken, c.AccessToken != ""},
		{ProviderFCM, FieldCredentialsFile, c.CredentialsFile != ""},
		{ProviderWebPush, FieldVAPIDSubject, c.VAPIDSubject != ""},
		{ProviderWebPush, FieldVAPIDPublicKey, c.VAPIDPublicKey != ""},
		{ProviderWebPush, FieldVAPIDPrivateKey, c.VAPIDPrivateKey != ""},
		{ProviderAPNs, FieldAPNsKey, c.APNsKey != ""},
		{ProviderAPNs, FieldAPNsKeyID, c.APNsKeyID != ""},
		{ProviderAPNs, FieldAPNsTeamID, c.APNsTeamID != ""},
		{ProviderAPNs, FieldAPNsTopic, c.APNsTopic != ""},
	}
	for _, u := range unused {
		if u.set && !c.has(u.provider) {
			return &sdk.ConfigError{Field: u.field, Msg: fmt.Sprintf("set, but %s does not list %s", FieldProviders, u.provider)}
		}
	}
	if c.has(ProviderFCM) {
		if err := c.validateFCM(); err != nil {
			return err
		}
	}
	if c.has(ProviderWebPush) {
		if err := c.validateWebPush(); err != nil {
			return err
		}
	}
	if c.has(ProviderAPNs) {
		if err := c.validateAPNs(); err != nil {
			return err
		}
	}
	if c.Timeout <= 0 {
		return &sdk.ConfigError{Field: FieldTimeout, Msg: "must be positive"}
	}
	if c.Concurrency < 1 || c.Concurrency > 100 {
		return &sdk.ConfigError{Field: FieldConcurrency, Msg: fmt.Sprintf("must be between 1 and 100, got %d", c.Concurrency)}
	}
	if c.CAFile != "" {
		b, err := os.ReadFile(c.CAFile)
		if err != nil {
			return &sdk.ConfigError{Field: FieldCAFile, Msg: err.Error()}
		}
		if !x509.NewCertPool().AppendCertsFromPEM(b) {
			return &sdk.ConfigError{Field: FieldCAFile, Msg: "no PEM certificate in the file"}
		}
		c.caPEM = b
	}
	return nil
}

func (c *Config) validateFCM() error {
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &sdk.ConfigError{Field: FieldEndpoint, Msg: fmt.Sprintf("must be an http(s) URL, got %q", c.Endpoint)}
	}
	if c.ProjectID == "" {
		return &sdk.ConfigError{Field: FieldProjectID, Msg: "must not be empty (required with provider fcm)"}
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
	return nil
}

func (c *Config) validateWebPush() error {
	switch {
	case c.VAPIDSubject == "":
		return &sdk.ConfigError{Field: FieldVAPIDSubject, Msg: "must not be empty (required with provider webpush): a mailto: or https: URI"}
	case strings.HasPrefix(c.VAPIDSubject, "mailto:"):
		if a, err := mail.ParseAddress(strings.TrimPrefix(c.VAPIDSubject, "mailto:")); err != nil || a.Name != "" {
			return &sdk.ConfigError{Field: FieldVAPIDSubject, Msg: fmt.Sprintf("%q: want mailto: and a bare address, such as mailto:ops@example.com", c.VAPIDSubject)}
		}
	case strings.HasPrefix(c.VAPIDSubject, "https:"):
		if u, err := url.Parse(c.VAPIDSubject); err != nil || u.Host == "" {
			return &sdk.ConfigError{Field: FieldVAPIDSubject, Msg: fmt.Sprintf("%q: not an https URL", c.VAPIDSubject)}
		}
	default:
		return &sdk.ConfigError{Field: FieldVAPIDSubject, Msg: fmt.Sprintf("%q: want a mailto: or https: URI, such as mailto:ops@example.com", c.VAPIDSubject)}
	}
	if c.VAPIDPublicKey == "" {
		return &sdk.ConfigError{Field: FieldVAPIDPublicKey, Msg: "must not be empty (required with provider webpush); herald webpush keys makes a pair"}
	}
	pub, err := decodeB64URL(c.VAPIDPublicKey)
	if err != nil || len(pub) != 65 || pub[0] != 4 {
		return &sdk.ConfigError{Field: FieldVAPIDPublicKey, Msg: "want base64url of an uncompressed P-256 public key (65 bytes starting 0x04)"}
	}
	if _, err := ecdh.P256().NewPublicKey(pub); err != nil {
		return &sdk.ConfigError{Field: FieldVAPIDPublicKey, Msg: "not a point on the P-256 curve"}
	}
	if c.VAPIDPrivateKey == "" {
		return &sdk.ConfigError{Field: FieldVAPIDPrivateKey, Msg: "must not be empty (required with provider webpush)"}
	}
	raw, err := decodeB64URL(c.VAPIDPrivateKey)
	if err != nil || len(raw) != 32 {
		return &sdk.ConfigError{Field: FieldVAPIDPrivateKey, Msg: "want base64url of a 32-byte P-256 private key"}
	}
	priv, err := ecdh.P256().NewPrivateKey(raw)
	if err != nil {
		return &sdk.ConfigError{Field: FieldVAPIDPrivateKey, Msg: "not a valid P-256 private key"}
	}
	if string(priv.PublicKey().Bytes()) != string(pub) {
		return &sdk.ConfigError{Field: FieldVAPIDPublicKey, Msg: "is not the public key of vapid_private_key"}
	}
	if c.WebPushTTL < 0 || c.WebPushTTL > MaxWebPushTTL {
		return &sdk.ConfigError{Field: FieldWebPushTTL, Msg: fmt.Sprintf("must be between 0s and %s, got %s", MaxWebPushTTL, c.WebPushTTL)}
	}
	return nil
}

func (c *Config) validateAPNs() error {
	u, err := url.Parse(c.APNsEndpoint)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return &sdk.ConfigError{Field: FieldAPNsEndpoint, Msg: fmt.Sprintf("must be an https URL (APNs speaks HTTP/2 over TLS only), got %q", c.APNsEndpoint)}
	}
	if c.APNsKey == "" {
		return &sdk.ConfigError{Field: FieldAPNsKey, Msg: "must not be empty (required with provider apns): the .p8 key, e.g. file:/etc/herald/AuthKey_ABC123DEFG.p8"}
	}
	key, err := parseP8(c.APNsKey)
	if err != nil {
		return &sdk.ConfigError{Field: FieldAPNsKey, Msg: err.Error()}
	}
	c.apnsKey = key
	if !appleID.MatchString(c.APNsKeyID) {
		return &sdk.ConfigError{Field: FieldAPNsKeyID, Msg: fmt.Sprintf("want the 10-character Key ID (A-Z, 0-9), got %q", c.APNsKeyID)}
	}
	if !appleID.MatchString(c.APNsTeamID) {
		return &sdk.ConfigError{Field: FieldAPNsTeamID, Msg: fmt.Sprintf("want the 10-character Team ID (A-Z, 0-9), got %q", c.APNsTeamID)}
	}
	if c.APNsTopic == "" || strings.ContainsAny(c.APNsTopic, " \t\r\n/") {
		return &sdk.ConfigError{Field: FieldAPNsTopic, Msg: fmt.Sprintf("want the app's bundle id, such as com.example.app, got %q", c.APNsTopic)}
	}
	if c.APNsPriority != 10 && c.APNsPriority != 5 && c.APNsPriority != 1 {
		return &sdk.ConfigError{Field: FieldAPNsPriority, Msg: fmt.Sprintf("must be 10, 5 or 1, got %d", c.APNsPriority)}
	}
	if c.APNsExpiration < 0 {
		return &sdk.ConfigError{Field: FieldAPNsExpiration, Msg: "must not be negative"}
	}
	return nil
}

// parseP8 reads an APNs token signing key: PEM "PRIVATE KEY" (PKCS #8)
// holding an EC P-256 key, as Apple's .p8 files are.
func parseP8(s string) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return nil, fmt.Errorf("not PEM: want the .p8 file's text (-----BEGIN PRIVATE KEY-----)")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("not a PKCS #8 private key: %v", err)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, want an EC P-256 key (.p8 from Apple)", k)
	}
	if ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("an EC key on %s, want P-256", ec.Curve.Params().Name)
	}
	return ec, nil
}

// decodeB64URL decodes base64url with or without padding.
func decodeB64URL(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
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
