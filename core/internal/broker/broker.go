// Package broker keeps Herald's RabbitMQ connection alive (reconnect with
// backoff) and declares the topology: one durable topic exchange, durable
// queues and their bindings. Routing keys are "<recipient type>.<channel>".
package broker

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/core/internal/backoff"
)

// Queue is one durable queue with its bindings and consumer settings.
type Queue struct {
	Name        string
	Bindings    []string
	Prefetch    int
	Concurrency int
	// Quorum declares a quorum queue (replicated on a cluster's nodes)
	// instead of a classic one.
	Quorum bool
	// Setting is the config key that chose the queue's type, named when
	// the broker holds the queue with the other type (default
	// "amqp.queue_type").
	Setting string
}

// QueueTypeError reports a queue that exists on the broker with a type
// other than the one the config asks for. A queue's type cannot change:
// the operator drains and deletes the queue, or sets the config back; the
// connection retries until then and deliveries wait in the database.
type QueueTypeError struct {
	// Queue is the queue's name.
	Queue string
	// Want is the type the config asks for ("classic" or "quorum").
	Want string
	// Setting is the config key that asks for it.
	Setting string
	// Err is the broker's refusal (PRECONDITION_FAILED).
	Err error
}

func (e *QueueTypeError) Error() string {
	other := "quorum"
	if e.Want == "quorum" {
		other = "classic"
	}
	return fmt.Sprintf("%s: queue %q exists on the broker as a %s queue and cannot be declared as %s (a queue's type cannot change): "+
		"drain and delete it (rabbitmqctl delete_queue %s) to have it declared again as %s, or set %s back; broker: %v",
		e.Setting, e.Queue, other, e.Want, e.Queue, e.Want, e.Setting, e.Err)
}

func (e *QueueTypeError) Unwrap() error { return e.Err }

// Topology is what the broker must hold for Herald to work.
type Topology struct {
	Exchange string
	Queues   []Queue
}

// DefaultQueues returns one queue per channel: "herald.<channel>" (lower
// case) bound to "*.<CHANNEL>".
func DefaultQueues(channels []string) []Queue {
	qs := make([]Queue, 0, len(channels))
	for _, ch := range channels {
		qs = append(qs, Queue{Name: "herald." + strings.ToLower(ch), Bindings: []string{"*." + ch}})
	}
	return qs
}

// RoutingKey is the key a delivery for userType on channel is published
// with. A post to a place has no user type: its key is "place.<CHANNEL>",
// so that "*.<CHANNEL>" bindings match it (a topic word is never empty).
func RoutingKey(userType, channel string) string {
	if userType == "" {
		userType = PlaceRoutingWord
	}
	return userType + "." + channel
}

// PlaceRoutingWord stands for the user type in the routing key of a post
// to a place.
const PlaceRoutingWord = "place"

// Declare declares the exchange, queues and bindings on ch (idempotent).
func (t Topology) Declare(ch *amqp.Channel) error {
	if err := ch.ExchangeDeclare(t.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", t.Exchange, err)
	}
	for _, q := range t.Queues {
		// A classic queue is declared without x-queue-type, as before
		// quorum queues were an option, so queues declared then still
		// match.
		var args amqp.Table
		want := "classic"
		if q.Quorum {
			args = amqp.Table{"x-queue-type": "quorum"}
			want = "quorum"
		}
		if _, err := ch.QueueDeclare(q.Name, true, false, false, false, args); err != nil {
			var ae *amqp.Error
			if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed && strings.Contains(ae.Reason, "x-queue-type") {
				return &QueueTypeError{Queue: q.Name, Want: want, Setting: cmp.Or(q.Setting, "amqp.queue_type"), Err: err}
			}
			return fmt.Errorf("declare queue %s: %w", q.Name, err)
		}
		for _, b := range q.Bindings {
			if err := ch.QueueBind(q.Name, b, t.Exchange, false, nil); err != nil {
				return fmt.Errorf("bind queue %s to %s: %w", q.Name, b, err)
			}
		}
	}
	return nil
}

// Routable reports whether a routing key reaches at least one queue.
func (t Topology) Routable(key string) bool {
	for _, q := range t.Queues {
		for _, b := range q.Bindings {
			if topicMatch(b, key) {
				return true
			}
		}
	}
	return false
}

