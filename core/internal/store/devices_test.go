package store_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestDevicesImportLoadAndRemove: devices of every kind round-trip
// through the directory tables with their kind and web push keys, a
// re-import updates a subscription's keys, and RemoveDevices deletes only
// the named devices of that tenant's user.
func TestDevicesImportLoadAndRemove(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	devs := []directory.Device{
		{Kind: directory.DeviceAPNs, Token: "abcd"},
		{Kind: directory.DeviceWebPush, Endpoint: "https://push.example/s/1", P256dh: "key1", Auth: "auth1"},
		{Kind: directory.DeviceFCM, Token: "fcm-1"},
	}
	dir := &directory.Directory{Recipients: []directory.Recipient{{UserID: "u1", UserType: "C", Active: true, DeviceTokens: []string{"legacy"}, Devices: devs}}}
	for _, tenant := range []string{"t1", "t2"} {
		if err := store.ImportDirectory(ctx, db.Pool, tenant, dir); err != nil {
			t.Fatal(err)
		}
	}
	load := func(tenant string) directory.Recipient {
		t.Helper()
		got, err := store.LoadDirectory(ctx, db.Pool, tenant, directory.Needs{UserIDs: []string{"u1"}})
		if err != nil || len(got.Recipients) != 1 {
			t.Fatalf("load: %v %+v", err, got)
		}
		return got.Recipients[0]
	}
	r := load("t1")
	want := []directory.Device{devs[0], devs[2], devs[1]} // ordered by address
	if diff := cmp.Diff(want, r.Devices); diff != "" || len(r.DeviceTokens) != 1 || r.DeviceTokens[0] != "legacy" {
		t.Fatalf("devices (-want +got):\n%s\ntokens %v", diff, r.DeviceTokens)
	}

	// A browser re-subscribing at the same endpoint gets new keys.
	dir.Recipients[0].Devices = []directory.Device{{Kind: directory.DeviceWebPush, Endpoint: "https://push.example/s/1", P256dh: "key2", Auth: "auth2"}}
	if err := store.ImportDirectory(ctx, db.Pool, "t1", dir); err != nil {
		t.Fatal(err)
	}
	if got := load("t1").Devices[2]; got.P256dh != "key2" || got.Auth != "auth2" {
		t.Fatalf("re-imported subscription %+v, want key2/auth2", got)
	}

	n, err := store.RemoveDevices(ctx, db.Pool, "t1", "u1", []string{"https://push.example/s/1", "abcd", "not-theirs"})
	if err != nil || n != 2 {
		t.Fatalf("RemoveDevices = %d, %v; want 2", n, err)
	}
	if got := load("t1").Devices; len(got) != 1 || got[0].Token != "fcm-1" {
		t.Fatalf("after removal %+v, want only fcm-1", got)
	}
	if got := load("t2").Devices; len(got) != 3 {
		t.Fatalf("tenant t2 lost devices: %+v", got)
	}
}
