package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net/mail"
	"strconv"
	"strings"
	"sync"

	gomail "github.com/wneessen/go-mail"
	gosmtp "github.com/wneessen/go-mail/smtp"

	"github.com/heraldhq/herald/sdk"
)

// Version is the plugin's own version; make stamps it from git with -ldflags "-X main.Version=...".
var Version = "0.1.0"

// MaxBatch is the largest batch sent over one SMTP connection.
const MaxBatch = 50

// Headers Herald adds: the idempotency key, so that a receiving system (or
// a human reading headers) can spot a duplicate, and the delivery id, to
// trace a message back to Herald's records.
const (
	HeaderIdempotencyKey = "X-Herald-Idempotency-Key"
	HeaderDeliveryID     = "X-Herald-Delivery-Id"
)

// CodeNoAddress is the Permanent code for a recipient without an email
// address; CodeInvalidAddress for one whose address does not parse.
const (
	CodeNoAddress      = "no_address"
	CodeInvalidAddress = "invalid_address"
)

// ErrNotConfigured prompts the host to call Configure before Send or Health.
var ErrNotConfigured = errors.New("email: not configured")

// Email is the EMAIL channel over SMTP.
type Email struct {
	mu     sync.RWMutex
	cfg    Config
	client *gomail.Client
}

var _ sdk.Channel = (*Email)(nil)

// New returns an unconfigured email channel; Serve calls it once.
func New() sdk.Channel { return &Email{} }

// Describe returns the plugin's static description.
func (e *Email) Describe(ctx context.Context, _ sdk.DescribeRequest) (sdk.DescribeResponse, error) {
	return sdk.DescribeResponse{Description: sdk.Description{
		ChannelType:   "EMAIL",
		Provider:      "smtp",
		PluginVersion: Version,
		Class:         sdk.Persistent,
		MaxBatch:      MaxBatch,
		Config:        configSpecs,
	}}, nil
}

// Configure checks the config and prepares the SMTP client; nothing is
// dialled until Health or Send.
func (e *Email) Configure(ctx context.Context, req sdk.ConfigureRequest) (sdk.ConfigureResponse, error) {
	cfg, err := configFromParsed(req.Config)
	if err != nil {
		return sdk.ConfigureResponse{}, err
	}
	client, err := newClient(cfg)
	if err != nil {
		return sdk.ConfigureResponse{}, err
	}
	e.mu.Lock()
	e.cfg, e.client = cfg, client
	e.mu.Unlock()
	return sdk.ConfigureResponse{}, nil
}

// newClient builds a go-mail client from a validated config.
func newClient(cfg Config) (*gomail.Client, error) {
	opts := []gomail.Option{
		gomail.WithPort(cfg.Port),
		gomail.WithTimeout(cfg.Timeout),
		gomail.WithTLSConfig(&tls.Config{ServerName: cfg.Host, RootCAs: cfg.rootCAs, MinVersion: tls.VersionTLS12}),
	}
	switch cfg.TLS {
	case TLSNone:
		opts = append(opts, gomail.WithTLSPolicy(gomail.NoTLS))
	case TLSStartTLS:
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory))
	case TLSImplicit:
		opts = append(opts, gomail.WithSSL(), gomail.WithTLSPolicy(gomail.NoTLS))
	}
	if cfg.Username != "" {
		opts = append(opts,
			gomail.WithSMTPAuth(gomail.SMTPAuthAutoDiscover),
			gomail.WithUsername(cfg.Username),
			gomail.WithPassword(cfg.Password))
	}
	if cfg.HELO != "" {
		opts = append(opts, gomail.WithHELO(cfg.HELO))
	}
	client, err := gomail.NewClient(cfg.Host, opts...)
	if err != nil {
		return nil, &sdk.ConfigError{Field: FieldHost, Msg: err.Error()}
	}
	return client, nil
}

func (e *Email) configured() (Config, *gomail.Client, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.client == nil {
		return Config{}, nil, ErrNotConfigured
	}
	return e.cfg, e.client, nil
}

// Health dials the server, says EHLO (and STARTTLS and AUTH when
// configured) and quits.
func (e *Email) Health(ctx context.Context, _ sdk.HealthRequest) (sdk.HealthResponse, error) {
	cfg, client, err := e.configured()
	if err != nil {
		return sdk.HealthResponse{Healthy: false, Message: err.Error()}, nil
	}
	conn, err := client.DialToSMTPClientWithContext(ctx)
	if err != nil {
		return sdk.HealthResponse{Healthy: false, Message: fmt.Sprintf("email: dial smtp %s:%d: %v", cfg.Host, cfg.Port, err)}, nil
	}
	_ = client.CloseWithSMTPClient(conn)
	return sdk.HealthResponse{Healthy: true, Message: fmt.Sprintf("smtp %s:%d answered", cfg.Host, cfg.Port)}, nil
}

