// Package devpeer runs local stand-ins for the providers Herald's channel
// plugins talk to, so the quick start works on a machine with no provider
// credentials: a real SMTP server (emersion/go-smtp) that accepts every
// message, and one HTTP server that speaks the FCM HTTP v1, Twilio Messages
// and Slack Web API shapes at the paths the plugins call.
//
// The peers check requests the way the real services do at the level the
// plugins depend on (authentication present, required fields present) and
// answer with the services' own success and error shapes. They deliver
// nothing: every accepted message is written as one line to Config.Log.
//
// The peers are for demos and development only. They listen on loopback
// addresses only and accept any credentials.
package devpeer

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
)

// Default addresses, the ones examples/quickstart/rules.hcl points at.
const (
	DefaultSMTPAddr = "127.0.0.1:2525"
	DefaultHTTPAddr = "127.0.0.1:4010"
	DefaultTLSAddr  = "127.0.0.1:4443"
)

// Config says where the peers listen and where they report.
type Config struct {
	// SMTPAddr is the SMTP server's loopback host:port; empty starts no
	// SMTP server. Port 0 picks a free port (see Peers.SMTPAddr).
	SMTPAddr string
	// HTTPAddr is the HTTP server's loopback host:port; empty starts no
	// HTTP server. Port 0 picks a free port (see Peers.HTTPURL).
	HTTPAddr string
	// TLSAddr is the TLS server's loopback host:port (Web Push and APNs,
	// which need https and HTTP/2); empty starts no TLS server.
	TLSAddr string
	// TLSDir is where the TLS server writes its CA and the push plugin's
	// dev keys (FileCA, FileAPNsKey, FileVAPIDPublicKey,
	// FileVAPIDPrivateKey); required with TLSAddr.
	TLSDir string
	// Log receives one line per message or request; nil discards them.
	// Writes are serialised, so any io.Writer will do.
	Log io.Writer
}

// Peers is a running set of provider peers.
type Peers struct {
	log *lineLog

	smtpSrv  *smtp.Server
	smtpLn   net.Listener
	smtpAddr string
	httpSrv  *http.Server
	httpAddr string
	tlsSrv   *http.Server
	tlsAddr  string

	wg        sync.WaitGroup
	closeOnce sync.Once
	stopCtx   func() bool

	mu       sync.Mutex
	serveErr error
}

// Start listens on the configured addresses and serves until ctx is done or
// Close is called. It fails when an address is not a loopback address or
// cannot be bound; nothing is left running then.
func Start(ctx context.Context, cfg Config) (*Peers, error) {
	if cfg.SMTPAddr == "" && cfg.HTTPAddr == "" && cfg.TLSAddr == "" {
		return nil, errors.New("devpeer: no SMTP, HTTP or TLS address given")
	}
	if cfg.TLSAddr != "" && cfg.TLSDir == "" {
		return nil, errors.New("devpeer: a TLS address needs a directory for its CA and keys (TLSDir)")
	}
	for _, a := range []string{cfg.SMTPAddr, cfg.HTTPAddr, cfg.TLSAddr} {
		if a == "" {
			continue
		}
		if err := checkLoopback(a); err != nil {
			return nil, err
		}
	}
	p := &Peers{log: newLineLog(cfg.Log)}
	var smtpLn, httpLn net.Listener
	if cfg.SMTPAddr != "" {
		l, err := net.Listen("tcp", cfg.SMTPAddr)
		if err != nil {
			return nil, fmt.Errorf("devpeer: smtp listen: %w", err)
		}
		smtpLn = l
		p.smtpLn = l
		p.smtpAddr = l.Addr().String()
	}
	if cfg.HTTPAddr != "" {
		l, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			if smtpLn != nil {
				_ = smtpLn.Close()
			}
			return nil, fmt.Errorf("devpeer: http listen: %w", err)
		}
		httpLn = l
		p.httpAddr = l.Addr().String()
	}

	var tlsLn net.Listener
	if cfg.TLSAddr != "" {
		cert, err := writeTLSFiles(cfg.TLSDir)
		if err == nil {
			tlsLn, err = net.Listen("tcp", cfg.TLSAddr)
			if err != nil {
				err = fmt.Errorf("devpeer: tls listen: %w", err)
			}
		}
		if err != nil {
			for _, l := range []net.Listener{smtpLn, httpLn} {
				if l != nil {
					_ = l.Close()
				}
			}
			return nil, err
		}
		p.tlsAddr = tlsLn.Addr().String()
		p.tlsSrv = &http.Server{
			Handler:           newTLSHandler(p.log),
			TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       2 * time.Minute,
		}
		// ServeTLS with certificates in TLSConfig enables HTTP/2 (h2 by
		// ALPN), which APNs clients require.
		p.serve("tls", func() error {
			err := p.tlsSrv.ServeTLS(tlsLn, "", "")
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return err
		})
	}
	if smtpLn != nil {
		p.smtpSrv = newSMTPServer(p.log)
		p.serve("smtp", func() error {
			err := p.smtpSrv.Serve(smtpLn)
			if errors.Is(err, smtp.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		})
	}
	if httpLn != nil {
		p.httpSrv = &http.Server{
			Handler:           newHTTPHandler(p.log),
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       2 * time.Minute,
		}
		p.serve("http", func() error {
			err := p.httpSrv.Serve(httpLn)
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return err
		})
	}
	p.stopCtx = context.AfterFunc(ctx, func() { _ = p.Close() })
	return p, nil
}

