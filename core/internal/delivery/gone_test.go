package delivery

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/sdk"
)

// TestGoneOfKeepsOnlyTheRecipientsOwnDevices: the addresses a plugin
// reports gone are removed only when they are devices the delivery's
// recipient has, each once.
func TestGoneOfKeepsOnlyTheRecipientsOwnDevices(t *testing.T) {
	t.Parallel()
	rec, err := json.Marshal(sdk.Recipient{UserID: "u1", DeviceTokens: []string{"legacy"},
		Devices: []sdk.Device{{Kind: sdk.DeviceAPNs, Token: "abcd"}, {Kind: sdk.DeviceWebPush, Token: "https://push.example/s/1"}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		gone, want []string
	}{
		"own devices":             {gone: []string{"abcd", "https://push.example/s/1", "legacy"}, want: []string{"abcd", "https://push.example/s/1", "legacy"}},
		"someone else's":          {gone: []string{"other-users-token"}, want: nil},
		"mixed, with a duplicate": {gone: []string{"abcd", "x", "abcd"}, want: []string{"abcd"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			user, got := goneOf(store.Claimed{Recipient: rec}, tc.gone)
			if user != "u1" {
				t.Errorf("user %q, want u1", user)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("gone (-want +got):\n%s", diff)
			}
		})
	}
}
