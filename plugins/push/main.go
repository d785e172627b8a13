// Command herald-plugin-push is Herald's PUSH channel over the FCM HTTP v1 API.
package main

import "github.com/heraldhq/herald/sdk"

func main() { sdk.Serve(New) }