func (p *Peers) serve(name string, run func() error) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := run(); err != nil {
			p.mu.Lock()
			if p.serveErr == nil {
				p.serveErr = fmt.Errorf("devpeer: %s server: %w", name, err)
			}
			p.mu.Unlock()
		}
	}()
}

// SMTPAddr is the SMTP server's host:port ("" when not started).
func (p *Peers) SMTPAddr() string { return p.smtpAddr }

// HTTPAddr is the HTTP server's host:port ("" when not started).
func (p *Peers) HTTPAddr() string { return p.httpAddr }

// HTTPURL is the HTTP server's base URL, such as "http://127.0.0.1:4010"
// ("" when not started).
func (p *Peers) HTTPURL() string {
	if p.httpAddr == "" {
		return ""
	}
	return "http://" + p.httpAddr
}

// TLSURL is the TLS server's base URL, such as "https://127.0.0.1:4443"
// ("" when not started).
func (p *Peers) TLSURL() string {
	if p.tlsAddr == "" {
		return ""
	}
	return "https://" + p.tlsAddr
}

// Close stops the servers, dropping open connections, and waits for them to
// return. It returns the first error a server stopped with, if any. Calling
// it again returns the same result.
func (p *Peers) Close() error {
	p.closeOnce.Do(func() {
		if p.stopCtx != nil {
			p.stopCtx()
		}
		if p.smtpSrv != nil {
			_ = p.smtpSrv.Close()
			// go-smtp's Close only closes listeners Serve has already
			// registered; when Close wins the race with the serving
			// goroutine, closing the listener here is what ends Serve.
			_ = p.smtpLn.Close()
		}
		if p.httpSrv != nil {
			_ = p.httpSrv.Close()
		}
		if p.tlsSrv != nil {
			_ = p.tlsSrv.Close()
		}
	})
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.serveErr
}

// checkLoopback refuses addresses other peers on the network could reach:
// the peers accept any credentials and must not pass for a provider.
func checkLoopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("devpeer: address %q: %w", addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("devpeer: address %q: bad port", addr)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("devpeer: address %q: the peers listen on loopback addresses only (127.0.0.1, ::1, localhost)", addr)
	}
	return nil
}

// lineLog writes whole lines to an io.Writer, one writer at a time.
type lineLog struct {
	mu sync.Mutex
	w  io.Writer
	// health holds the last health-check line written per peer and check,
	// so that the checks the plugins repeat every few seconds are written
	// once per change instead of burying the deliveries.
	health map[string]string
}

func newLineLog(w io.Writer) *lineLog {
	if w == nil {
		w = io.Discard
	}
	return &lineLog{w: w}
}

// printf writes one line: a timestamp, the peer's name padded to a column,
// then the formatted text with any line breaks flattened.
func (l *lineLog) printf(peer, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	msg = strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(msg)
	line := fmt.Sprintf("%s %-6s %s\n", time.Now().UTC().Format("15:04:05.000"), peer, msg)
	l.mu.Lock()
	defer l.mu.Unlock()
	if strings.HasPrefix(msg, "rejected") || strings.HasPrefix(msg, "404") {
		// A failing check that passes again is a change worth a line.
		for k := range l.health {
			if strings.HasPrefix(k, peer+" ") {
				delete(l.health, k)
			}
		}
	}
	_, _ = io.WriteString(l.w, line)
}

// healthf writes a health check's line like printf, but only when it
// differs from the last line of the same peer and check: plugins check
// their provider every few seconds, and the repeats would bury the
// deliveries. A rejection by the peer forgets the last line, so the next
// passing check is written again.
func (l *lineLog) healthf(peer, check, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	key := peer + " " + check
	l.mu.Lock()
	if l.health == nil {
		l.health = map[string]string{}
	}
	if l.health[key] == msg {
		l.mu.Unlock()
		return
	}
	l.health[key] = msg
	l.mu.Unlock()
	l.printf(peer, "%s (health check; repeats are not logged)", msg)
}

// randomHex returns n random bytes as lower-case hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// clip shortens s for a log line.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// recentCap bounds how many idempotency keys and Message-IDs a peer
// remembers.
const recentCap = 10000

// recent remembers the last recentCap keys with a value each, forgetting the
// oldest first.
type recent[V any] struct {
	mu    sync.Mutex
	vals  map[string]V
	order []string // ring of keys in insertion order
	next  int
}

// getOrPut returns the value stored under key and true, or stores v under key
// and returns v and false.
func (r *recent[V]) getOrPut(key string, v V) (V, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.vals[key]; ok {
		return old, true
	}
	if r.vals == nil {
		r.vals = make(map[string]V)
	}
	if len(r.order) < recentCap {
		r.order = append(r.order, key)
	} else {
		delete(r.vals, r.order[r.next])
		r.order[r.next] = key
		r.next = (r.next + 1) % recentCap
	}
	r.vals[key] = v
	return v, false
}
