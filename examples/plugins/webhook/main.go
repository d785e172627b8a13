// Command herald-plugin-webhook is a third-party Herald channel plugin: it
// adds a WEBHOOK channel that POSTs each delivery as JSON to a URL, signed
// with an HMAC-SHA256 of the body in the X-Herald-Signature header.
//
// It is its own Go module and imports only github.com/heraldhq/herald/sdk.
// Build it, drop the binary into Herald's plugin directory, add a channel
// to the config, and Herald delivers through it with no core rebuild; see
// docs/plugin-authoring.md.
package main

import "github.com/heraldhq/herald/sdk"

func main() {
	sdk.Serve(New)
}
