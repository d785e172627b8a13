package live

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/heraldhq/herald/core/internal/metrics"
)

// session is one browser connection.
type session struct {
	conn *websocket.Conn
	send chan []byte
	done chan struct{}
	// tenant and user own the session; project is the token's project
	// scope ("" for every project of the tenant).
	tenant, user, project string

	closeOnce sync.Once
	mu        sync.Mutex
	status    websocket.StatusCode
	reason    string
}

func newSession(conn *websocket.Conn, buffer int) *session {
	return &session{conn: conn, send: make(chan []byte, buffer), done: make(chan struct{})}
}

// enqueue queues a frame without blocking; a full queue drops the session.
func (s *session) enqueue(b []byte) bool {
	select {
	case <-s.done:
		return false
	default:
	}
	select {
	case s.send <- b:
		return true
	default:
		s.close(websocket.StatusPolicyViolation, "slow consumer: send buffer full")
		return false
	}
}

// close asks the session to end with status. For "going away" and normal
// closure run performs the close handshake; any other status drops the
// connection at once, which also unblocks a write stuck on a slow browser.
func (s *session) close(status websocket.StatusCode, reason string) {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.status, s.reason = status, reason
		s.mu.Unlock()
		close(s.done)
		if !graceful(status) {
			go func() { _ = s.conn.CloseNow() }()
		}
	})
}

// graceful reports whether a session ending with status gets a close
// handshake.
func graceful(status websocket.StatusCode) bool {
	return status == websocket.StatusGoingAway || status == websocket.StatusNormalClosure
}

// run writes queued frames and pings until the session ends, then closes
// the connection with the recorded status.
func (s *session) run(pingEvery, writeTimeout time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The reader answers pings, collects pongs and notices the browser
	// closing; anything else the browser sends is ignored.
	go func() {
		for {
			if _, _, err := s.conn.Read(ctx); err != nil {
				s.close(websocket.StatusNormalClosure, "")
				return
			}
		}
	}()
	ticker := time.NewTicker(pingEvery)
	defer ticker.Stop()
	for {
		select {
		case <-s.done:
			s.mu.Lock()
			status, reason := s.status, s.reason
			s.mu.Unlock()
			if graceful(status) {
				_ = s.conn.Close(status, reason)
			} else {
				// A slow or unresponsive browser would stall the close
				// handshake too.
				_ = s.conn.CloseNow()
			}
			return
		case b := <-s.send:
			wctx, wcancel := context.WithTimeout(ctx, writeTimeout)
			err := s.conn.Write(wctx, websocket.MessageText, b)
			wcancel()
			if err != nil {
				s.close(websocket.StatusPolicyViolation, "write timed out")
			}
		case <-ticker.C:
			pctx, pcancel := context.WithTimeout(ctx, pingEvery)
			err := s.conn.Ping(pctx)
			pcancel()
			if err != nil {
				s.close(websocket.StatusPolicyViolation, "ping timed out")
			}
		}
	}
}

// hub maps a user's route key to the user's open sessions on this daemon,
// and counts the sessions reserved (opening or open) by user, tenant and
// client address against the caps.
type hub struct {
	mu       sync.RWMutex
	sessions map[string]map[*session]struct{}
	closed   bool
	m        *metrics.Metrics
	// reserved counts, under mu.
	users, tenants, ips map[string]int
	total               int
	// running counts registered sessions; Add happens under mu while not
	// closed, so it never races with shutdown's Wait.
	running sync.WaitGroup
}

func newHub() *hub {
	return &hub{sessions: map[string]map[*session]struct{}{}, users: map[string]int{}, tenants: map[string]int{}, ips: map[string]int{}}
}

// reserve counts a session of the user of key in tenant from client
// address ip, unless that would pass one of cfg's caps: then it counts
// nothing and returns which cap, as a problem's detail.
func (h *hub) reserve(key, tenant, ip string, cfg Config) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	reason, detail := "", ""
	switch {
	case h.users[key] >= cfg.MaxSessionsPerUser:
		reason, detail = metrics.RefusedUser, fmt.Sprintf("at most %d open sessions per user", cfg.MaxSessionsPerUser)
	case h.tenants[tenant] >= cfg.tenantCap(tenant):
		reason, detail = metrics.RefusedTenant, fmt.Sprintf("at most %d open sessions for this tenant", cfg.tenantCap(tenant))
	case cfg.MaxSessionsPerIP > 0 && h.ips[ip] >= cfg.MaxSessionsPerIP:
		reason, detail = metrics.RefusedAddress, fmt.Sprintf("at most %d open sessions from one client address", cfg.MaxSessionsPerIP)
	case h.total >= cfg.MaxSessions:
		reason, detail = metrics.RefusedDaemon, "this server holds as many sessions as it may"
	}
	if reason != "" {
		h.m.LiveRefused(reason)
		return detail
	}
	h.users[key]++
	h.tenants[tenant]++
	h.ips[ip]++
	h.total++
	h.m.LiveSessions(tenant, h.tenants[tenant])
	return ""
}

// unreserve uncounts a session reserve counted.
func (h *hub) unreserve(key, tenant, ip string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	dec := func(m map[string]int, k string) {
		if m[k]--; m[k] <= 0 {
			delete(m, k)
		}
	}
	dec(h.users, key)
	dec(h.tenants, tenant)
	dec(h.ips, ip)
	h.total--
	h.m.LiveSessions(tenant, h.tenants[tenant])
}

// add registers a session; it returns false once the hub is closed.
func (h *hub) add(key string, s *session) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	if h.sessions[key] == nil {
		h.sessions[key] = map[*session]struct{}{}
	}
	h.sessions[key][s] = struct{}{}
	h.running.Add(1)
	return true
}

// remove unregisters a session added by add.
func (h *hub) remove(key string, s *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.sessions[key], s)
	if len(h.sessions[key]) == 0 {
		delete(h.sessions, key)
	}
	h.running.Done()
}

// closeAll refuses further sessions and returns the open ones.
func (h *hub) closeAll() []*session {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	var out []*session
	for _, ss := range h.sessions {
		for s := range ss {
			out = append(out, s)
		}
	}
	return out
}

// publishTo queues b on every session of key that belongs to tenant and
// user, and returns how many took it. A session limited to a project gets
// forProject(project) instead, and nothing when that is nil (computed
// once per project, outside the hub's lock).
func (h *hub) publishTo(key, tenant, user string, b []byte, forProject func(project string) []byte) int {
	h.mu.RLock()
	var targets []*session
	for s := range h.sessions[key] {
		if s.tenant == tenant && s.user == user {
			targets = append(targets, s)
		}
	}
	h.mu.RUnlock()
	n := 0
	frames := map[string][]byte{}
	for _, s := range targets {
		f := b
		if s.project != "" {
			var done bool
			if f, done = frames[s.project]; !done {
				f = forProject(s.project)
				frames[s.project] = f
			}
			if f == nil {
				continue
			}
		}
		if s.enqueue(f) {
			n++
		}
	}
	return n
}

func (h *hub) count() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := 0
	for _, ss := range h.sessions {
		n += len(ss)
	}
	return n
}
