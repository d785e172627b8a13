package httpguard

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/heraldhq/herald/core/internal/metrics"
)

// maxRefusing bounds the refused connections being answered at once; past
// it a refused connection is closed without an answer.
const maxRefusing = 64

// refuseLinger bounds how long a refused connection is kept to answer it
// and read what the client sent before the close.
const refuseLinger = time.Second

// Listener is a TCP listener bounding its open connections: at most
// MaxConns in all (Accept waits while the cap is reached, further clients
// queue in the kernel's backlog), at most MaxConnsPerIP per client
// address (ClientKey: an IPv4 address or an IPv6 /64; past it a new
// connection is answered 429 with Connection: close and closed at once, so
// it holds no slot), and, once the open connections pass three quarters of
// MaxConns, idle keep-alive connections are closed after
// PressureIdleTimeout instead of IdleTimeout. Track must see the server's
// connection states for the last.
type Listener struct {
	net.Listener
	lim      Limits
	sem      chan struct{} // nil: no total cap
	done     chan struct{}
	once     sync.Once
	refusing chan struct{}
	m        *metrics.Metrics

	mu    sync.Mutex
	perIP map[string]int
	open  int
	idle  map[*conn]time.Time // idle keep-alive connections, since when
}

// Listen opens a TCP listener on addr bounded by lim's MaxConns,
// MaxConnsPerIP and PressureIdleTimeout.
func Listen(addr string, lim Limits) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &Listener{Listener: ln, lim: lim, done: make(chan struct{}), refusing: make(chan struct{}, maxRefusing),
		perIP: map[string]int{}, idle: map[*conn]time.Time{}}
	if lim.MaxConns > 0 {
		l.sem = make(chan struct{}, lim.MaxConns)
		if lim.PressureIdleTimeout > 0 {
			go l.reap()
		}
	}
	return l, nil
}

// SetMetrics counts the listener's connections, refusals and early idle
// closes in m; call it before serving.
func (l *Listener) SetMetrics(m *metrics.Metrics) { l.m = m }

// Track makes srv report its connections' states to l (idle keep-alive
// connections are closed early under pressure) and returns srv.
func (l *Listener) Track(srv *http.Server) *http.Server {
	prev := srv.ConnState
	srv.ConnState = func(nc net.Conn, st http.ConnState) {
		if c, ok := nc.(*conn); ok && c.l == l {
			l.mu.Lock()
			if st == http.StateIdle {
				l.idle[c] = time.Now()
			} else {
				delete(l.idle, c)
			}
			l.mu.Unlock()
		}
		if prev != nil {
			prev(nc, st)
		}
	}
	return srv
}

// Open returns the open connections.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Accept waits for a slot under MaxConns and returns the next connection
// whose address is under MaxConnsPerIP; the others are answered 429 and
// closed.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		if l.sem != nil {
			select {
			case l.sem <- struct{}{}:
			case <-l.done:
				return nil, net.ErrClosed
			}
		}
		nc, err := l.Listener.Accept()
		if err != nil {
			l.release()
			return nil, err
		}
		key := ClientKey(nc.RemoteAddr().String())
		l.mu.Lock()
		if l.lim.MaxConnsPerIP > 0 && l.perIP[key] >= l.lim.MaxConnsPerIP {
			l.mu.Unlock()
			l.release()
			l.m.HTTPRefused(metrics.RefusedAddress)
			l.refuse(nc)
			continue
		}
		l.perIP[key]++
		l.open++
		l.mu.Unlock()
		l.m.HTTPConns(1)
		return &conn{Conn: nc, l: l, key: key}, nil
	}
}

// Close closes the listener; open connections stay.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (l *Listener) release() {
	if l.sem != nil {
		<-l.sem
	}
}

// closed uncounts c, once.
func (l *Listener) closed(c *conn) {
	l.mu.Lock()
	delete(l.idle, c)
	l.open--
	if l.perIP[c.key]--; l.perIP[c.key] <= 0 {
		delete(l.perIP, c.key)
	}
	l.mu.Unlock()
	l.m.HTTPConns(-1)
	l.release()
}

// refusal is the answer to a connection over its address's cap.
var refusal = func() []byte {
	body := fmt.Sprintf(`{"type":"about:blank","title":"too many connections","status":429,"detail":%q}`+"\n",
		"too many open connections from this client address; close idle ones and retry")
	return []byte(fmt.Sprintf("HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\nCache-Control: no-store\r\n"+
		"X-Content-Type-Options: nosniff\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
}()

// refuse answers nc 429 and closes it; it reads (and drops) what the
// client sent for at most refuseLinger, so that the close does not reset
// the answer away. Past maxRefusing at once, nc is closed unanswered.
func (l *Listener) refuse(nc net.Conn) {
	select {
	case l.refusing <- struct{}{}:
	default:
		_ = nc.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(refuseLinger))
		if _, err := nc.Write(refusal); err != nil {
			return
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(nc, 64<<10))
	}()
}

// reap closes, while the open connections are at three quarters of
// MaxConns or more, the keep-alive connections idle for
// PressureIdleTimeout.
func (l *Listener) reap() {
	every := min(max(l.lim.PressureIdleTimeout/4, 10*time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case now := <-t.C:
			var stale []*conn
			l.mu.Lock()
			if l.open*4 >= l.lim.MaxConns*3 {
				for c, since := range l.idle {
					if now.Sub(since) >= l.lim.PressureIdleTimeout {
						stale = append(stale, c)
						delete(l.idle, c)
					}
				}
			}
			l.mu.Unlock()
			for _, c := range stale {
				_ = c.Close()
			}
			l.m.HTTPIdleClosed(len(stale))
		}
	}
}

// conn is an accepted connection, uncounted when closed.
type conn struct {
	net.Conn
	l    *Listener
	key  string
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.closed(c) })
	return err
}

// ClientKey is a client's address as the per-address limits (connections,
// live sessions, the API's per-IP rate limit) count it,
// from a "host:port" remote address: the IPv4 address, or the IPv6 /64
// (one host usually holds a whole /64).
func ClientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}
