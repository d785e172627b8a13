// Package hostapi joins package sdk, which holds the wire converters and
// the gRPC client behind unexported names, to package sdk/host, which hands
// them to the Herald host. Package sdk fills PluginSet in its init; nothing
// outside the sdk module can import this package.
package hostapi

import "github.com/hashicorp/go-plugin"

// DispenseName is the name the channel plugin is dispensed under in the
// plugin set.
const DispenseName = "channel"

// PluginSet returns the host's VersionedPlugins; package sdk sets it.
var PluginSet func() map[int]plugin.PluginSet

// ErrPluginExited is the error the host-side client wraps when the plugin
// process exited (or its connection broke) during a call. It is retryable
// by the sdk's classification (Retryable() bool).
var ErrPluginExited error = exitedError{}

type exitedError struct{}

func (exitedError) Error() string   { return "plugin exited" }
func (exitedError) Retryable() bool { return true }
