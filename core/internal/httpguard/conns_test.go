package httpguard_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/httpguard"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// serve runs an HTTP server on a loopback Listener bounded by lim.
func serve(t *testing.T, lim httpguard.Limits) *httpguard.Listener {
	t.Helper()
	ln, err := httpguard.Listen("127.0.0.1:0", lim)
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	srv := ln.Track(httpguard.NewServer(h, lim, hclog.NewNullLogger()))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln
}

func baseLimits() httpguard.Limits {
	return httpguard.Limits{ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
		IdleTimeout: time.Minute, MaxHeaderBytes: 1 << 16}
}

// dialFrom opens a connection to ln from the loopback address src
// (127.0.0.x: a distinct client address on Linux).
func dialFrom(t *testing.T, ln net.Listener, src string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// get sends one keep-alive GET on c and returns the response's status and
// whether it says Connection: close.
func get(t *testing.T, c net.Conn, br *bufio.Reader) (int, bool) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Close
}

// TestPerAddressConnectionCap: with max_conns_per_ip 20, 30 idle keep-alive
// connections from 127.0.0.1 (each having made one request) leave the 21st
// and later answered 429 with Connection: close and closed, holding no
// slot; another address (127.0.0.2) is served; once one of the 20 closes,
// 127.0.0.1 is served again.
func TestPerAddressConnectionCap(t *testing.T) {
	lim := baseLimits()
	lim.MaxConns, lim.MaxConnsPerIP = 100, 20
	ln := serve(t, lim)
	var kept []net.Conn
	refused := 0
	for i := 0; i < 30; i++ {
		c := dialFrom(t, ln, "127.0.0.1")
		code, closing := get(t, c, bufio.NewReader(c))
		switch code {
		case http.StatusOK:
			kept = append(kept, c)
		case http.StatusTooManyRequests:
			refused++
			if !closing {
				t.Error("429 without Connection: close")
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := c.Read(make([]byte, 1)); err == nil {
				t.Errorf("refused connection still open (read %d bytes)", n)
			}
		default:
			t.Fatalf("connection %d: status %d", i, code)
		}
	}
	if len(kept) != 20 || refused != 10 {
		t.Fatalf("kept %d, refused %d; want 20 and 10", len(kept), refused)
	}
	if got := ln.Open(); got != 20 {
		t.Fatalf("open connections %d, want 20 (refused ones hold no slot)", got)
	}
	other := dialFrom(t, ln, "127.0.0.2")
	if code, _ := get(t, other, bufio.NewReader(other)); code != http.StatusOK {
		t.Fatalf("another address: status %d", code)
	}
	// The kept connections are still usable keep-alive connections.
	if code, _ := get(t, kept[0], bufio.NewReader(kept[0])); code != http.StatusOK {
		t.Fatalf("kept connection: status %d", code)
	}
	_ = kept[1].Close()
	testenv.Eventually(t, 5*time.Second, func() bool { return ln.Open() == 20 }, "closed connection uncounted")
	again := dialFrom(t, ln, "127.0.0.1")
	if code, _ := get(t, again, bufio.NewReader(again)); code != http.StatusOK {
		t.Fatalf("after a close: status %d", code)
	}
}

// TestIdleConnectionsClosedUnderPressure: past three quarters of
// max_conns, idle keep-alive connections are closed after the pressure
// idle timeout (not the one-minute idle timeout), which frees slots for
// new clients; below it, idle connections stay.
func TestIdleConnectionsClosedUnderPressure(t *testing.T) {
	lim := baseLimits()
	lim.MaxConns, lim.PressureIdleTimeout = 8, 200*time.Millisecond
	ln := serve(t, lim)
	// Below pressure (5 of 8 < 6): idle connections stay past the
	// pressure timeout.
	var idle []net.Conn
	var readers []*bufio.Reader
	for i := 0; i < 5; i++ {
		c := dialFrom(t, ln, "127.0.0.1")
		br := bufio.NewReader(c)
		if code, _ := get(t, c, br); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
		idle, readers = append(idle, c), append(readers, br)
	}
	// A round trip on each after more than the pressure timeout proves
	// they were not closed.
	deadline := time.Now().Add(400 * time.Millisecond)
	for time.Now().Before(deadline) {
		if code, _ := get(t, idle[0], readers[0]); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	}
	for i, c := range idle {
		if code, _ := get(t, c, readers[i]); code != http.StatusOK {
			t.Fatalf("idle connection %d closed below pressure: status %d", i, code)
		}
	}
	// Fill all 8 slots with idle connections: every one is closed.
	for i := 0; i < 3; i++ {
		c := dialFrom(t, ln, "127.0.0.1")
		br := bufio.NewReader(c)
		if code, _ := get(t, c, br); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
		idle = append(idle, c)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return ln.Open() <= 5 }, "idle connections closed under pressure")
	// A new client is served although 8 idle connections were opened.
	c := dialFrom(t, ln, "127.0.0.3")
	if code, _ := get(t, c, bufio.NewReader(c)); code != http.StatusOK {
		t.Fatalf("new client: status %d", code)
	}
}
