// Command herald-plugin-sms is Herald's SMS channel over Twilio's Messages API.
package main

import "github.com/heraldhq/herald/sdk"

func main() { sdk.Serve(New) }
