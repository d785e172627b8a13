// Package sdk is the stable contract a Herald channel plugin is written
// against.
//
// A plugin author imports only this module: implement Channel, declare the
// provider config as a tagged struct (ConfigFields, DecodeConfig), and call
// Serve from main. Run the conformance kit, package
// github.com/heraldhq/herald/sdk/plugintest, against the built binary. The
// wire protocol (gRPC over hashicorp/go-plugin, package herald.channel.v2)
// is hidden behind these types; the host side lives in package
// github.com/heraldhq/herald/sdk/host, which plugin authors never import.
//
// # Versions and compatibility
//
// The module github.com/heraldhq/herald/sdk follows semantic versioning
// (Version), released under tags sdk/vX.Y.Z of the Herald repository (go
// get github.com/heraldhq/herald/sdk@v1.0.0). Within major version 1 no
// exported name is removed or changes meaning, and every RPC takes a
// request struct and returns a response struct, so new fields can be added
// without breaking a plugin. Zero values of new fields keep the old
// behaviour.
//
// The wire protocol has its own version (ProtocolVersion), negotiated
// between host and plugin by go-plugin's VersionedPlugins. A host serves
// the current protocol and the one before it for at least one release:
// today's host runs plugins built for protocol 1 (the SDK before this
// module) and protocol 2. Optional features are negotiated as capabilities
// (Description.Capabilities, ConfigureRequest.HostCapabilities); plugin
// code never compares version numbers.
package sdk

import "context"

// Channel is what a channel plugin implements. The host drives it through
// these lifecycle steps:
//
//  1. launch: the host starts the plugin binary and completes the go-plugin
//     handshake (magic cookie, protocol version, AutoMTLS).
//  2. Describe: the host reads the static Description.
//  3. validate config: the host checks the operator's config against
//     Description.Config (unknown key, type, required, enum).
//  4. Configure: the plugin checks the meaning of the config and prepares
//     its provider client; a *ConfigError names the offending field.
//  5. Health: the host checks the provider before routing traffic, and
//     keeps checking: failed checks open the provider's circuit breaker,
//     so traffic goes to the channel's next provider until a check passes
//     and a probe send succeeds.
//  6. Send…: the host sends batches of at most Description.MaxBatch
//     deliveries; the plugin returns exactly one Result per Delivery.
//  7. kill: the host stops the process (Closer, if implemented, is called
//     first).
//
// Every method takes a request struct and returns a response struct, so
// that fields can be added to either without breaking a plugin.
type Channel interface {
	// Describe returns the plugin's static description.
	Describe(ctx context.Context, req DescribeRequest) (DescribeResponse, error)
	// Configure applies the operator's provider config. A config the
	// plugin refuses is an error that is (or wraps) a *ConfigError.
	Configure(ctx context.Context, req ConfigureRequest) (ConfigureResponse, error)
	// Send delivers a batch and returns exactly one Result per delivery,
	// keyed by DeliveryID. A non-nil error means the whole call failed and
	// the host moves every delivery of the batch to RETRY (or FAILED, when
	// the error is a PermanentError).
	Send(ctx context.Context, req SendRequest) (SendResponse, error)
	// Health reports on the provider (process liveness is go-plugin's Ping).
	Health(ctx context.Context, req HealthRequest) (HealthResponse, error)
}

// DescribeRequest asks for the plugin's description. It has no fields yet.
type DescribeRequest struct{}

// DescribeResponse carries the plugin's static description.
type DescribeResponse struct {
	// Description is the plugin's static description.
	Description Description
}

// ConfigureRequest carries the operator's config for one provider.
type ConfigureRequest struct {
	// ProviderName is the name the operator gave this provider instance.
	ProviderName string
	// Config is the provider config, already checked against the field
	// specs and typed as CheckConfig returns it (string, int, bool,
	// time.Duration, []string). DecodeConfig turns it into the plugin's
	// config struct.
	Config map[string]any
	// HostCapabilities lists optional features the host supports.
	HostCapabilities []string
}

// ConfigureResponse reports an accepted config. It has no fields yet; a
// refused config is Configure's error, a *ConfigError.
type ConfigureResponse struct{}

// SendRequest is one batch of deliveries.
type SendRequest struct {
	// Deliveries are the batch, at most Description.MaxBatch of them.
	Deliveries []Delivery
}

// SendResponse carries one result per delivery of the batch.
type SendResponse struct {
	// Results has exactly one entry per delivery, keyed by DeliveryID.
	Results []Result
}

// HealthRequest asks the plugin about its provider. It has no fields yet.
type HealthRequest struct{}

// HealthResponse is the plugin's view of its provider.
type HealthResponse struct {
	// Healthy is true when the provider can take traffic.
	Healthy bool
	// Message explains the state, especially when unhealthy.
	Message string
}
