package devpeer

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// logSink collects the peers' log lines and lets a test wait for one.
type logSink struct {
	mu      sync.Mutex
	buf     strings.Builder
	changed chan struct{}
}

func newLogSink() *logSink { return &logSink{changed: make(chan struct{})} }

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

func (l *logSink) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimRight(l.buf.String(), "\n"), "\n")
}

// waitLine waits up to five seconds for a line holding every one of parts
// and returns it.
func (l *logSink) waitLine(t *testing.T, parts ...string) string {
	t.Helper()
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		text, changed := l.buf.String(), l.changed
		l.mu.Unlock()
		for _, line := range strings.Split(text, "\n") {
			if containsAll(line, parts) {
				return line
			}
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("no log line with %q within 5s; log:\n%s", parts, text)
			return ""
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// startPeers starts both peers on free loopback ports.
func startPeers(t *testing.T) (*Peers, *logSink) {
	t.Helper()
	sink := newLogSink()
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Start(ctx, Config{SMTPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Log: sink})
	if err != nil {
		cancel()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p, sink
}

func TestStartRefusesNonLoopbackAddresses(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:2525", ":2525", "192.0.2.1:2525", "example.invalid:25", "127.0.0.1"} {
		_, err := Start(context.Background(), Config{SMTPAddr: addr})
		if err == nil {
			t.Errorf("Start(SMTPAddr %q) = nil error, want a refusal", addr)
		}
	}
	if _, err := Start(context.Background(), Config{}); err == nil {
		t.Error("Start with no address = nil error")
	}
}

func TestStartFailsCleanlyWhenAPortIsTaken(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	smtpAddr := free.Addr().String()
	free.Close()

	_, err = Start(context.Background(), Config{SMTPAddr: smtpAddr, HTTPAddr: busy.Addr().String()})
	if err == nil || !strings.Contains(err.Error(), "http listen") {
		t.Fatalf("Start on a busy HTTP port: err = %v, want an http listen error", err)
	}
	// The SMTP listener opened first must have been released.
	l, err := net.Listen("tcp", smtpAddr)
	if err != nil {
		t.Fatalf("SMTP address still bound after the failed Start: %v", err)
	}
	l.Close()
}

func TestCancellingTheContextStopsThePeers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Start(ctx, Config{SMTPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{p.SMTPAddr(), p.HTTPAddr()} {
		c, err := net.DialTimeout("tcp", a, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %s while running: %v", a, err)
		}
		c.Close()
	}
	cancel()
	// Close waits for the servers the cancellation is stopping.
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, a := range []string{p.SMTPAddr(), p.HTTPAddr()} {
		c, err := net.DialTimeout("tcp", a, 5*time.Second)
		if err == nil {
			c.Close()
			t.Errorf("dial %s after cancel succeeded, want refused", a)
		}
	}
}
