package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestLoadDirectoryReadsWhatTheDecisionNeeds: one round trip loads the
// groups asked for and their members, the users named (active or not),
// the active users of the broadcast types, their devices and
// preferences, and the groups' settings, and nothing else.
func TestLoadDirectoryReadsWhatTheDecisionNeeds(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	full := &directory.Directory{
		Recipients: []directory.Recipient{
			{UserID: "u1", UserType: "host", Active: true, Email: "u1@example.com", DeviceTokens: []string{"tok-b", "tok-a"}},
			{UserID: "u2", UserType: "host", Active: true},
			{UserID: "u3", UserType: "guest", Active: false},
			{UserID: "u4", UserType: "admin", Active: true, Attributes: map[string]string{"slack_user_id": "U4"}},
			{UserID: "u5", UserType: "admin", Active: false},
			{UserID: "u6", UserType: "guest", Active: true},
		},
		Groups:  []directory.Group{{Key: "g1", Type: "team"}, {Key: "g2", Type: "team"}},
		Members: []directory.Member{{Group: "g1", UserID: "u1", Role: "owner"}, {Group: "g1", UserID: "u2"}, {Group: "g2", UserID: "u6"}},
		Preferences: []directory.Preference{{UserID: "u1", Channel: "SMS", Enabled: false},
			{UserID: "u6", Channel: "SMS", Enabled: false}},
		Settings: []directory.GroupSetting{{Group: "g1", Channel: "EMAIL", Enabled: true}, {Group: "g1", Channel: "SMS", Enabled: true, Roles: []string{"owner"}},
			{Group: "g2", Channel: "EMAIL", Enabled: false}},
	}
	if err := store.ImportDirectory(ctx, db.Pool, "t", full); err != nil {
		t.Fatal(err)
	}
	dir, err := store.LoadDirectory(ctx, db.Pool, "t", directory.Needs{GroupKeys: []string{"g1"}, UserIDs: []string{"u3"}, UserTypes: []string{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, r := range dir.Recipients {
		users = append(users, r.UserID)
	}
	if got, want := fmt.Sprint(users), "[u1 u2 u3 u4]"; got != want {
		t.Fatalf("recipients %s, want %s", got, want)
	}
	if got := fmt.Sprint(dir.Recipients[0].DeviceTokens); got != "[tok-a tok-b]" {
		t.Fatalf("u1's devices %s, want [tok-a tok-b]", got)
	}
	if dir.Recipients[3].Attributes["slack_user_id"] != "U4" || dir.Recipients[2].Active {
		t.Fatalf("u3/u4 loaded as %+v / %+v", dir.Recipients[2], dir.Recipients[3])
	}
	if len(dir.Groups) != 1 || dir.Groups[0].Key != "g1" || len(dir.Members) != 2 || dir.Members[0].Role != "owner" {
		t.Fatalf("groups %+v, members %+v; want g1 with u1 (owner) and u2", dir.Groups, dir.Members)
	}
	if len(dir.Preferences) != 1 || dir.Preferences[0].UserID != "u1" {
		t.Fatalf("preferences %+v, want u1's only", dir.Preferences)
	}
	if len(dir.Settings) != 2 || dir.Settings[0].Group != "g1" || dir.Settings[0].Roles != nil ||
		dir.Settings[1].Channel != "SMS" || fmt.Sprint(dir.Settings[1].Roles) != "[owner]" {
		t.Fatalf("settings %+v, want g1's only, SMS for owners", dir.Settings)
	}
	empty, err := store.LoadDirectory(ctx, db.Pool, "t", directory.Needs{})
	if err != nil || len(empty.Recipients)+len(empty.Groups) != 0 {
		t.Fatalf("nothing needed: loaded %+v (%v)", empty, err)
	}
}