// topicMatch matches an AMQP topic pattern ("*" one word, "#" zero or more).
func topicMatch(pattern, key string) bool {
	return matchWords(strings.Split(pattern, "."), strings.Split(key, "."))
}

func matchWords(p, k []string) bool {
	if len(p) == 0 {
		return len(k) == 0
	}
	if p[0] == "#" {
		for i := 0; i <= len(k); i++ {
			if matchWords(p[1:], k[i:]) {
				return true
			}
		}
		return false
	}
	if len(k) == 0 {
		return false
	}
	if p[0] != "*" && p[0] != k[0] {
		return false
	}
	return matchWords(p[1:], k[1:])
}

// QueueNames returns the topology's queue names, sorted.
func (t Topology) QueueNames() []string {
	names := make([]string, 0, len(t.Queues))
	for _, q := range t.Queues {
		names = append(names, q.Name)
	}
	sort.Strings(names)
	return names
}

// ErrClosed is returned once the Conn is closed; callers stop.
var ErrClosed = errors.New("broker: connection closed")

// Conn is a RabbitMQ connection that redials with backoff when it drops and
// re-declares the topology on every new connection. Given the URLs of a
// cluster's nodes it connects to the first that answers, and after a lost
// connection starts with the next one: channels opened after that are on
// the new node, and callers that reopen their channels (publisher,
// listeners, live) carry on without a restart.
type Conn struct {
	urls []string
	tls  *tls.Config
	log  hclog.Logger

	topoMu sync.RWMutex
	topo   Topology

	mu       sync.Mutex
	mismatch *QueueTypeError // why the last connection attempt failed, if that
	conn     *amqp.Connection
	ready    chan struct{} // closed while conn is usable
	closed   bool
	stop     chan struct{}
	stopped  chan struct{}
}

// Dial starts keeping a connection to url. It returns at once; use
// Connection to wait for the broker.
func Dial(url string, topo Topology, log hclog.Logger) *Conn {
	return DialTLS(url, nil, topo, log)
}

// DialTLS is Dial with the TLS settings of an amqps:// URL: the CA roots
// the broker's certificate must chain to, a client certificate, the server
// name (default: the URL's host). A nil tlsConf keeps the client's defaults
// (the system's roots; the URL's cacertfile, certfile, keyfile and
// server_name_indication parameters). The certificate is always verified.
func DialTLS(url string, tlsConf *tls.Config, topo Topology, log hclog.Logger) *Conn {
	return DialNodes([]string{url}, tlsConf, topo, log)
}

// DialNodes is DialTLS with the URLs of several nodes of one cluster
// (amqp.urls): it connects to the first that answers, in order; after a
// lost connection it tries the next node first, so the one that failed is
// tried last. Every URL is tried before a backoff.
func DialNodes(urls []string, tlsConf *tls.Config, topo Topology, log hclog.Logger) *Conn {
	c := &Conn{urls: slices.Clone(urls), tls: tlsConf, topo: topo, log: log.Named("broker"), ready: make(chan struct{}), stop: make(chan struct{}), stopped: make(chan struct{})}
	go c.run()
	return c
}

// nodeName is the host:port of a broker URL, for logs (no credentials).
func nodeName(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(unparsable URL)"
	}
	return u.Host
}

// redial is the backoff between rounds of redials: 100 ms doubling up to
// 5 s, each wait drawn from [d, 1.5d) (1.25d ± 20 %).
var redial = backoff.Policy{Initial: 125 * time.Millisecond, Max: 6250 * time.Millisecond, Multiplier: 2, Jitter: 0.2}

