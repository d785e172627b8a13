// Command herald-plugin-email is Herald's EMAIL channel over SMTP.
package main

import "github.com/heraldhq/herald/sdk"

func main() { sdk.Serve(New) }
