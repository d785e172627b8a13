// Package live carries updates to users' open browser sessions, whichever
// `herald serve` holds them.
//
// A browser asks for a one-time ticket with its user token (POST
// /v1/live/tickets, the token in the Authorization header, never in a URL)
// and opens a WebSocket with it (GET /v1/live?ticket=...). The daemon that
// takes the session binds the user's route key to its own queue on the
// live exchange (a direct exchange, "herald.live"); anything published
// there under that key (the WEBSOCKET channel plugin's deliveries, inbox
// changes) reaches every daemon holding a session of the user, and each
// writes it to its sessions. A publisher that sets mandatory learns from
// the broker when no daemon holds a session of the user (the message is
// returned): the user is offline.
//
// Frames are JSON objects with a "type": "ready" when the session is
// registered (from then on, updates reach it), then whatever publishers
// send ("notification", ...).
package live

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/config/field"
	"github.com/heraldhq/herald/core/internal/httpguard"
	"github.com/heraldhq/herald/core/internal/metrics"
	"github.com/heraldhq/herald/core/internal/origins"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/internal/liveproto"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Frame types.
const (
	FrameReady = "ready"
)

// readLimit bounds what a browser may send: the server expects nothing but
// control frames, and reads only to answer pings and notice closes.
const readLimit = 4096

// RouteKey is the user's routing key on the live exchange.
func RouteKey(tenant, user string) string { return liveproto.RouteKey(tenant, user) }

// Config tunes live sessions: the daemon's live { ... } settings.
type Config struct {
	// Exchange is the direct exchange live updates travel on; the
	// WEBSOCKET plugin's exchange must be the same.
	Exchange string `koanf:"exchange"`
	// TicketTTL is how long a session ticket may wait to be redeemed.
	TicketTTL time.Duration `koanf:"ticket_ttl"`
	// AllowedOrigins are origin host patterns (app.example.com,
	// *.example.com) browsers may connect from besides the API's own host.
	AllowedOrigins []string `koanf:"allowed_origins"`
	// MaxSessionsPerUser caps one user's open sessions on one daemon.
	MaxSessionsPerUser int `koanf:"max_sessions_per_user"`
	// MaxSessions caps the open sessions of one daemon, every tenant's,
	// and is at most three quarters of http.max_conns (lower it is, when
	// larger): the last quarter of the connections is the reserve that
	// keeps POST /v1/events, the inbox API and the health checks served
	// however many sessions are open.
	MaxSessions int `koanf:"max_sessions"`
	// MaxSessionsPerTenant caps one tenant's open sessions on one daemon
	// (a tenant mints tokens for any user id, so the per-user cap does not
	// bound it); a tenant "ID" { max_sessions = N } block sets a tenant's
	// own.
	MaxSessionsPerTenant int `koanf:"max_sessions_per_tenant"`
	// MaxSessionsPerIP caps the open sessions from one client address (an
	// IPv4 address or an IPv6 /64; the TCP peer, so behind a reverse proxy
	// the proxy: raise it or set it to 0 there) on one daemon (0: no cap).
	MaxSessionsPerIP int `koanf:"max_sessions_per_ip"`
	// Tenants holds tenants' own caps (`tenant "acme" { max_sessions = N
	// }` blocks), keyed by tenant id.
	Tenants map[string]TenantConfig `koanf:"tenant"`
	// PingInterval is the sessions' keepalive period (at least 1s).
	PingInterval time.Duration `koanf:"ping_interval"`
	// WriteTimeout bounds writing one frame to a browser.
	WriteTimeout time.Duration `koanf:"write_timeout"`
	// SendBuffer is the frames queued per session; a session whose queue
	// is full is dropped as a slow consumer.
	SendBuffer int `koanf:"send_buffer"`
}

// TenantConfig is one tenant's own live caps, set by a `tenant "ID" {
// ... }` block in live.
type TenantConfig struct {
	// MaxSessions is the tenant's max_sessions_per_tenant (at least 1).
	MaxSessions int `koanf:"max_sessions"`
}

// DefaultConfig returns the live gateway's default settings.
func DefaultConfig() Config {
	return Config{Exchange: liveproto.DefaultExchange, TicketTTL: 30 * time.Second, AllowedOrigins: []string{}, MaxSessionsPerUser: 16,
		MaxSessions: 512, MaxSessionsPerTenant: 256, MaxSessionsPerIP: 64,
		PingInterval: 30 * time.Second, WriteTimeout: 10 * time.Second, SendBuffer: 64}
}