func (c *Conn) run() {
	defer close(c.stopped)
	// rounds counts the rounds of every URL failing in a row; wait is the
	// delay after the current one.
	rounds, wait := 0, redial.Delay(1)
	next, failed := 0, 0 // the URL to try next; URLs failed in a row
	for {
		u := c.urls[next]
		next = (next + 1) % len(c.urls)
		conn, err := c.connect(u)
		if err != nil {
			var qte *QueueTypeError
			switch {
			case errors.As(err, &qte):
				// Not a broker that is down: retrying the next node
				// will not help, the queue is the cluster's.
				c.log.Error("broker queue type mismatch; deliveries wait in the database until it is resolved", "error", err, "node", nodeName(u), "in", wait)
			case certErr(err):
				// Not a broker that is down: this one is not who the
				// URL says, or is not signed by the CA configured.
				c.log.Error("broker TLS certificate refused (check amqp.tls_ca_file, and that the certificate names the host of amqp.url); retrying",
					"error", err, "node", nodeName(u), "in", wait)
			default:
				c.log.Warn("broker unavailable, retrying", "error", err, "node", nodeName(u), "in", wait)
			}
			c.mu.Lock()
			c.mismatch = qte
			c.mu.Unlock()
			failed++
			if failed < len(c.urls) && qte == nil {
				continue // another node may answer now
			}
			failed = 0
			select {
			case <-c.stop:
				return
			case <-time.After(wait):
			}
			rounds++
			wait = redial.Delay(rounds + 1)
			continue
		}
		rounds, wait, failed = 0, redial.Delay(1), 0
		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		c.mu.Lock()
		c.conn, c.mismatch = conn, nil
		close(c.ready)
		c.mu.Unlock()
		c.log.Info("broker connected", "node", nodeName(u))
		select {
		case <-c.stop:
			_ = conn.Close()
			return
		case err := <-closed:
			c.log.Warn("broker connection lost", "error", err, "node", nodeName(u))
		}
		c.mu.Lock()
		c.conn = nil
		c.ready = make(chan struct{})
		c.mu.Unlock()
	}
}

// certErr reports whether err is a refused TLS certificate.
func certErr(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid)
}

func (c *Conn) connect(u string) (*amqp.Connection, error) {
	cfg := amqp.Config{Heartbeat: 10 * time.Second, Properties: amqp.Table{"connection_name": "herald"}}
	if c.tls != nil {
		// The client fills in ServerName: give it a copy.
		cfg.TLSClientConfig = c.tls.Clone()
	}
	conn, err := amqp.DialConfig(u, cfg)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	defer ch.Close()
	if err := c.Topology().Declare(ch); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}

// Connected reports whether the Conn holds a usable connection to the
// broker now (false while it redials, and after Close).
func (c *Conn) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closed && c.conn != nil && !c.conn.IsClosed()
}

// QueueTypeMismatch returns the queue whose type kept the last connection
// attempt from declaring the topology, or nil.
func (c *Conn) QueueTypeMismatch() *QueueTypeError {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mismatch
}

// Connection waits until the broker is connected and returns the connection.
func (c *Conn) Connection(ctx context.Context) (*amqp.Connection, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		conn, ready := c.conn, c.ready
		c.mu.Unlock()
		if conn != nil && !conn.IsClosed() {
			return conn, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.stop:
			return nil, ErrClosed
		case <-ready:
		case <-time.After(time.Second):
		}
	}
}

// Channel opens a channel on the current connection, waiting for one.
func (c *Conn) Channel(ctx context.Context) (*amqp.Channel, error) {
	for {
		conn, err := c.Connection(ctx)
		if err != nil {
			return nil, err
		}
		ch, err := conn.Channel()
		if err == nil {
			return ch, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Topology returns the declared topology.
func (c *Conn) Topology() Topology {
	c.topoMu.RLock()
	defer c.topoMu.RUnlock()
	t := c.topo
	t.Queues = append([]Queue(nil), t.Queues...)
	return t
}

// AddQueues adds queues to the topology (a rules reload added channels)
// and declares them now if the broker is connected; every later connection
// declares them too. It returns the queues that were new.
func (c *Conn) AddQueues(ctx context.Context, qs []Queue) ([]Queue, error) {
	c.topoMu.Lock()
	var added []Queue
	for _, q := range qs {
		if !slices.ContainsFunc(c.topo.Queues, func(o Queue) bool { return o.Name == q.Name }) {
			c.topo.Queues = append(c.topo.Queues, q)
			added = append(added, q)
		}
	}
	t := Topology{Exchange: c.topo.Exchange, Queues: added}
	c.topoMu.Unlock()
	if len(added) == 0 {
		return nil, nil
	}
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if conn == nil || conn.IsClosed() {
		return added, nil // the next connection declares them
	}
	ch, err := conn.Channel()
	if err != nil {
		return added, err
	}
	defer ch.Close()
	return added, t.Declare(ch)
}

// Close closes the connection and stops redialing.
func (c *Conn) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	<-c.stopped
}
