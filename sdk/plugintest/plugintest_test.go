package plugintest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/sdk"
)

func TestCheckResults(t *testing.T) {
	t.Parallel()
	batch := []sdk.Delivery{{DeliveryID: "a", Recipient: sdk.Recipient{DeviceTokens: []string{"tok-a"}}},
		{DeliveryID: "b", Recipient: sdk.Recipient{Devices: []sdk.Device{{Kind: sdk.DeviceWebPush, Token: "https://push.example/b"}}}}}
	tests := map[string]struct {
		results []sdk.Result
		want    []string
	}{
		"one each":  {results: []sdk.Result{sdk.Sent("b", "m"), sdk.Retry("a", "x", time.Second)}},
		"missing":   {results: []sdk.Result{sdk.Sent("a", "m")}, want: []string{"1 results for 2 deliveries", `no result for delivery "b"`}},
		"duplicate": {results: []sdk.Result{sdk.Sent("a", "m"), sdk.Sent("a", "m")}, want: []string{`more than one result for delivery "a"`, `no result for delivery "b"`}},
		"unknown":   {results: []sdk.Result{sdk.Sent("a", "m"), sdk.Sent("b", "m"), sdk.Sent("c", "m")}, want: []string{"3 results for 2 deliveries", `result for unknown delivery "c"`}},
		"unclassified": {results: []sdk.Result{sdk.Sent("a", "m"), sdk.ErrorResult("b", errString("boom"))},
			want: []string{"delivery b failed with an unclassified error (wrap it with sdk.RetryableError, RateLimitedError or PermanentError): boom"}},
		"unspecified": {results: []sdk.Result{{DeliveryID: "a"}, sdk.Sent("b", "")},
			want: []string{"delivery a: result with no outcome (OutcomeUnspecified); build results with sdk.Sent, Retry, RateLimited, Permanent, Skipped or ErrorResult"}},
		"sent with reason": {results: []sdk.Result{{DeliveryID: "a", Outcome: sdk.OutcomeSent, Reason: "hmm"}, sdk.Sent("b", "")},
			want: []string{`delivery a: sent with a failure reason "hmm" / code ""`}},
		"own devices gone": {results: []sdk.Result{sdk.Gone("a", "gone", "tok-a"), sdk.Gone("b", "gone", "https://push.example/b")}},
		"someone else's device gone": {results: []sdk.Result{sdk.Gone("a", "gone", "https://push.example/b"), sdk.Sent("b", "")},
			want: []string{`delivery a: GoneDevices lists "https://push.example/b", which is not one of the recipient's devices`}},
		"nil results": {results: nil, want: []string{"0 results for 2 deliveries", `no result for delivery "a"`, `no result for delivery "b"`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, CheckResults(batch, tc.results)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestCheckDescription(t *testing.T) {
	t.Parallel()
	good := sdk.Description{ChannelType: "EMAIL", Provider: "smtp", PluginVersion: "1.0.0", APIVersions: []int{sdk.ProtocolVersion}, MaxBatch: 10,
		Config: []sdk.FieldSpec{{Name: "host", Type: sdk.FieldString, Required: true}, {Name: "port", Type: sdk.FieldInt, Default: "25"}}}
	tests := map[string]struct {
		mod  func(*sdk.Description)
		f    Features
		want []string
	}{
		"good":          {},
		"wrong channel": {f: Features{ChannelType: "SMS"}, want: []string{`Description.ChannelType is "EMAIL", want "SMS"`}},
		"empty":         {mod: func(d *sdk.Description) { *d = sdk.Description{} }, want: []string{"Description.ChannelType is empty", "Description.Provider is empty", "Description.PluginVersion is empty", "Description.APIVersions [] lacks protocol version 2"}},
		"duplicate field": {mod: func(d *sdk.Description) {
			d.Config = append(d.Config, sdk.FieldSpec{Name: "host", Type: sdk.FieldString})
		}, want: []string{`config field "host" is declared twice`}},
		"bad type": {mod: func(d *sdk.Description) { d.Config = []sdk.FieldSpec{{Name: "x", Type: "float"}} }, want: []string{`config field "x" has unknown type "float"`}},
		"bad default": {mod: func(d *sdk.Description) {
			d.Config = []sdk.FieldSpec{{Name: "mode", Type: sdk.FieldString, Default: "ssl", Enum: []string{"tls"}}}
		}, want: []string{`config field "mode": default does not pass its own spec: config field "mode": bad default "ssl" (plugin bug): "ssl" is not one of tls`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := good
			d.Config = append([]sdk.FieldSpec(nil), good.Config...)
			if tc.mod != nil {
				tc.mod(&d)
			}
			if diff := cmp.Diff(tc.want, CheckDescription(d, tc.f)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestGeneratedBadConfigsAreRefused(t *testing.T) {
	t.Parallel()
	specs := []sdk.FieldSpec{
		{Name: "url", Type: sdk.FieldString, Required: true},
		{Name: "timeout", Type: sdk.FieldDuration, Default: "5s"},
		{Name: "mode", Type: sdk.FieldString, Enum: []string{"a", "b"}},
		{Name: "tags", Type: sdk.FieldList},
		{Name: "n", Type: sdk.FieldInt},
		{Name: "on", Type: sdk.FieldBool},
	}
	good := map[string]any{"url": "http://x"}
	if _, err := sdk.CheckConfig(specs, good); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, bc := range generatedBadConfigs(specs, good) {
		names = append(names, bc.Name)
		_, err := sdk.CheckConfig(specs, merge(good, bc.Config))
		ce, ok := err.(*sdk.ConfigError)
		if !ok || ce.Field != bc.Field {
			t.Errorf("%s: CheckConfig error %v, want a ConfigError naming %q", bc.Name, err, bc.Field)
		}
	}
	want := []string{"unknown key", "wrong type url", "missing required url", "wrong type timeout", "wrong type mode",
		"outside enum mode", "wrong type tags", "wrong type n", "wrong type on"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("generated (-want +got):\n%s", diff)
	}
}
