// Package liveproto is what the core's live gateway and the WEBSOCKET
// channel plugin agree on: the exchange, the routing key of a user and the
// headers of a live message.
package liveproto

import (
	"crypto/sha256"
	"encoding/hex"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultExchange is the direct exchange live updates travel on.
const DefaultExchange = "herald.live"

// Header names of a live message: who it is for. A daemon checks them
// against its sessions' users, so a route-key collision cannot misdeliver.
const (
	HeaderTenant = "herald-tenant"
	HeaderUser   = "herald-user"
)

// RouteKey is the user's routing key on the live exchange: a hash, so that
// any tenant and user id fits the broker's 255-byte limit and the exchange
// never sees the ids.
func RouteKey(tenant, user string) string {
	h := sha256.Sum256([]byte(tenant + "\x00" + user))
	return hex.EncodeToString(h[:16])
}

// Message is the broker message that carries frame (a JSON object) to the
// user's sessions.
func Message(tenant, user string, frame []byte) amqp.Publishing {
	return amqp.Publishing{ContentType: "application/json", Body: frame,
		Headers: amqp.Table{HeaderTenant: tenant, HeaderUser: user}}
}

// DeclareExchange declares the live exchange (durable, direct); the
// gateway and publishers both do, with the same arguments.
func DeclareExchange(ch *amqp.Channel, name string) error {
	return ch.ExchangeDeclare(name, amqp.ExchangeDirect, true, false, false, false, nil)
}
