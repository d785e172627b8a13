// Command herald-plugin-websocket is Herald's WEBSOCKET channel: it serves
// browsers over WebSocket and pushes notifications to their open sessions.
package main

import "github.com/heraldhq/herald/sdk"

func main() { sdk.Serve(New) }
