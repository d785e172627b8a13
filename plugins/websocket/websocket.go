package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldhq/herald/sdk"
)

// Version is the plugin's own version.
const Version = "0.1.0"

// MaxBatch is the largest batch one Send accepts.
const MaxBatch = 500

// Permanent codes of the WEBSOCKET channel.
const (
	// CodeOffline: the recipient has no open session. The channel is best
	// effort, so the host does not retry; the inbox keeps the notification.
	CodeOffline = "offline"
	// CodeNoAddress: the delivery names no user.
	CodeNoAddress = "no_address"
)

// Frame types the server sends.
const (
	FrameReady        = "ready"
	FrameNotification = "notification"
)

// readLimit bounds what a browser may send; the server expects nothing but
// control frames, and reads only to answer pings and notice closes.
const readLimit = 4096

// shutdownTimeout bounds closing the sessions on Close.
const shutdownTimeout = 5 * time.Second

// ErrNotConfigured prompts the host to call Configure before Send or Health.
var ErrNotConfigured = errors.New("websocket: not configured")

// WebSocket is the WEBSOCKET channel: an HTTP server that upgrades browser
// connections authenticated by JWT, and a hub that fans deliveries out to
// every open session of the recipient.
type WebSocket struct {
	mu  sync.Mutex
	srv *server
}

var (
	_ sdk.Channel = (*WebSocket)(nil)
	_ sdk.Closer  = (*WebSocket)(nil)
)

// New returns an unconfigured websocket channel; Serve calls it once.
func New() sdk.Channel { return &WebSocket{} }

// Describe returns the plugin's static description.
func (w *WebSocket) Describe(ctx context.Context) (sdk.Description, error) {
	return sdk.Description{
		ChannelType:   "WEBSOCKET",
		Provider:      "websocket",
		PluginVersion: Version,
		APIVersions:   []int{1},
		Class:         sdk.BestEffort,
		MaxBatch:      MaxBatch,
		Config:        configSpecs,
	}, nil
}

// Configure checks the config and (re)starts the server on cfg.Listen. A
// running server is shut down first, closing its sessions with "going
// away" so browsers reconnect to the new one.
func (w *WebSocket) Configure(ctx context.Context, req sdk.ConfigureRequest) error {
	cfg, err := configFromParsed(req.Config)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.srv != nil {
		w.srv.shutdown()
		w.srv = nil
	}
	srv, err := startServer(cfg)
	if err != nil {
		return err
	}
	w.srv = srv
	return nil
}

// Close stops the server and closes every session (sdk.Closer).
func (w *WebSocket) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.srv != nil {
		w.srv.shutdown()
		w.srv = nil
	}
	return nil
}

// Addr returns the address the server listens on ("" before Configure).
func (w *WebSocket) Addr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.srv == nil {
		return ""
	}
	return w.srv.ln.Addr().String()
}

func (w *WebSocket) server() (*server, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.srv == nil {
		return nil, ErrNotConfigured
	}
	return w.srv, nil
}

// Health reports the listening address and the number of open sessions.
func (w *WebSocket) Health(ctx context.Context) (sdk.HealthReport, error) {
	srv, err := w.server()
	if err != nil {
		return sdk.HealthReport{Healthy: false, Message: err.Error()}, nil
	}
	select {
	case <-srv.stopped:
		return sdk.HealthReport{Healthy: false, Message: "websocket: server stopped: " + srv.serveErr.Error()}, nil
	default:
	}
	return sdk.HealthReport{Healthy: true, Message: fmt.Sprintf("listening on %s, %d open sessions", srv.ln.Addr(), srv.hub.count())}, nil
}

// Send queues each delivery's frame on every open session of its tenant
// and user. It never blocks on a browser: a session whose queue is full is
// dropped as a slow consumer.
func (w *WebSocket) Send(ctx context.Context, batch []sdk.Delivery) ([]sdk.Result, error) {
	srv, err := w.server()
	if err != nil {
		return nil, err
	}
	results := make([]sdk.Result, len(batch))
	for i, d := range batch {
		if d.Recipient.UserID == "" {
			results[i] = sdk.Permanent(d.DeliveryID, "websocket: delivery names no user", CodeNoAddress)
			continue
		}
		frame, err := notificationFrame(d)
		if err != nil {
			results[i] = sdk.Permanent(d.DeliveryID, "websocket: encode frame: "+err.Error(), "encode")
			continue
		}
		n := srv.hub.publish(sessionKey(d.TenantID, d.Recipient.UserID), frame)
		if n == 0 {
			results[i] = sdk.Permanent(d.DeliveryID, "websocket: user has no open session", CodeOffline)
			continue
		}
		results[i] = sdk.Sent(d.DeliveryID, "sessions="+strconv.Itoa(n))
	}
	return results, nil
}

