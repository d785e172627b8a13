package host_test

import (
	"context"
	"fmt"
	"os/exec"

	"github.com/hashicorp/go-plugin"

	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sdk/host"
)

// ExampleDispense launches a plugin binary the way the Herald host does and
// calls it. (It has no Output comment: go test compiles it but does not run
// it, as it needs a plugin binary.)
func ExampleDispense() {
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  sdk.Handshake,
		VersionedPlugins: host.PluginSet(),
		Cmd:              exec.Command("bin/plugins/herald-plugin-email"),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
	})
	defer client.Kill()
	rpc, err := client.Client()
	if err != nil {
		panic(err)
	}
	ch, err := host.Dispense(rpc)
	if err != nil {
		panic(err)
	}
	resp, err := ch.Describe(context.Background(), sdk.DescribeRequest{})
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.Description.ChannelType, "over protocol", ch.ProtocolVersion())
}
