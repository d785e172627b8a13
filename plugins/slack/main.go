// Command herald-plugin-slack is Herald's SLACK channel over the Slack Web API.
package main

import "github.com/heraldhq/herald/sdk"

func main() { sdk.Serve(New) }