// frame is the JSON a browser receives.
type frame struct {
	Type           string          `json:"type"`
	DeliveryID     string          `json:"delivery_id,omitempty"`
	NotificationID string          `json:"notification_id,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	EventType      string          `json:"event_type,omitempty"`
	Title          string          `json:"title,omitempty"`
	Body           string          `json:"body,omitempty"`
	Data           json.RawMessage `json:"data,omitempty"`
	Severity       string          `json:"severity,omitempty"`
	// Tenant and UserID are set on the "ready" frame.
	Tenant string `json:"tenant,omitempty"`
	UserID string `json:"user_id,omitempty"`
}

// notificationFrame encodes a delivery. The idempotency key lets a browser
// drop a notification it has already shown.
func notificationFrame(d sdk.Delivery) ([]byte, error) {
	title := d.Content.Title
	if title == "" {
		title = d.Content.Subject
	}
	data := d.Content.Data
	if len(data) > 0 && !json.Valid(data) {
		return nil, errors.New("content data is not valid JSON")
	}
	key := d.IdempotencyKey
	if key == "" {
		key = d.DeliveryID
	}
	return json.Marshal(frame{
		Type:           FrameNotification,
		DeliveryID:     d.DeliveryID,
		NotificationID: d.NotificationID,
		IdempotencyKey: key,
		EventType:      d.EventType,
		Title:          title,
		Body:           d.Content.Body,
		Data:           data,
		Severity:       d.Severity,
	})
}

func sessionKey(tenant, user string) string { return tenant + "\x00" + user }

// server is one running HTTP server with its hub.
type server struct {
	cfg     Config
	ln      net.Listener
	http    *http.Server
	hub     *hub
	stopped chan struct{}
	// serveErr is set before stopped is closed.
	serveErr error
}

func startServer(cfg Config) (*server, error) {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, &sdk.ConfigError{Field: FieldListen, Msg: err.Error()}
	}
	s := &server{cfg: cfg, ln: ln, hub: newHub(), stopped: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc(cfg.Path, s.handle)
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		err := s.http.Serve(ln)
		s.serveErr = err
		close(s.stopped)
	}()
	return s, nil
}

// shutdown stops accepting connections, closes every session with "going
// away" and waits (bounded) for their handlers to finish.
func (s *server) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	_ = s.http.Shutdown(ctx) // hijacked WebSocket connections are not waited for
	for _, sess := range s.hub.closeAll() {
		sess.close(websocket.StatusGoingAway, "server shutting down")
	}
	done := make(chan struct{})
	go func() { s.hub.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	<-s.stopped
}

// claims are the end-user JWT claims.
type claims struct {
	Tenant   string `json:"tenant"`
	UserType string `json:"user_type"`
	jwt.RegisteredClaims
}

// authenticate reads the token from ?token= or "Authorization: Bearer" and
// verifies it.
func (s *server) authenticate(r *http.Request) (*claims, error) {
	raw := r.URL.Query().Get("token")
	if h := r.Header.Get("Authorization"); raw == "" && h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return nil, errors.New("authorization header is not a bearer token")
		}
		raw = strings.TrimSpace(tok)
	}
	if raw == "" {
		return nil, errors.New("no token")
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(5 * time.Second),
	}
	if s.cfg.JWTIssuer != "" {
		opts = append(opts, jwt.WithIssuer(s.cfg.JWTIssuer))
	}
	if s.cfg.JWTAudience != "" {
		opts = append(opts, jwt.WithAudience(s.cfg.JWTAudience))
	}
	var c claims
	if _, err := jwt.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return []byte(s.cfg.JWTSecret), nil }, opts...); err != nil {
		return nil, err
	}
	if c.Tenant == "" || c.Subject == "" {
		return nil, errors.New("token lacks the tenant or sub claim")
	}
	return &c, nil
}

// handle authenticates a browser, upgrades the connection and runs the
// session until it ends.
func (s *server) handle(w http.ResponseWriter, r *http.Request) {
	c, err := s.authenticate(r)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		http.Error(w, "unauthorized: "+err.Error(), http.StatusUnauthorized)
		return
	}
	key := sessionKey(c.Tenant, c.Subject)
	if s.hub.countFor(key) >= s.cfg.MaxSessionsPerUser {
		http.Error(w, "too many open sessions", http.StatusTooManyRequests)
		return
	}
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: s.cfg.AllowedOrigins})
	if err != nil {
		return // Accept has written the HTTP error
	}
	conn.SetReadLimit(readLimit)
	sess := newSession(conn, s.cfg.SendBuffer)
	ready, _ := json.Marshal(frame{Type: FrameReady, Tenant: c.Tenant, UserID: c.Subject})
	sess.send <- ready // the queue is empty and at least 1 long
	if !s.hub.add(key, sess) {
		_ = conn.Close(websocket.StatusGoingAway, "server shutting down")
		return
	}
	defer s.hub.remove(key, sess)
	// The browser gets "ready" once the session is registered: from then
	// on, Send reaches it.
	sess.run(s.cfg.PingInterval, s.cfg.WriteTimeout)
}

// session is one browser connection.
type session struct {
	conn *websocket.Conn
	send chan []byte
	done chan struct{}

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

// hub maps tenant+user to open sessions.
type hub struct {
	mu       sync.RWMutex
	sessions map[string]map[*session]struct{}
	closed   bool
	// running counts registered sessions; Add happens under mu while not
	// closed, so it never races with shutdown's Wait.
	running sync.WaitGroup
}

func newHub() *hub { return &hub{sessions: map[string]map[*session]struct{}{}} }

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

// publish queues b on every session of key and returns how many took it.
func (h *hub) publish(key string, b []byte) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := 0
	for s := range h.sessions[key] {
		if s.enqueue(b) {
			n++
		}
	}
	return n
}

func (h *hub) countFor(key string) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.sessions[key])
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
