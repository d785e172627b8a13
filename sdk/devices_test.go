package sdk

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDevicesOf(t *testing.T) {
	t.Parallel()
	web := Device{Kind: DeviceWebPush, Token: "https://push.example/s/1", Endpoint: "https://push.example/s/1", P256dh: "k", Auth: "a"}
	apns := Device{Kind: DeviceAPNs, Token: "abcd"}
	tests := map[string]struct {
		r     Recipient
		kinds []string
		want  []Device
	}{
		"nothing":                      {r: Recipient{}, want: nil},
		"every kind":                   {r: Recipient{Devices: []Device{web, apns}}, want: []Device{web, apns}},
		"one kind":                     {r: Recipient{Devices: []Device{web, apns}}, kinds: []string{DeviceAPNs}, want: []Device{apns}},
		"tokens of an older host":      {r: Recipient{DeviceTokens: []string{"t1", "t2"}}, want: []Device{{Token: "t1"}, {Token: "t2"}}},
		"older host's tokens, no kind": {r: Recipient{DeviceTokens: []string{"t1"}}, kinds: []string{"", DeviceFCM}, want: []Device{{Token: "t1"}}},
		"devices win over tokens":      {r: Recipient{DeviceTokens: []string{"abcd"}, Devices: []Device{apns}}, want: []Device{apns}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, tc.r.DevicesOf(tc.kinds...)); diff != "" {
				t.Errorf("DevicesOf (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGone(t *testing.T) {
	t.Parallel()
	want := Result{DeliveryID: "d1", Outcome: OutcomePermanent, Reason: "gone", Code: CodeDeviceGone, GoneDevices: []string{"a", "b"}}
	if diff := cmp.Diff(want, Gone("d1", "gone", "a", "b")); diff != "" {
		t.Errorf("Gone (-want +got):\n%s", diff)
	}
}
