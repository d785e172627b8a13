// Package host is the Herald host's side of the plugin protocol: the
// go-plugin plugin set to launch a channel plugin with, and the Client a
// dispensed plugin is. Plugin authors never import it; they use package sdk.
//
//	client := plugin.NewClient(&plugin.ClientConfig{
//		HandshakeConfig:  sdk.Handshake,
//		VersionedPlugins: host.PluginSet(),
//		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
//		AutoMTLS:         true,
//		Cmd:              exec.Command(path),
//	})
//	rpc, err := client.Client()
//	...
//	ch, err := host.Dispense(rpc)
//
// The host serves every version in ProtocolVersions: plugins built with
// this SDK negotiate sdk.ProtocolVersion (2); plugins built before SDK v1
// negotiate 1 and are spoken to in herald.channel.v1, their outcomes mapped
// to today's.
//
// The package holds the whole host side, so that package sdk holds only
// what a plugin author needs: client.go is the gRPC client (both protocol
// versions), trace.go sends the caller's trace context with each Send, and
// the sdk module's internal/wire converts the host's requests and the
// plugin's responses.
package host

import (
	"fmt"

	"github.com/hashicorp/go-plugin"

	"github.com/heraldhq/herald/sdk"
)

// DispenseName is the name the channel plugin is dispensed under in the
// plugin set (plugin.ClientProtocol.Dispense(host.DispenseName)).
const DispenseName = "channel"

// ProtocolVersions lists the protocol versions the host serves, oldest
// first; the last is sdk.ProtocolVersion.
var ProtocolVersions = []int{1, sdk.ProtocolVersion}

// ErrPluginExited is returned by a Client when the plugin process exited
// (or its connection broke) during a call. It prompts the caller to move
// every delivery of the batch to RETRY and restart the plugin with backoff.
// Test for it with errors.Is; sdk.IsRetryable reports true for it.
var ErrPluginExited error = exitedError{}

// exitedError is ErrPluginExited: retryable by the sdk's classification
// (Retryable() bool).
type exitedError struct{}

func (exitedError) Error() string   { return "plugin exited" }
func (exitedError) Retryable() bool { return true }

// PluginSet returns the VersionedPlugins a host puts in
// plugin.ClientConfig: one entry per version of ProtocolVersions.
func PluginSet() map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		1:                   {DispenseName: &channelPluginV1{}},
		sdk.ProtocolVersion: {DispenseName: &channelPlugin{}},
	}
}

// Client is a dispensed channel plugin: an sdk.Channel whose methods call
// the plugin process. Transport failures come back as errors wrapping
// ErrPluginExited (the plugin is gone) or the caller's context error;
// outcomes travel as data in sdk.SendResponse.
type Client interface {
	sdk.Channel
	// Done is closed when the plugin process has exited.
	Done() <-chan struct{}
	// ProtocolVersion is the protocol version negotiated with the plugin.
	ProtocolVersion() int
}

// Dispense dispenses the channel plugin from a started go-plugin client.
func Dispense(rpc plugin.ClientProtocol) (Client, error) {
	raw, err := rpc.Dispense(DispenseName)
	if err != nil {
		return nil, fmt.Errorf("dispense: %w", err)
	}
	c, ok := raw.(Client)
	if !ok {
		return nil, fmt.Errorf("dispense: got %T, not a host.Client", raw)
	}
	return c, nil
}
