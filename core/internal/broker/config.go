package broker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"

	"github.com/heraldhq/herald/core/internal/config/field"
)

// Config is the RabbitMQ connection and topology: the daemon's amqp
// { ... } settings.
type Config struct {
	// URL is the broker URL: amqp://, or amqps:// for TLS. With urls set
	// it is the first of them.
	URL string `koanf:"url"`
	// URLs are the nodes of a RabbitMQ cluster, one URL each (same scheme,
	// credentials and vhost, as a rule). Herald connects to the first that
	// answers, in order, and after a lost connection starts with the next
	// one, so a dead node is tried last. Give url or urls, not both; in the
	// environment, comma-separated.
	URLs []string `koanf:"urls"`
	// QueueType is the type of every delivery queue Herald declares:
	// "classic" or "quorum" (replicated on the cluster's nodes: a queue
	// survives the loss of a minority of them). A queue's type cannot
	// change once it exists: RabbitMQ refuses the declaration, and Herald
	// logs an error naming this setting and the queue, which is also the
	// reason GET /admin/v1/ready gives. The connection is retried (the
	// deliveries wait in the database) until the queue is drained and
	// deleted (rabbitmqctl delete_queue) or the setting is put back.
	QueueType string `koanf:"queue_type"`
	// TLSCAFile is a PEM file of the CA certificates that sign the broker's
	// certificate (amqps:// only; empty: the system's roots). The broker's
	// certificate must also name the URL's host (or tls_server_name).
	// Relative to the config file.
	TLSCAFile string `koanf:"tls_ca_file"`
	// TLSCertFile is a PEM client certificate, for brokers that want one
	// (amqps:// only; with tls_key_file). Relative to the config file.
	TLSCertFile string `koanf:"tls_cert_file"`
	// TLSKeyFile is the PEM key of tls_cert_file (both or neither).
	// Relative to the config file.
	TLSKeyFile string `koanf:"tls_key_file"`
	// TLSServerName is the name the broker's certificate must hold when it
	// is not the URL's host (empty: the URL's host).
	TLSServerName string `koanf:"tls_server_name"`
	// Exchange is the durable topic exchange deliveries are published to,
	// each with the routing key "<user type>.<channel>".
	Exchange string `koanf:"exchange"`
	// Queues maps the names of durable queues to their bindings and
	// consumer settings (`queue "name" { ... }` blocks). With none, one
	// queue per channel of the rules is declared: "herald.<channel>" bound
	// to "*.<CHANNEL>".
	Queues map[string]QueueConfig `koanf:"queue"`
}

// QueueConfig is one durable queue of amqp.queue, its bindings and its
// consumers.
type QueueConfig struct {
	// Bindings are routing-key patterns; keys are "<user type>.<channel>".
	Bindings []string `koanf:"bindings"`
	// Prefetch is the consumer's prefetch count (0: the listener's
	// default, 20).
	Prefetch int `koanf:"prefetch"`
	// Concurrency is the number of goroutines handling messages (0: the
	// listener's default, 4).
	Concurrency int `koanf:"concurrency"`
	// Quorum declares this queue as a quorum queue whatever
	// amqp.queue_type says.
	Quorum bool `koanf:"quorum"`
}

// The values of amqp.queue_type.
const (
	QueueClassic = "classic"
	QueueQuorum  = "quorum"
)

// DefaultConfig returns the broker's default settings.
func DefaultConfig() Config {
	return Config{URL: "amqp://guest:guest@127.0.0.1:5672/", URLs: []string{}, QueueType: QueueClassic, Exchange: "herald.deliveries"}
}

// Validate checks the settings; it returns field.Errors naming the keys.
// It never repeats a URL (which may hold a password).
func (c Config) Validate() error {
	var errs field.Errors
	if len(c.URLs) > 0 {
		for i, u := range c.URLs {
			key := fmt.Sprintf("urls[%d]", i)
			if u == "" {
				errs.Add(key, "must not be empty")
			} else if err := c.checkURL(u); err != nil {
				errs.Add(key, "%v", err)
			}
		}
	} else if c.URL == "" {
		errs.Add("url", "must not be empty")
	} else if err := c.checkURL(c.URL); err != nil {
		errs.Add("url", "%v", err)
	}
	switch c.QueueType {
	case QueueClassic, QueueQuorum:
	default:
		errs.Add("queue_type", "unknown queue type %q (want %q or %q)", c.QueueType, QueueClassic, QueueQuorum)
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs.Add("tls_cert_file", "give amqp.tls_cert_file and amqp.tls_key_file together")
	}
	errs.NotEmpty("exchange", c.Exchange)
	names := make([]string, 0, len(c.Queues))
	for n := range c.Queues {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		q := c.Queues[n]
		if len(q.Bindings) == 0 {
			errs.Add("queue."+n+".bindings", "needs at least one routing-key pattern")
		}
		if q.Prefetch < 0 || q.Concurrency < 0 {
			errs.Add("queue."+n, "prefetch and concurrency must not be negative")
		}
	}
	return errs.Err()
}

// BrokerURLs returns the broker URLs to connect to, in order: amqp.urls,
// or amqp.url alone.
func (c Config) BrokerURLs() []string {
	if len(c.URLs) > 0 {
		return c.URLs
	}
	return []string{c.URL}
}

// checkURL checks the syntax of a broker URL without repeating the URL
// (and its password) in the error, and that the TLS settings fit its
// scheme.
func (c Config) checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("not a valid URL (%v); percent-encode reserved characters in the user name and password", err)
	}
	switch u.Scheme {
	case "amqp":
		if c.TLSCAFile != "" || c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSServerName != "" {
			return errors.New("amqp.tls_* settings need an amqps:// URL")
		}
	case "amqps":
	default:
		return fmt.Errorf("scheme %q: want amqp:// or amqps://", u.Scheme)
	}
	return nil
}

// TLSConfig returns the TLS settings for an amqps:// URL: the CA file's
// roots (the system's when none is given), the client certificate and the
// server name. It returns nil when no tls_* key is set, so that the AMQP
// client's defaults apply (the system's roots, the URL's host).
func (c Config) TLSConfig() (*tls.Config, error) {
	if c.TLSCAFile == "" && c.TLSCertFile == "" && c.TLSServerName == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TLSServerName}
	if c.TLSCAFile != "" {
		pem, err := os.ReadFile(c.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("amqp.tls_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("amqp.tls_ca_file: %s holds no PEM certificate", c.TLSCAFile)
		}
		tc.RootCAs = pool
	}
	if c.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("amqp.tls_cert_file/amqp.tls_key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
