// Package channel holds what a channel is, as the rules configure it and
// the plugin host runs it: its providers, its class (best effort or
// persistent), the user types it supports, its circuit-breaker settings
// and its retry policy (retry.go, the one RetryPolicy of the daemon). It
// does no I/O; the rules engine, the plugin host, the relay and the
// delivery listener share it.
package channel

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Provider is one plugin instance serving a channel.
type Provider struct {
	// Name is unique within the channel; defaults to the plugin name.
	Name string
	// Plugin is the binary's short name: "email" runs herald-plugin-email.
	Plugin string
	// Priority orders failover: lower is tried first.
	Priority int
	// Checksum is the binary's expected SHA-256 (hex), optional.
	Checksum string
	// Config is passed to the plugin's Configure after the host checked it
	// against the plugin's field specs. It may hold secrets (resolved from
	// env: and file: references): never print it; String leaves it out.
	Config map[string]any
}

// String names the provider and lists its config keys, not their values,
// so that a provider printed or logged by mistake shows no secret.
func (p Provider) String() string {
	keys := make([]string, 0, len(p.Config))
	for k := range p.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return fmt.Sprintf("%s (plugin %s, priority %d, config keys [%s])", p.Name, p.Plugin, p.Priority, strings.Join(keys, " "))
}

// Config is the configured behaviour of one channel.
type Config struct {
	Name string
	// Set is what the rules file says of the channel's class, quiet hours
	// and user types; what it leaves unset comes from what the channel's
	// plugin declares (see Resolve, class.go).
	Set Overrides
	// Resolved is the class, intrusiveness and user types in force, each
	// with where it came from. rules.New fills it from Set alone;
	// RuleSet.WithDeclared fills it again with the plugins' declarations.
	Resolved Resolved
	// Retry is the channel's retry policy: the channel's own, else the
	// rules' defaults. A best-effort channel is tried once whatever it
	// says (Resolve sets MaxAttempts to 1).
	Retry     RetryPolicy
	Providers []Provider
	// Breaker tunes the circuit breaker that fails over between the
	// channel's providers.
	Breaker Breaker
	// TextFormat is the markup the channel's provider reads in text:
	// TextPlain, or TextSlack (Slack mrkdwn), where the values templates
	// interpolate are escaped so that a payload cannot mention <!channel>
	// or forge a link. Empty: TextSlack when a provider's plugin is
	// "slack", TextPlain otherwise.
	TextFormat string
	// Place marks a channel whose destination is a place rather than a
	// person (a Slack channel, a webhook, a Teams room): events address
	// it with a post block, once per event per destination, never
	// through an audience's recipients (rules: place = true).
	Place bool
}

// Inbox is the pseudo-channel a per_digest inbox's items go by where a
// channel's name would (their deliveries rows and digest windows): it
// starts with "@", which no channel a rule may use does. The relay writes
// the items under it, the flush of such a window writes one inbox row, not
// a delivery, and the rules engine refuses a channel of that name.
const Inbox = "@inbox"

// Text formats of a channel.
const (
	TextPlain = "plain"
	TextSlack = "slack"
)

// Breaker is a channel's circuit-breaker tuning. Zero fields take the
// plugin host's defaults.
type Breaker struct {
	// Cooldown is how long an open circuit keeps traffic away from a
	// provider before one probe send is let through (the host's default
	// is 10s).
	Cooldown time.Duration
}
