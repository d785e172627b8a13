// Package delivery moves deliveries from the database through RabbitMQ to
// the channel plugins: the publisher (PENDING → PUBLISHED on confirm), the
// listeners (consume, claim, send through the plugin host, record, ack) and
// the retry poller (due RETRY and DEFERRED deliveries, expired leases).
package delivery

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/core/internal/store"
)

// Envelope is the body of one broker message: the attempts of one or more
// deliveries that share a routing key. Each delivery keeps its own state
// and idempotency in the database.
type Envelope struct {
	// V is the envelope version (1).
	V int `json:"v"`
	// Deliveries lists the delivery attempts the message carries.
	Deliveries []store.Ref `json:"deliveries"`
}

// MaxEnvelope bounds the deliveries one message may carry.
const MaxEnvelope = 1000

// DecodeEnvelope parses and checks a message body.
func DecodeEnvelope(body []byte) (Envelope, error) {
	var e Envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return e, fmt.Errorf("decode message: %w", err)
	}
	if e.V != 1 {
		return e, fmt.Errorf("decode message: unsupported envelope version %d", e.V)
	}
	if len(e.Deliveries) == 0 || len(e.Deliveries) > MaxEnvelope {
		return e, fmt.Errorf("decode message: %d deliveries (want 1..%d)", len(e.Deliveries), MaxEnvelope)
	}
	for i, r := range e.Deliveries {
		if len(r.ID) != 36 || r.Attempt < 1 {
			return e, fmt.Errorf("decode message: deliveries[%d]: bad id %q or attempt %d", i, r.ID, r.Attempt)
		}
	}
	return e, nil
}

// errNoProvider prompts the listener to retry: no plugin serves the channel.
var errNoProvider = errors.New("no provider serves the channel")