// tenantCap is the tenant's max_sessions_per_tenant, its own when set.
func (c Config) tenantCap(tenant string) int {
	if t, ok := c.Tenants[tenant]; ok && t.MaxSessions > 0 {
		return t.MaxSessions
	}
	return c.MaxSessionsPerTenant
}

// Validate checks the settings; it returns field.Errors naming the keys.
func (c Config) Validate() error {
	var errs field.Errors
	errs.NotEmpty("exchange", c.Exchange)
	errs.PositiveDuration("ticket_ttl", c.TicketTTL)
	errs.Positive("max_sessions_per_user", c.MaxSessionsPerUser)
	errs.Positive("max_sessions", c.MaxSessions)
	errs.Positive("max_sessions_per_tenant", c.MaxSessionsPerTenant)
	if c.MaxSessionsPerIP < 0 {
		errs.Add("max_sessions_per_ip", "must not be negative (0: no cap), got %d", c.MaxSessionsPerIP)
	}
	for id, t := range c.Tenants {
		if err := store.ValidID("tenant", id); err != nil {
			errs.Add(field.Join("tenant", id), "%v", err)
		}
		errs.Positive(field.Join("tenant", id, "max_sessions"), t.MaxSessions)
	}
	errs.PositiveDuration("ping_interval", c.PingInterval)
	if c.PingInterval > 0 && c.PingInterval < time.Second {
		errs.Add("ping_interval", "must be at least 1s")
	}
	errs.PositiveDuration("write_timeout", c.WriteTimeout)
	errs.Positive("send_buffer", c.SendBuffer)
	return errs.Err()
}

// setDefaults gives every setting left zero its default.
func (c *Config) setDefaults() {
	d := DefaultConfig()
	if c.Exchange == "" {
		c.Exchange = d.Exchange
	}
	if c.TicketTTL <= 0 {
		c.TicketTTL = d.TicketTTL
	}
	if c.MaxSessionsPerUser <= 0 {
		c.MaxSessionsPerUser = d.MaxSessionsPerUser
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = d.MaxSessions
	}
	if c.MaxSessionsPerTenant <= 0 {
		c.MaxSessionsPerTenant = d.MaxSessionsPerTenant
	}
	if c.PingInterval <= 0 {
		c.PingInterval = d.PingInterval
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.SendBuffer <= 0 {
		c.SendBuffer = d.SendBuffer
	}
}

// Server is one daemon's live gateway.
type Server struct {
	cfg      Config
	pool     *pgxpool.Pool
	verifier *auth.Verifier
	conn     *broker.Conn
	log      hclog.Logger
	hub      *hub

	mu      sync.Mutex
	refs    map[string]int // route key -> sessions on this daemon
	ch      *amqp.Channel  // the consuming channel, nil while down
	queue   string
	chReady chan struct{} // closed while ch is usable

	pubMu sync.Mutex
	pubCh *amqp.Channel // Notify's channel

	// origins, when set, accepts sessions from the origins the ticket's
	// tenant allows (besides the API's own host and AllowedOrigins).
	origins OriginPolicy
}

// OriginPolicy tells which browser origins a tenant allows (package
// cors). Browsers apply no CORS to WebSockets: the gateway checks a
// session's Origin itself.
type OriginPolicy interface {
	TenantAllows(ctx context.Context, tenant, origin string) (bool, error)
}

// SetOrigins makes the gateway accept sessions from the origins the
// ticket's tenant allows; call it before Handler serves.
func (s *Server) SetOrigins(p OriginPolicy) { s.origins = p }

// New returns the gateway. pool runs as the API role (tickets are stored
// under the user's tenant); conn is the daemon's broker connection.
func New(cfg Config, pool *pgxpool.Pool, verifier *auth.Verifier, conn *broker.Conn, log hclog.Logger) *Server {
	cfg.setDefaults()
	return &Server{cfg: cfg, pool: pool, verifier: verifier, conn: conn, log: log.Named("live"), hub: newHub(),
		refs: map[string]int{}, chReady: make(chan struct{})}
}

// Handler serves POST /v1/live/tickets and GET /v1/live.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/live/tickets", s.ticket)
	mux.HandleFunc("GET /v1/live", s.connect)
	return api.MethodAware(mux) // a wrong method: 405 problem with Allow
}

