package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// apiPool connects to db as herald_api, the role row-level security binds.
func apiPool(t *testing.T, db *testenv.DB) *pgxpool.Pool {
	t.Helper()
	pool, err := store.NewPoolWith(context.Background(), db.URL, store.PoolOptions{MaxConns: 4, Role: store.RoleAPI})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestDeviceStore: under herald_api, a device is added with a stable id
// (the same device again keeps it and updates its keys), listed, and
// removed by id; another tenant's user, and a user with no recipient, are
// ErrNotFound.
func TestDeviceStore(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	for _, tenant := range []string{"t1", "t2"} {
		dir := &directory.Directory{Recipients: []directory.Recipient{{UserID: "u1", UserType: "C", Active: true}}}
		if tenant == "t1" {
			dir.Recipients = append(dir.Recipients, directory.Recipient{UserID: "u2", UserType: "C", Active: true})
		}
		if err := store.ImportDirectory(ctx, db.Pool, tenant, dir); err != nil {
			t.Fatal(err)
		}
	}
	api := apiPool(t, db)
	in := func(tenant string, fn func(tx pgx.Tx) error) error {
		return store.InTenant(ctx, api, tenant, "", fn)
	}
	web := directory.Device{Kind: directory.DeviceWebPush, Endpoint: "https://push.example/s/1", P256dh: "k1", Auth: "a1"}
	fcm := directory.Device{Kind: directory.DeviceFCM, Token: "fcm-token-1"}
	var first store.StoredDevice
	err := in("t1", func(tx pgx.Tx) error {
		var created bool
		var err error
		if first, created, err = store.AddDevice(ctx, tx, "t1", "u1", web); err != nil || !created || len(first.ID) != 32 {
			t.Fatalf("AddDevice = %+v, %v, %v; want a new device with a 32-hex id", first, created, err)
		}
		if _, _, err := store.AddDevice(ctx, tx, "t1", "u1", fcm); err != nil {
			return err
		}
		web2 := web
		web2.P256dh, web2.Auth = "k2", "a2"
		again, created, err := store.AddDevice(ctx, tx, "t1", "u1", web2)
		if err != nil || created || again.ID != first.ID {
			t.Fatalf("AddDevice again = %+v, %v, %v; want the same id %s, not new", again, created, err, first.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = in("t1", func(tx pgx.Tx) error {
		devs, err := store.ListDevices(ctx, tx, "t1", "u1")
		if err != nil || len(devs) != 2 {
			t.Fatalf("ListDevices = %+v, %v; want 2", devs, err)
		}
		got := []directory.Device{devs[0].Device, devs[1].Device}
		if got[0].Kind == directory.DeviceWebPush { // added in one transaction: the same created_at
			got[0], got[1] = got[1], got[0]
		}
		want := []directory.Device{fcm, {Kind: "webpush", Endpoint: web.Endpoint, P256dh: "k2", Auth: "a2"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("devices (-want +got):\n%s", diff)
		}
		if devs, err := store.ListDevices(ctx, tx, "t1", "u2"); err != nil || len(devs) != 0 || devs == nil {
			t.Errorf("ListDevices(u2) = %#v, %v; want an empty list", devs, err)
		}
		return nil
	})
	// Tenant t2 has a u1 of its own, with no device; it cannot see or
	// remove t1's, and cannot add to t1's u2.
	_ = in("t2", func(tx pgx.Tx) error {
		if devs, err := store.ListDevices(ctx, tx, "t2", "u1"); err != nil || len(devs) != 0 {
			t.Errorf("t2 ListDevices(u1) = %+v, %v; want none", devs, err)
		}
		if err := store.RemoveDevice(ctx, tx, "t2", "u1", first.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("t2 RemoveDevice = %v, want ErrNotFound", err)
		}
		if _, _, err := store.AddDevice(ctx, tx, "t1", "u2", fcm); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("t2 AddDevice to t1's user = %v, want ErrNotFound (RLS hides it)", err)
		}
		return nil
	})
	_ = in("t1", func(tx pgx.Tx) error {
		if _, _, err := store.AddDevice(ctx, tx, "t1", "nobody", fcm); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("AddDevice(nobody) = %v, want ErrNotFound", err)
		}
		if _, err := store.ListDevices(ctx, tx, "t1", "nobody"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("ListDevices(nobody) = %v, want ErrNotFound", err)
		}
		if err := store.RemoveDevice(ctx, tx, "t1", "u1", first.ID); err != nil {
			t.Errorf("RemoveDevice = %v", err)
		}
		if err := store.RemoveDevice(ctx, tx, "t1", "u1", first.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("RemoveDevice twice = %v, want ErrNotFound", err)
		}
		return nil
	})
	// The relay's read sees what the API wrote.
	got, err := store.LoadDirectory(ctx, db.Pool, "t1", directory.Needs{UserIDs: []string{"u1"}})
	if err != nil || len(got.Recipients) != 1 || len(got.Recipients[0].Devices) != 1 || got.Recipients[0].Devices[0] != fcm {
		t.Fatalf("LoadDirectory = %+v, %v; want u1 with the fcm device only", got, err)
	}
}

// TestPreferenceStore: preferences are replaced as a whole document under
// herald_api; the recipient's version moves only when something changed,
// a write based on an old version is ErrVersionMismatch and writes
// nothing, and the relay's LoadDirectory reads the result.
func TestPreferenceStore(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	dir := &directory.Directory{
		Recipients:  []directory.Recipient{{UserID: "u1", UserType: "C", Active: true, Locale: "en"}},
		Preferences: []directory.Preference{{UserID: "u1", Channel: "EMAIL", Enabled: true}},
	}
	for _, tenant := range []string{"t1", "t2"} {
		if err := store.ImportDirectory(ctx, db.Pool, tenant, dir); err != nil {
			t.Fatal(err)
		}
	}
	api := apiPool(t, db)
	get := func(tenant, user string) (directory.UserPreferences, int64, error) {
		var p directory.UserPreferences
		var v int64
		err := store.InTenant(ctx, api, tenant, "", func(tx pgx.Tx) error {
			var err error
			p, v, err = store.GetPreferences(ctx, tx, tenant, user)
			return err
		})
		return p, v, err
	}
	put := func(tenant, user string, p directory.UserPreferences, ifVersion int64) (int64, error) {
		var v int64
		err := store.InTenant(ctx, api, tenant, "", func(tx pgx.Tx) error {
			var err error
			v, err = store.ReplacePreferences(ctx, tx, tenant, user, p, ifVersion)
			return err
		})
		return v, err
	}
	p, v1, err := get("t1", "u1")
	want := directory.UserPreferences{Locale: "en", Channels: []directory.ChannelPreference{{Channel: "EMAIL", Enabled: true}}}
	if err != nil || v1 < 1 {
		t.Fatalf("GetPreferences = %+v, %d, %v", p, v1, err)
	}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Fatalf("preferences (-want +got):\n%s", diff)
	}
	next := directory.UserPreferences{Locale: "it", TimeZone: "Europe/Rome", QuietHours: &directory.QuietHours{Start: "22:00", End: "07:00"},
		Channels: []directory.ChannelPreference{{Channel: "SMS", Enabled: false}, {EventType: "E1", Channel: "SMS", Enabled: true}}}
	v2, err := put("t1", "u1", next, v1)
	if err != nil || v2 != v1+1 {
		t.Fatalf("ReplacePreferences = %d, %v; want version %d", v2, err, v1+1)
	}
	if v, err := put("t1", "u1", next, 0); err != nil || v != v2 {
		t.Fatalf("the same document again = %d, %v; want version %d unchanged", v, err, v2)
	}
	other := next
	other.Locale = "fr"
	if v, err := put("t1", "u1", other, v1); !errors.Is(err, store.ErrVersionMismatch) || v != v2 {
		t.Fatalf("write based on version %d = %d, %v; want ErrVersionMismatch and the current %d", v1, v, err, v2)
	}
	p, v, err := get("t1", "u1")
	next.Channels = []directory.ChannelPreference{{EventType: "", Channel: "SMS"}, {EventType: "E1", Channel: "SMS", Enabled: true}}
	if diff := cmp.Diff(next, p); err != nil || v != v2 || diff != "" {
		t.Fatalf("after the writes: version %d, %v (-want +got):\n%s", v, err, diff)
	}
	// Flipping one switch is a change.
	next.Channels[0].Enabled = true
	if v, err := put("t1", "u1", next, v2); err != nil || v != v2+1 {
		t.Fatalf("flip = %d, %v; want %d", v, err, v2+1)
	}
	// t2's u1 is untouched; t1 cannot reach t2's (or anyone's missing) user.
	if p, _, err := get("t2", "u1"); err != nil || p.Locale != "en" || len(p.Channels) != 1 {
		t.Fatalf("t2's u1 = %+v, %v; want untouched", p, err)
	}
	if _, err := put("t1", "nobody", next, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReplacePreferences(nobody) = %v, want ErrNotFound", err)
	}
	if _, _, err := get("t1", "nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetPreferences(nobody) = %v, want ErrNotFound", err)
	}
	got, err := store.LoadDirectory(ctx, db.Pool, "t1", directory.Needs{UserIDs: []string{"u1"}})
	if err != nil || len(got.Preferences) != 2 || got.Recipients[0].TimeZone != "Europe/Rome" || got.Recipients[0].QuietHours == nil {
		t.Fatalf("LoadDirectory = %+v, %v", got, err)
	}
}

// TestImportMovesVersions: `directory import` moves a recipient's version
// when their row or preferences change and a group's when its row or
// settings change, and leaves both alone when it writes what is there,
// so the API's If-Match sees imports too.
func TestImportMovesVersions(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	dir := &directory.Directory{
		Recipients:  []directory.Recipient{{UserID: "u1", UserType: "C", Active: true}},
		Groups:      []directory.Group{{Key: "g1", Type: "team"}},
		Preferences: []directory.Preference{{UserID: "u1", Channel: "SMS", Enabled: true}},
		Settings:    []directory.GroupSetting{{Group: "g1", Channel: "SMS", Enabled: true}},
	}
	versions := func() (int64, int64) {
		t.Helper()
		var r, g int64
		if err := db.Pool.QueryRow(ctx, `SELECT (SELECT version FROM recipients WHERE user_id = 'u1'), (SELECT version FROM groups WHERE group_key = 'g1')`).Scan(&r, &g); err != nil {
			t.Fatal(err)
		}
		return r, g
	}
	if err := store.ImportDirectory(ctx, db.Pool, "t1", dir); err != nil {
		t.Fatal(err)
	}
	r0, g0 := versions()
	if err := store.ImportDirectory(ctx, db.Pool, "t1", dir); err != nil {
		t.Fatal(err)
	}
	if r, g := versions(); r != r0 || g != g0 {
		t.Fatalf("the same import again moved versions %d,%d → %d,%d", r0, g0, r, g)
	}
	dir.Preferences[0].Enabled = false
	dir.Settings[0].Roles = []string{"MANAGER"}
	if err := store.ImportDirectory(ctx, db.Pool, "t1", dir); err != nil {
		t.Fatal(err)
	}
	if r, g := versions(); r != r0+1 || g != g0+1 {
		t.Fatalf("changed preference and setting: versions %d,%d, want %d,%d", r, g, r0+1, g0+1)
	}
	dir.Recipients[0].Locale = "it"
	dir.Groups[0].MaxRecipients = 3
	if err := store.ImportDirectory(ctx, db.Pool, "t1", dir); err != nil {
		t.Fatal(err)
	}
	if r, g := versions(); r != r0+2 || g != g0+2 {
		t.Fatalf("changed recipient and group: versions %d,%d, want %d,%d", r, g, r0+2, g0+2)
	}
}
