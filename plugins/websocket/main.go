// Command herald-plugin-websocket is Herald's WEBSOCKET channel: it hands
// each delivery to the browsers of its user through the daemons' live
// gateways (herald serve's /v1/live), over RabbitMQ.
package main

import "github.com/heraldhq/herald/sdk"

func main() { sdk.Serve(New) }