// Send delivers the batch over one SMTP connection. Each message gets its
// own MAIL/RCPT/DATA transaction, so one rejected recipient does not fail
// the others. A broken connection is re-dialled once per failure; when the
// dial fails, every delivery not yet sent is retried.
func (e *Email) Send(ctx context.Context, req sdk.SendRequest) (sdk.SendResponse, error) {
	batch := req.Deliveries
	cfg, client, err := e.configured()
	if err != nil {
		return sdk.SendResponse{}, err
	}
	results := make([]sdk.Result, len(batch))
	type pending struct {
		idx int
		msg *gomail.Msg
	}
	var todo []pending
	for i, d := range batch {
		msg, res, ok := buildMessage(cfg, d)
		if !ok {
			results[i] = res
			continue
		}
		todo = append(todo, pending{idx: i, msg: msg})
	}
	if len(todo) == 0 {
		return sdk.SendResponse{Results: results}, nil
	}

	var conn *gosmtp.Client
	stop := func() bool { return false }
	defer func() {
		stop()
		if conn != nil {
			_ = client.CloseWithSMTPClient(conn)
		}
	}()
	for n, p := range todo {
		d := batch[p.idx]
		if err := ctx.Err(); err != nil {
			results[p.idx] = sdk.Retry(d.DeliveryID, "email: "+err.Error(), 0)
			continue
		}
		if conn == nil {
			c, err := client.DialToSMTPClientWithContext(ctx)
			if err != nil {
				reason := fmt.Sprintf("email: dial smtp %s:%d: %v", cfg.Host, cfg.Port, err)
				for _, rest := range todo[n:] {
					results[rest.idx] = sdk.Retry(batch[rest.idx].DeliveryID, reason, 0)
				}
				return sdk.SendResponse{Results: results}, nil
			}
			conn = c
			// Cancelling ctx closes the connection, which unblocks a
			// command waiting on a slow server.
			stop = context.AfterFunc(ctx, func() { _ = c.Close() })
		}
		err := client.SendWithSMTPClient(conn, p.msg)
		res, broken := classify(d, p.msg, err)
		results[p.idx] = res
		if broken {
			stop()
			_ = conn.Close()
			conn, stop = nil, func() bool { return false }
		}
	}
	return sdk.SendResponse{Results: results}, nil
}

// buildMessage renders one delivery as a MIME message, or returns the
// Permanent result that explains why it cannot be sent.
func buildMessage(cfg Config, d sdk.Delivery) (*gomail.Msg, sdk.Result, bool) {
	to := strings.TrimSpace(d.Recipient.Email)
	if to == "" {
		return nil, sdk.Permanent(d.DeliveryID, "email: recipient has no email address", CodeNoAddress), false
	}
	if _, err := mail.ParseAddress(to); err != nil {
		return nil, sdk.Permanent(d.DeliveryID, fmt.Sprintf("email: recipient address %q: %v", to, err), CodeInvalidAddress), false
	}
	msg := gomail.NewMsg(gomail.WithNoDefaultUserAgent())
	msg.FromMailAddress(cfg.fromAddr)
	if err := msg.To(to); err != nil {
		return nil, sdk.Permanent(d.DeliveryID, fmt.Sprintf("email: recipient address %q: %v", to, err), CodeInvalidAddress), false
	}
	subject := d.Content.Subject
	if subject == "" {
		subject = d.Content.Title
	}
	msg.Subject(subject)
	msg.SetDate()
	msg.SetUserAgent("herald-plugin-email/" + Version)
	key := d.IdempotencyKey
	if key == "" {
		key = d.DeliveryID
	}
	msg.SetMessageIDWithValue(messageID(key, cfg.fromAddr.Address))
	msg.SetGenHeader(HeaderIdempotencyKey, key)
	msg.SetGenHeader(HeaderDeliveryID, d.DeliveryID)
	switch {
	case d.Content.Body != "" && d.Content.HTML != "":
		msg.SetBodyString(gomail.TypeTextPlain, d.Content.Body)
		msg.AddAlternativeString(gomail.TypeTextHTML, d.Content.HTML)
	case d.Content.HTML != "":
		msg.SetBodyString(gomail.TypeTextHTML, d.Content.HTML)
	default:
		msg.SetBodyString(gomail.TypeTextPlain, d.Content.Body)
	}
	return msg, sdk.Result{}, true
}

// messageID derives a stable Message-ID (without angle brackets) from the
// idempotency key, so a retried delivery carries the same Message-ID and
// receivers can drop the duplicate.
func messageID(key, from string) string {
	sum := sha256.Sum256([]byte(key))
	domain := "herald.invalid"
	if at := strings.LastIndexByte(from, '@'); at >= 0 && at < len(from)-1 {
		domain = from[at+1:]
	}
	return "herald." + hex.EncodeToString(sum[:16]) + "@" + domain
}

// classify turns go-mail's outcome into a Result. broken reports that the
// connection can no longer be trusted (transport error or 421).
func classify(d sdk.Delivery, msg *gomail.Msg, err error) (res sdk.Result, broken bool) {
	if err == nil {
		return sdk.Sent(d.DeliveryID, strings.Trim(msg.GetMessageID(), "<>")), false
	}
	reason := "email: " + err.Error()
	var se *gomail.SendError
	if !errors.As(err, &se) {
		return sdk.Retry(d.DeliveryID, reason, 0), true
	}
	switch se.Reason {
	case gomail.ErrGetSender, gomail.ErrGetRcpts:
		return sdk.Permanent(d.DeliveryID, reason, CodeInvalidAddress), false
	}
	code := se.ErrorCode()
	switch {
	case code >= 500 && code < 600:
		return sdk.Permanent(d.DeliveryID, reason, smtpCode(code, se.EnhancedStatusCode())), false
	case code == 421:
		return sdk.Retry(d.DeliveryID, reason, 0), true
	case code >= 400 && code < 500:
		return sdk.Retry(d.DeliveryID, reason, 0), false
	}
	// No SMTP reply code: the connection failed under us.
	return sdk.Retry(d.DeliveryID, reason, 0), true
}

// smtpCode is the Permanent code: the enhanced status code when the server
// sent one (e.g. "5.1.1"), the basic reply code otherwise (e.g. "550").
func smtpCode(code int, enhanced string) string {
	if enhanced != "" {
		return enhanced
	}
	return strconv.Itoa(code)
}
