package devpeer

import (
	"context"
	"errors"
	"net"
	"net/smtp"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	gomail "github.com/wneessen/go-mail"
)

func TestSMTPPeerAcceptsMessagesFromGoMail(t *testing.T) {
	p, sink := startPeers(t)
	host, portStr, _ := net.SplitHostPort(p.SMTPAddr())
	port, _ := strconv.Atoi(portStr)

	// The email plugin's client settings for tls = "none".
	client, err := gomail.NewClient(host, gomail.WithPort(port), gomail.WithTLSPolicy(gomail.NoTLS), gomail.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*gomail.Msg
	for _, m := range []struct{ to, subject, id string }{
		{"staff1@demo.test", "New reservation: Ada (4)", "herald.aaa@demo.test"},
		{"staff2@demo.test", "Nuova prenotazione: Niccolò (2)", "herald.bbb@demo.test"},
	} {
		msg := gomail.NewMsg()
		if err := msg.From("Herald <noreply@demo.test>"); err != nil {
			t.Fatal(err)
		}
		if err := msg.To(m.to); err != nil {
			t.Fatal(err)
		}
		msg.Subject(m.subject)
		msg.SetMessageIDWithValue(m.id)
		msg.SetBodyString(gomail.TypeTextPlain, "body of "+m.subject)
		msgs = append(msgs, msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.DialAndSendWithContext(ctx, msgs...); err != nil {
		t.Fatalf("send: %v", err)
	}

	sink.waitLine(t, "smtp", "accepted", "from=<noreply@demo.test>", "to=<staff1@demo.test>",
		`subject="New reservation: Ada (4)"`, "message-id=<herald.aaa@demo.test>")
	// The non-ASCII subject is MIME-encoded on the wire and decoded in the log.
	sink.waitLine(t, "smtp", "to=<staff2@demo.test>", `subject="Nuova prenotazione: Niccolò (2)"`, "message-id=<herald.bbb@demo.test>")
	if n := countLines(sink, "smtp", "accepted"); n != 2 {
		t.Errorf("%d accepted smtp lines, want 2:\n%s", n, strings.Join(sink.lines(), "\n"))
	}
	if n := countLines(sink, "repeat=true"); n != 0 {
		t.Errorf("%d repeat lines for two distinct messages", n)
	}

	// A retried delivery keeps its Message-ID: the log marks the repeat.
	if err := client.DialAndSendWithContext(ctx, msgs[0]); err != nil {
		t.Fatalf("resend: %v", err)
	}
	sink.waitLine(t, "smtp", "message-id=<herald.aaa@demo.test>", "repeat=true")
}

func TestSMTPPeerAcceptsAuthAndSeveralRecipients(t *testing.T) {
	p, sink := startPeers(t)
	c, err := smtp.Dial(p.SMTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Hello("herald.test"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.Extension("AUTH"); !ok {
		t.Fatal("AUTH not advertised")
	}
	// net/smtp allows PLAIN without TLS towards 127.0.0.1 only.
	if err := c.Auth(smtp.PlainAuth("", "demo-user", "demo-pass", "127.0.0.1")); err != nil {
		t.Fatalf("auth: %v", err)
	}
	if err := c.Mail("noreply@demo.test"); err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{"a@demo.test", "b@demo.test"} {
		if err := c.Rcpt(to); err != nil {
			t.Fatal(err)
		}
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("Subject: plain\r\nFrom: noreply@demo.test\r\n\r\nno message id here\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("end of data: %v", err)
	}
	if err := c.Quit(); err != nil {
		t.Fatal(err)
	}
	sink.waitLine(t, "smtp", "to=<a@demo.test>,<b@demo.test>", `subject="plain"`, "message-id=(none)", "auth=demo-user")
}

func TestSMTPPeerRefusesMalformedRecipient(t *testing.T) {
	p, _ := startPeers(t)
	c, err := smtp.Dial(p.SMTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Mail("noreply@demo.test"); err != nil {
		t.Fatal(err)
	}
	err = c.Rcpt("not-an-address")
	var te *textproto.Error
	if !errors.As(err, &te) || te.Code/100 != 5 {
		t.Fatalf("RCPT not-an-address: err = %v, want a permanent 5xx reply", err)
	}
	// The session goes on: a good recipient is still accepted.
	if err := c.Rcpt("ok@demo.test"); err != nil {
		t.Fatalf("RCPT after a refused one: %v", err)
	}
}

func countLines(sink *logSink, parts ...string) int {
	n := 0
	for _, l := range sink.lines() {
		if containsAll(l, parts) {
			n++
		}
	}
	return n
}
