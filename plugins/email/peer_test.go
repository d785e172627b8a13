package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Recipients the test peer treats specially.
const (
	rejectLocal = "reject" // RCPT answered 550 5.1.1
	busyLocal   = "busy"   // RCPT answered 451 4.3.0
)

// received is one message the peer accepted.
type received struct {
	From string
	To   []string
	Data string
}

// peerOptions shape the test SMTP server.
type peerOptions struct {
	// username and password, when set, are required through AUTH PLAIN.
	username, password string
	// tls enables STARTTLS with this config.
	tls *tls.Config
}

// smtpPeer is a real SMTP server (emersion/go-smtp) on 127.0.0.1 that
// records what it accepts.
type smtpPeer struct {
	opts peerOptions
	srv  *smtp.Server
	addr *net.TCPAddr

	mu       sync.Mutex
	messages []received
	sessions int
}

func startPeer(t *testing.T, opts peerOptions) *smtpPeer {
	t.Helper()
	p := &smtpPeer{opts: opts}
	p.srv = smtp.NewServer(p)
	p.srv.Domain = "localhost"
	p.srv.ReadTimeout = 10 * time.Second
	p.srv.WriteTimeout = 10 * time.Second
	p.srv.AllowInsecureAuth = opts.tls == nil
	p.srv.TLSConfig = opts.tls
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	p.addr = l.Addr().(*net.TCPAddr)
	done := make(chan error, 1)
	go func() { done <- p.srv.Serve(l) }()
	t.Cleanup(func() {
		// Closing the listener too stops a Serve that had not yet
		// registered it when Close ran.
		_ = p.srv.Close()
		_ = l.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Errorf("smtp peer did not stop")
		}
	})
	return p
}

// NewSession implements smtp.Backend.
func (p *smtpPeer) NewSession(c *smtp.Conn) (smtp.Session, error) {
	p.mu.Lock()
	p.sessions++
	p.mu.Unlock()
	return &peerSession{peer: p}, nil
}

func (p *smtpPeer) received() []received {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]received(nil), p.messages...)
}

func (p *smtpPeer) sessionCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sessions
}

type peerSession struct {
	peer   *smtpPeer
	authed bool
	cur    received
}

func (s *peerSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *peerSession) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(identity, username, password string) error {
		if username != s.peer.opts.username || password != s.peer.opts.password {
			return &smtp.SMTPError{Code: 535, EnhancedCode: smtp.EnhancedCode{5, 7, 8}, Message: "bad credentials"}
		}
		s.authed = true
		return nil
	}), nil
}

func (s *peerSession) Mail(from string, _ *smtp.MailOptions) error {
	if s.peer.opts.username != "" && !s.authed {
		return &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "authentication required"}
	}
	s.cur = received{From: from}
	return nil
}

func (s *peerSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	switch strings.SplitN(to, "@", 2)[0] {
	case rejectLocal:
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"}
	case busyLocal:
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "mailbox busy, try later"}
	}
	s.cur.To = append(s.cur.To, to)
	return nil
}

func (s *peerSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.cur.Data = string(b)
	s.peer.mu.Lock()
	s.peer.messages = append(s.peer.messages, s.cur)
	s.peer.mu.Unlock()
	return nil
}

func (s *peerSession) Reset() { s.cur = received{} }

func (s *peerSession) Logout() error { return nil }

// selfSigned returns a server TLS config for 127.0.0.1 and the path of a
// PEM file holding its certificate, to be used as ca_file.
func selfSigned(t *testing.T) (*tls.Config, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "herald test smtp"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		MinVersion:   tls.VersionTLS12,
	}, path
}

// closedPort returns a 127.0.0.1 port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatal(err)
	}
	return port
}
