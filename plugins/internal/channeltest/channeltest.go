// Package channeltest holds the in-process checks every channel plugin's
// tests make of its sdk.Channel: its description, Send before Configure,
// and Configure refusing bad config with an error that names the field.
// (sdk/plugintest checks the built binary over go-plugin.)
package channeltest

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/sdk"
)

// Description is what Describe checks of a plugin's description.
type Description struct {
	ChannelType, Provider, PluginVersion string
	Class                                sdk.Class
	MaxBatch                             int
}

// Describe checks ch's static description and returns it for further
// checks. APIVersions is the SDK's to fill in, so the plugin leaves it empty.
func Describe(t *testing.T, ch sdk.Channel, want Description) sdk.Description {
	t.Helper()
	resp, err := ch.Describe(context.Background(), sdk.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	d := resp.Description
	got := []any{d.ChannelType, d.Provider, d.PluginVersion, d.APIVersions, d.Class, d.MaxBatch}
	wantAll := []any{want.ChannelType, want.Provider, want.PluginVersion, []int(nil), want.Class, want.MaxBatch}
	if diff := cmp.Diff(wantAll, got); diff != "" {
		t.Errorf("description (-want +got):\n%s", diff)
	}
	return d
}

// SendBeforeConfigure checks that an unconfigured ch refuses to send d
// with notConfigured.
func SendBeforeConfigure(t *testing.T, ch sdk.Channel, d sdk.Delivery, notConfigured error) {
	t.Helper()
	_, err := ch.Send(context.Background(), sdk.SendRequest{Deliveries: []sdk.Delivery{d}})
	if !errors.Is(err, notConfigured) {
		t.Errorf("Send before Configure: err = %v, want %v", err, notConfigured)
	}
}

// BadConfig is one edit of a good config and the field the error must name.
type BadConfig struct {
	Edit      func(map[string]any)
	WantField string
}

// RefusesBadConfig checks, for each case, that a new channel's Configure
// with good() edited fails with an *sdk.ConfigError naming the field.
func RefusesBadConfig(t *testing.T, newChannel func() sdk.Channel, good func() map[string]any, cases map[string]BadConfig) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := good()
			tc.Edit(cfg)
			_, err := newChannel().Configure(context.Background(), sdk.ConfigureRequest{Config: cfg})
			var ce *sdk.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Configure error = %v, want *sdk.ConfigError", err)
			}
			if diff := cmp.Diff(tc.WantField, ce.Field); diff != "" {
				t.Errorf("ConfigError.Field (-want +got):\n%s", diff)
			}
		})
	}
}

// TagDefaults checks that the defaults written in the tags of cfg's type
// (what the host shows and applies, sdk.ConfigFields) are want: the
// Default constants the plugin's code and docs name.
func TagDefaults(t *testing.T, cfg any, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, s := range sdk.MustConfigFields(cfg) {
		if s.Default != "" {
			got[s.Name] = s.Default
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tag defaults (-want +got):\n%s", diff)
	}
}
