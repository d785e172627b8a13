// Package sdk is the stable contract a Herald channel plugin is written against.
//
// A plugin author imports only this package, implements Channel and calls Serve
// from main. The wire protocol (gRPC over hashicorp/go-plugin, package
// herald.channel.v1) is an implementation detail hidden behind these types.
package sdk

import (
	"context"
	"time"

	"github.com/heraldhq/herald/sdk/internal/contract"
)

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
type Channel interface {
	// Describe returns the plugin's static description.
	Describe(ctx context.Context) (Description, error)
	// Configure applies the operator's provider config.
	Configure(ctx context.Context, req ConfigureRequest) error
	// Send delivers a batch and returns exactly one Result per delivery,
	// keyed by DeliveryID. A non-nil error means the whole call failed and
	// the host moves every delivery of the batch to RETRY.
	Send(ctx context.Context, batch []Delivery) ([]Result, error)
	// Health reports on the provider (process liveness is go-plugin's Ping).
	Health(ctx context.Context) (HealthReport, error)
}

// The public types below are defined in sdk/internal/contract (so that the
// wire converters can use them without an import cycle) and re-exported here
// as aliases: sdk.Delivery and contract.Delivery are the same type.

// Class says whether a channel's deliveries are retried: Persistent
// deliveries are retried until SENT or attempts run out, BestEffort ones are
// tried once. Its String method returns "persistent" or "best_effort".
type Class = contract.Class

// Class values.
const (
	// Persistent deliveries are retried until SENT or attempts run out.
	Persistent = contract.Persistent
	// BestEffort deliveries are tried once and never retried.
	BestEffort = contract.BestEffort
)

// FieldType is the type of one config field a plugin declares.
type FieldType = contract.FieldType

// Field types a plugin may declare. CheckConfig turns values into string,
// int, bool, time.Duration and []string respectively.
const (
	FieldString   = contract.FieldString
	FieldInt      = contract.FieldInt
	FieldBool     = contract.FieldBool
	FieldDuration = contract.FieldDuration
	FieldList     = contract.FieldList
)

// FieldSpec declares one config field of a plugin: Name, Type, Required,
// Secret, Default (a string in the field's syntax, "" for none), Enum and
// Description.
type FieldSpec = contract.FieldSpec

// AnyChannel is the Description.ChannelType of a plugin that may serve any
// channel (the test sink); the host accepts it for every channel.
const AnyChannel = "*"

// Description is the static description of a plugin: ChannelType, Provider,
// PluginVersion, APIVersions, UserTypes, Class, MaxBatch (0 means 1),
// Config (field specs), Capabilities and SDKVersion (filled by the SDK).
type Description = contract.Description

// ConfigureRequest carries the operator's config for one provider:
// ProviderName, Config (already checked against the FieldSpecs and typed as
// CheckConfig returns it) and HostCapabilities.
type ConfigureRequest = contract.ConfigureRequest

// Recipient is who a delivery goes to, with the addresses a channel needs.
type Recipient = contract.Recipient

// Content is the rendered message for one channel.
type Content = contract.Content

// Delivery is one message for one recipient on one channel. DeliveryID keys
// the result; IdempotencyKey is stable across retries and should be passed to
// providers that support one; Attempt is 1 on the first try.
type Delivery = contract.Delivery

// Outcome is the kind of a Result.
type Outcome = contract.Outcome

// Outcome kinds.
const (
	OutcomeSent        = contract.OutcomeSent
	OutcomeRetryable   = contract.OutcomeRetryable
	OutcomeRateLimited = contract.OutcomeRateLimited
	OutcomePermanent   = contract.OutcomePermanent
)

// Result is the outcome of one delivery: DeliveryID, Outcome,
// ProviderMessageID (sent), RetryAfter (retryable, rate limited), Reason,
// Code (permanent) and Unclassified (made from an unclassified error).
type Result = contract.Result

// Sent reports a delivery accepted by the provider.
func Sent(deliveryID, providerMessageID string) Result {
	return Result{DeliveryID: deliveryID, Outcome: OutcomeSent, ProviderMessageID: providerMessageID}
}

// Retry reports a transient failure; retryAfter may be zero.
func Retry(deliveryID string, reason string, retryAfter time.Duration) Result {
	return Result{DeliveryID: deliveryID, Outcome: OutcomeRetryable, Reason: reason, RetryAfter: retryAfter}
}

// RateLimited reports that the provider throttled us; the host slows the
// whole provider for retryAfter.
func RateLimited(deliveryID string, reason string, retryAfter time.Duration) Result {
	return Result{DeliveryID: deliveryID, Outcome: OutcomeRateLimited, Reason: reason, RetryAfter: retryAfter}
}

// Permanent reports a failure that retrying cannot fix.
func Permanent(deliveryID, reason, code string) Result {
	return Result{DeliveryID: deliveryID, Outcome: OutcomePermanent, Reason: reason, Code: code}
}

// HealthReport is a plugin's view of its provider: Healthy and a Message.
type HealthReport = contract.HealthReport
