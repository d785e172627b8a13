package server

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/pluginhost"
)

// TestPluginHostConfig: the daemon's plugins settings reach the plugin
// host; by default nothing watches the plugin directory, the permission
// checks are on and plugins run sandboxed where the kernel allows.
func TestPluginHostConfig(t *testing.T) {
	t.Parallel()
	log := hclog.NewNullLogger()
	tests := map[string]struct {
		plugins pluginhost.Config
		want    pluginhost.Config
	}{
		"defaults": {
			plugins: config.DefaultDaemon().Plugins,
			want: pluginhost.Config{Dir: "bin/plugins", Env: []string{}, Sandbox: pluginhost.SandboxAuto,
				SandboxRead: []string{}, SandboxWrite: []string{}},
		},
		"watch, extra variables, no permission checks": {
			plugins: pluginhost.Config{Dir: "/p", Watch: true, Env: []string{"HTTPS_PROXY"}, InsecurePermissions: true},
			want:    pluginhost.Config{Dir: "/p", Watch: true, Env: []string{"HTTPS_PROXY"}, InsecurePermissions: true},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := PluginHostConfig(tc.plugins, log, nil)
			got.Logger = nil
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