// SetMetrics counts the sessions (by tenant) and the refusals in m; call
// it before serving.
func (s *Server) SetMetrics(m *metrics.Metrics) { s.hub.m = m }

// Sessions returns how many sessions this daemon holds.
func (s *Server) Sessions() int { return s.hub.count() }

// Ticket is the answer to POST /v1/live/tickets.
type Ticket struct {
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expires_at"`
	// URL is the path to open the WebSocket at.
	URL string `json:"url"`
}

func (s *Server) ticket(w http.ResponseWriter, r *http.Request) {
	u, ok := s.verifier.Request(w, r, s.log)
	if !ok {
		return
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		s.internal(w, err)
		return
	}
	t := Ticket{Ticket: hex.EncodeToString(b)}
	t.URL = "/v1/live?ticket=" + t.Ticket
	err := store.InTenant(r.Context(), s.pool, u.Tenant, u.Project, func(tx pgx.Tx) error {
		var err error
		t.ExpiresAt, err = store.CreateTicket(r.Context(), tx, t.Ticket,
			store.Ticket{TenantID: u.Tenant, UserID: u.UserID, UserType: u.UserType, ProjectID: u.Project}, s.cfg.TicketTTL)
		return err
	})
	if err != nil {
		s.internal(w, err)
		return
	}
	api.WriteJSON(w, http.StatusCreated, t)
}

// readyFrame is the first frame of a session.
type readyFrame struct {
	Type   string `json:"type"`
	Tenant string `json:"tenant"`
	UserID string `json:"user_id"`
}

func (s *Server) connect(w http.ResponseWriter, r *http.Request) {
	raw := r.URL.Query().Get("ticket")
	if raw == "" || len(raw) > 128 {
		api.Problem(w, http.StatusUnauthorized, "unauthorized", "a ticket is required: POST /v1/live/tickets with your token, then GET /v1/live?ticket=...", "ticket")
		return
	}
	t, err := store.RedeemTicket(r.Context(), s.pool, raw)
	if errors.Is(err, store.ErrNotFound) {
		api.Problem(w, http.StatusUnauthorized, "unauthorized", "unknown, used or expired ticket; ask for a new one", "ticket")
		return
	}
	if err != nil {
		s.internal(w, err)
		return
	}
	opts := &websocket.AcceptOptions{OriginPatterns: s.cfg.AllowedOrigins}
	if vals := r.Header.Values("Origin"); len(vals) > 1 {
		api.Problem(w, http.StatusForbidden, "forbidden", "the request carries more than one Origin header", "Origin")
		return
	} else if len(vals) == 1 && s.origins != nil && origins.Canonical(vals[0]) {
		// The ticket's tenant allows the origin: accepted as such
		// (websocket.Accept's own check knows only the API's host and
		// AllowedOrigins).
		ok, err := s.origins.TenantAllows(r.Context(), t.TenantID, vals[0])
		if err != nil {
			s.internal(w, err)
			return
		}
		opts.InsecureSkipVerify = ok
	}
	key := RouteKey(t.TenantID, t.UserID)
	ip := httpguard.ClientKey(r.RemoteAddr)
	if detail := s.hub.reserve(key, t.TenantID, ip, s.cfg); detail != "" {
		// Before the handshake: a 429 the browser's WebSocket API reports
		// as a failed connection, and the connection closes.
		w.Header().Set("Retry-After", "5")
		w.Header().Set("Connection", "close")
		api.Problem(w, http.StatusTooManyRequests, "too many sessions", detail+"; close a session or retry later with a new ticket", "")
		return
	}
	defer s.hub.unreserve(key, t.TenantID, ip)
	rw := &refusal{ResponseWriter: w}
	conn, err := websocket.Accept(rw, r, opts)
	if err != nil {
		if rw.status != 0 {
			// Accept refused the handshake (not an upgrade, a foreign
			// Origin, ...): answer its refusal as a problem document.
			field := ""
			if rw.status == http.StatusForbidden {
				field = "Origin"
			}
			api.Problem(w, rw.status, strings.ToLower(http.StatusText(rw.status)), err.Error(), field)
		}
		return
	}
	conn.SetReadLimit(readLimit)
	sess := newSession(conn, s.cfg.SendBuffer)
	sess.tenant, sess.user, sess.project = t.TenantID, t.UserID, t.ProjectID
	ready, _ := json.Marshal(readyFrame{Type: FrameReady, Tenant: t.TenantID, UserID: t.UserID})
	sess.send <- ready // the queue is empty and at least 1 long
	if !s.hub.add(key, sess) {
		_ = conn.Close(websocket.StatusGoingAway, "server shutting down")
		return
	}
	defer s.hub.remove(key, sess)
	// The binding is in place before the browser reads "ready": from then
	// on, whatever is published for the user reaches this session.
	s.acquire(r.Context(), key)
	defer s.release(key)
	sess.run(s.cfg.PingInterval, s.cfg.WriteTimeout)
}

