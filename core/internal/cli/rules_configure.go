package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/sdk"
	sdkhost "github.com/heraldhq/herald/sdk/host"
)

// configureCheckTimeout bounds launching one plugin and configuring it.
const configureCheckTimeout = 30 * time.Second

// checkProviderConfigs runs every provider's plugin binary from pluginDir,
// checks the provider's config against the plugin's field specs and hands
// it to the plugin's Configure, as herald serve does, so that config the
// plugin refuses (a webhook URL that is not https, a missing token, …) is
// reported by `herald rules check`, naming the field, and not at the first
// send. It returns one line per problem; config values never appear in
// them. The plugin is stopped after Configure: nothing is sent.
func checkProviderConfigs(ctx context.Context, files []string, rs *rules.RuleSet, pluginDir string) []string {
	var problems []string
	where := fmt.Sprint(files)
	if len(files) == 1 {
		where = files[0]
	}
	for _, ch := range rs.Channels() {
		for _, p := range ch.Providers {
			if p.Plugin == "" {
				continue
			}
			name := p.Name
			if name == "" {
				name = p.Plugin
			}
			prefix := fmt.Sprintf("%s: channel %q provider %q (plugin %s)", where, ch.Name, name, p.Plugin)
			if err := configureOnce(ctx, filepath.Join(pluginDir, "herald-plugin-"+p.Plugin), name, p.Config); err != nil {
				problems = append(problems, prefix+": "+err.Error())
			}
		}
	}
	return problems
}

// configureOnce launches a plugin binary, checks cfg against its field
// specs, calls Configure and stops it.
func configureOnce(ctx context.Context, bin, providerName string, cfg map[string]any) error {
	ctx, cancel := context.WithTimeout(ctx, configureCheckTimeout)
	defer cancel()
	ch, stop, err := launchOnce(ctx, bin)
	if err != nil {
		return err
	}
	defer stop()
	desc, err := ch.Describe(ctx, sdk.DescribeRequest{})
	if err != nil {
		return fmt.Errorf("describe: %w", err)
	}
	checked, err := sdk.CheckConfig(desc.Description.Config, cfg)
	if err == nil {
		_, err = ch.Configure(ctx, sdk.ConfigureRequest{ProviderName: providerName, Config: checked})
	}
	var ce *sdk.ConfigError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce) && ce.Field != "":
		return fmt.Errorf("config field %s: %s", ce.Field, ce.Msg)
	case errors.As(err, &ce):
		return fmt.Errorf("config: %s", ce.Msg)
	}
	return fmt.Errorf("configure: %w", err)
}

// describeOnce launches a plugin binary, asks for its Description and
// stops it.
func describeOnce(ctx context.Context, bin string) (sdk.Description, error) {
	ctx, cancel := context.WithTimeout(ctx, configureCheckTimeout)
	defer cancel()
	ch, stop, err := launchOnce(ctx, bin)
	if err != nil {
		return sdk.Description{}, err
	}
	defer stop()
	desc, err := ch.Describe(ctx, sdk.DescribeRequest{})
	if err != nil {
		return sdk.Description{}, fmt.Errorf("describe: %w", err)
	}
	return desc.Description, nil
}

// launchOnce launches a plugin binary as herald serve does (handshake,
// AutoMTLS) without its output, for one short conversation; stop kills it.
func launchOnce(ctx context.Context, bin string) (ch sdk.Channel, stop func(), err error) {
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{sdk.EnvHostPID + "=" + fmt.Sprint(os.Getpid())}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  sdk.Handshake,
		VersionedPlugins: sdkhost.PluginSet(),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off}),
		SyncStdout:       io.Discard,
		SyncStderr:       io.Discard,
		StartTimeout:     configureCheckTimeout,
	})
	rpc, err := client.Client()
	if err != nil {
		client.Kill()
		return nil, nil, fmt.Errorf("launch %s: %w", bin, err)
	}
	if v := client.NegotiatedVersion(); !slices.Contains(sdkhost.ProtocolVersions, v) {
		client.Kill()
		return nil, nil, fmt.Errorf("plugin speaks protocol version %d, host serves %v", v, sdkhost.ProtocolVersions)
	}
	ch, err = sdkhost.Dispense(rpc)
	if err != nil {
		client.Kill()
		return nil, nil, fmt.Errorf("dispense: %w", err)
	}
	return ch, client.Kill, nil
}

// declaredClasses launches the plugin of every provider of rs's channels
// from pluginDir, once per plugin, and returns what each channel's plugin
// declares (class, user types), as herald serve passes it to the rules. A
// plugin that cannot be described is reported in problems and left out:
// its channel counts as persistent unless the rules say otherwise.
func declaredClasses(ctx context.Context, rs *rules.RuleSet, pluginDir string) (declared map[string]channel.Declared, problems []string) {
	type answer struct {
		d   channel.Declared
		err error
	}
	seen := map[string]answer{}
	declared = map[string]channel.Declared{}
	for _, ch := range rs.Channels() {
		d, ok := channel.DeclarationOf(ch, func(p channel.Provider) (channel.Declared, bool) {
			a, done := seen[p.Plugin]
			if !done {
				desc, err := describeOnce(ctx, filepath.Join(pluginDir, "herald-plugin-"+p.Plugin))
				a = answer{channel.Declared{Plugin: p.Plugin, BestEffort: desc.Class == sdk.BestEffort, UserTypes: desc.UserTypes}, err}
				seen[p.Plugin] = a
				if err != nil {
					problems = append(problems, fmt.Sprintf("plugin %s: %v", p.Plugin, err))
				}
			}
			return a.d, a.err == nil
		})
		if ok {
			declared[ch.Name] = d
		}
	}
	return declared, problems
}
