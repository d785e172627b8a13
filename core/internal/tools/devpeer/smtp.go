package devpeer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/mail"
	"strings"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// MaxMessageBytes is the largest message the SMTP peer accepts (advertised
// with the SIZE extension).
const MaxMessageBytes = 10 << 20

// MaxRecipients is the most RCPT TO commands one SMTP transaction may use.
const MaxRecipients = 100

func newSMTPServer(log *lineLog) *smtp.Server {
	s := smtp.NewServer(&smtpBackend{log: log})
	s.Domain = "localhost"
	s.ReadTimeout = time.Minute
	s.WriteTimeout = time.Minute
	s.MaxMessageBytes = MaxMessageBytes
	s.MaxRecipients = MaxRecipients
	// No TLS on loopback: the quick start's email provider says tls = "none",
	// so AUTH has to be offered in the clear for configs that set a user.
	s.AllowInsecureAuth = true
	return s
}

type smtpBackend struct {
	log *lineLog
	// seen holds recent Message-IDs, so a message sent again (a retried
	// delivery keeps its Message-ID) is marked in the log.
	seen recent[struct{}]
}

// NewSession implements smtp.Backend.
func (b *smtpBackend) NewSession(c *smtp.Conn) (smtp.Session, error) {
	return &smtpSession{log: b.log, seen: &b.seen}, nil
}

// smtpSession accepts every sender and recipient and logs each message.
type smtpSession struct {
	log  *lineLog
	seen *recent[struct{}]
	user string
	from string
	to   []string
}

var _ smtp.AuthSession = (*smtpSession)(nil)

// AuthMechanisms implements smtp.AuthSession; any user name and password is
// accepted.
func (s *smtpSession) AuthMechanisms() []string { return []string{sasl.Plain} }

// Auth implements smtp.AuthSession.
func (s *smtpSession) Auth(mech string) (sasl.Server, error) {
	if mech != sasl.Plain {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(identity, username, password string) error {
		if username == "" {
			return &smtp.SMTPError{Code: 535, EnhancedCode: smtp.EnhancedCode{5, 7, 8}, Message: "Authentication credentials invalid"}
		}
		s.user = username
		return nil
	}), nil
}

// Mail implements smtp.Session.
func (s *smtpSession) Mail(from string, _ *smtp.MailOptions) error {
	s.from, s.to = from, nil
	return nil
}

// Rcpt implements smtp.Session.
func (s *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	if _, err := mail.ParseAddress(to); err != nil {
		return &smtp.SMTPError{Code: 553, EnhancedCode: smtp.EnhancedCode{5, 1, 3}, Message: "Bad recipient address syntax"}
	}
	s.to = append(s.to, to)
	return nil
}

// Data implements smtp.Session: it reads the message, logs its envelope,
// Subject and Message-ID, and accepts it.
func (s *smtpSession) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	subject, msgID := "", ""
	var parseErr error
	if m, err := mail.ReadMessage(bytes.NewReader(raw)); err != nil {
		parseErr = err
	} else {
		subject = decodeHeader(m.Header.Get("Subject"))
		msgID = strings.TrimSpace(m.Header.Get("Message-ID"))
	}
	repeat := false
	if msgID == "" {
		msgID = "(none)"
	} else {
		_, repeat = s.seen.getOrPut(msgID, struct{}{})
	}
	line := fmt.Sprintf("accepted from=<%s> to=<%s> subject=%q message-id=%s size=%d",
		s.from, strings.Join(s.to, ">,<"), clip(subject, 120), msgID, len(raw))
	if repeat {
		line += " repeat=true"
	}
	if s.user != "" {
		line += " auth=" + s.user
	}
	if parseErr != nil {
		line += fmt.Sprintf(" header-error=%q", parseErr.Error())
	}
	s.log.printf("smtp", "%s", line)
	return nil
}

// Reset implements smtp.Session.
func (s *smtpSession) Reset() { s.from, s.to = "", nil }

// Logout implements smtp.Session.
func (s *smtpSession) Logout() error { return nil }

// decodeHeader decodes RFC 2047 encoded words, keeping the raw text when it
// cannot.
func decodeHeader(v string) string {
	dec := mime.WordDecoder{CharsetReader: func(charset string, input io.Reader) (io.Reader, error) {
		return nil, errors.New("unsupported charset " + charset)
	}}
	if out, err := dec.DecodeHeader(v); err == nil {
		return out
	}
	return v
}