// acquire counts a session of key and binds key to this daemon's queue
// when it is the first (or leaves it to the next connect while the broker
// is down).
func (s *Server) acquire(ctx context.Context, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refs[key]++
	if s.refs[key] == 1 && s.ch != nil {
		if err := s.ch.QueueBind(s.queue, key, s.cfg.Exchange, false, nil); err != nil {
			s.log.Warn("live: bind failed; the session gets updates once the broker is back", "error", err)
		}
	}
}

// release uncounts a session of key and unbinds key after the last.
func (s *Server) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refs[key]--
	if s.refs[key] > 0 {
		return
	}
	delete(s.refs, key)
	if s.ch != nil {
		if err := s.ch.QueueUnbind(s.queue, key, s.cfg.Exchange, nil); err != nil {
			s.log.Debug("live: unbind failed", "error", err)
		}
	}
}

// Run consumes this daemon's live queue until ctx ends, reconnecting
// after broker outages (and binding the keys of the sessions open then).
// Sessions are closed with "going away" when it returns.
func (s *Server) Run(ctx context.Context) error {
	defer s.shutdown()
	for {
		err := s.consume(ctx)
		if ctx.Err() != nil {
			return nil
		}
		s.log.Warn("live: broker channel lost; reconnecting", "error", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (s *Server) consume(ctx context.Context) error {
	ch, err := s.conn.Channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := liveproto.DeclareExchange(ch, s.cfg.Exchange); err != nil {
		return fmt.Errorf("declare %s: %w", s.cfg.Exchange, err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, amqp.Table{"x-queue-type": "classic"})
	if err != nil {
		return fmt.Errorf("declare live queue: %w", err)
	}
	msgs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume live queue: %w", err)
	}
	s.mu.Lock()
	for key := range s.refs {
		if err := ch.QueueBind(q.Name, key, s.cfg.Exchange, false, nil); err != nil {
			s.mu.Unlock()
			return fmt.Errorf("bind: %w", err)
		}
	}
	s.ch, s.queue = ch, q.Name
	close(s.chReady)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.ch, s.queue = nil, ""
		s.chReady = make(chan struct{})
		s.mu.Unlock()
	}()
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-closed:
			return err
		case m, ok := <-msgs:
			if !ok {
				return errors.New("live queue consumer ended")
			}
			tenant, _ := m.Headers[liveproto.HeaderTenant].(string)
			user, _ := m.Headers[liveproto.HeaderUser].(string)
			if RouteKey(tenant, user) != m.RoutingKey {
				continue
			}
			s.hub.publishTo(m.RoutingKey, tenant, user, m.Body, func(project string) []byte {
				return s.scoped(ctx, tenant, user, project, m.Body)
			})
		}
	}
}

// canonicalUUID reports whether id is a UUID in its canonical form (as
// notification ids are written), which PostgreSQL reads back the same.
func canonicalUUID(id string) bool {
	u, err := uuid.Parse(id)
	return err == nil && u.String() == id
}

// maxScopedIDs bounds the notification ids of one frame that scoped
// checks; a frame naming more reaches no project-limited session.
const maxScopedIDs = 1000

// scoped is frame as a session limited to project may see it: a frame
// reaches such a session only when it names notifications
// (notification_id, notification_ids) and the user has them in project
// (checked in the database, under row-level security with the tenant and
// project set); notification_ids keeps only those, and the unread count
// (which may count every project) is dropped, so the page reads its own
// back. nil: nothing of frame belongs to project.
func (s *Server) scoped(ctx context.Context, tenant, user, project string, frame []byte) []byte {
	var f map[string]json.RawMessage
	if json.Unmarshal(frame, &f) != nil {
		return nil
	}
	var one string
	var many []string
	_, hasOne := f["notification_id"]
	_, hasMany := f["notification_ids"]
	if !hasOne && !hasMany {
		return nil
	}
	if hasOne && (json.Unmarshal(f["notification_id"], &one) != nil || !canonicalUUID(one)) {
		return nil
	}
	if hasMany && json.Unmarshal(f["notification_ids"], &many) != nil {
		return nil
	}
	ids := make([]string, 0, len(many)+1)
	if hasOne {
		ids = append(ids, one)
	}
	for _, id := range many {
		if canonicalUUID(id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 || len(ids) > maxScopedIDs {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	visible := map[string]bool{}
	err := store.InTenant(qctx, s.pool, tenant, project, func(tx pgx.Tx) error {
		rows, err := tx.Query(qctx, `SELECT notification_id::text FROM notifications
			WHERE tenant_id = $1 AND user_id = $2 AND project_id = $3 AND notification_id = ANY($4::uuid[])`, tenant, user, project, ids)
		if err != nil {
			return err
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, id := range got {
			visible[id] = true
		}
		return err
	})
	if err != nil {
		s.log.Warn("live: cannot check a frame's project; project-limited sessions do not get it", "error", err)
		return nil
	}
	if hasOne && !visible[one] {
		return nil
	}
	if hasMany {
		kept := []string{}
		for _, id := range many {
			if visible[id] {
				kept = append(kept, id)
			}
		}
		if len(kept) == 0 && !hasOne {
			return nil
		}
		f["notification_ids"], _ = json.Marshal(kept)
	}
	delete(f, "unread")
	out, err := json.Marshal(f)
	if err != nil {
		return nil
	}
	return out
}

// Ready waits until the gateway consumes its queue (tests and readiness).
func (s *Server) Ready(ctx context.Context) error {
	s.mu.Lock()
	ready := s.chReady
	s.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Server) shutdown() {
	for _, sess := range s.hub.closeAll() {
		sess.close(websocket.StatusGoingAway, "server shutting down")
	}
	done := make(chan struct{})
	go func() { s.hub.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

// Publish sends frame to every session of the user on any daemon, best
// effort: without mandatory and confirms nobody learns whether a daemon
// held a session (the WEBSOCKET plugin publishes with both).
func Publish(ctx context.Context, ch *amqp.Channel, exchange, tenant, user string, frame []byte) error {
	return ch.PublishWithContext(ctx, exchange, RouteKey(tenant, user), false, false, liveproto.Message(tenant, user, frame))
}

func (s *Server) internal(w http.ResponseWriter, err error) {
	s.log.Error("request failed", "error", err)
	api.Problem(w, http.StatusInternalServerError, "internal error", "the request could not be completed; it is safe to retry", "")
}

// Notify sends frame to the user's sessions on every daemon, best effort
// (inbox.Notifier): a broker that is down loses the frame, not the
// change, which the page reads again when its session reconnects.
func (s *Server) Notify(ctx context.Context, tenant, user string, frame []byte) {
	if s.conn == nil {
		return
	}
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if s.pubCh == nil || s.pubCh.IsClosed() {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		ch, err := s.conn.Channel(cctx)
		if err != nil {
			s.log.Debug("live: no broker channel to notify", "error", err)
			return
		}
		if err := liveproto.DeclareExchange(ch, s.cfg.Exchange); err != nil {
			_ = ch.Close()
			return
		}
		s.pubCh = ch
	}
	if err := Publish(ctx, s.pubCh, s.cfg.Exchange, tenant, user, frame); err != nil {
		s.log.Debug("live: notify failed", "error", err)
	}
}

// refusal is the ResponseWriter websocket.Accept writes to: it holds back
// an error status and its text body, so that connect answers a problem
// document instead; the upgrade itself goes through (Unwrap, for Hijack).
type refusal struct {
	http.ResponseWriter
	status int
}

func (r *refusal) WriteHeader(code int) {
	if code >= http.StatusBadRequest {
		r.status = code
		return
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *refusal) Write(b []byte) (int, error) {
	if r.status != 0 {
		return len(b), nil
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets websocket.Accept reach the http.Hijacker.
func (r *refusal) Unwrap() http.ResponseWriter { return r.ResponseWriter }
