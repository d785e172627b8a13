package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestDirectoryExportPruneRoundTrip: export → import --prune is a no-op in
// every format (nothing removed, the next export is byte for byte the
// same); import --prune of a smaller file removes, and lists, exactly what
// it does not list, with --dry-run listing the same and changing nothing.
func TestDirectoryExportPruneRoundTrip(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	tmp := t.TempDir()
	acme := filepath.Join(testenv.RepoRoot(t), "examples", "directory", "acme.json")
	extra := filepath.Join(tmp, "extra.json")
	if err := os.WriteFile(extra, []byte(`{
  "recipients": [
    {"user_id": "leaver", "user_type": "STAFF", "email": "leaver@example.com", "device_tokens": ["tok-leaver"],
     "devices": [{"kind": "webpush", "endpoint": "https://push.example/sub/1",
                  "p256dh": "BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM", "auth": "tBHItJI5svbpez7KI4CCXg"}]},
    {"user_id": "staff1", "user_type": "STAFF", "email": "staff1@restaurant.example", "phone": "+390600000001", "locale": "it",
     "time_zone": "Europe/Rome", "quiet_hours": {"start": "22:00", "end": "08:00"}, "device_tokens": ["tok-new"]}
  ],
  "groups": [{"key": "restaurant:9", "type": "restaurant", "max_recipients": 3}],
  "members": [{"group": "restaurant:9", "user_id": "leaver", "role": "WAITER"}],
  "preferences": [{"user_id": "leaver", "event_type": "ORDER", "channel": "SMS", "enabled": false}],
  "settings": [{"group": "restaurant:9", "channel": "SMS", "enabled": true, "roles": ["MANAGER"]}]
}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	for _, f := range []string{acme, extra} {
		if err := runDirectoryImport(ctx, &stdout, &stderr, db.Pool, "acme", f, "", false); err != nil {
			t.Fatalf("import %s: %v\n%s", f, err, &stderr)
		}
	}
	full := countRows(t, db.Pool, "acme")
	for _, format := range []directory.Format{directory.JSON, directory.YAML, directory.JSONL} {
		first := filepath.Join(tmp, "export."+string(format))
		if err := runDirectoryExport(ctx, &stdout, &stderr, db.Pool, "acme", format, first); err != nil {
			t.Fatalf("export %s: %v", format, err)
		}
		stdout.Reset()
		if err := runDirectoryPrune(ctx, &stdout, &stderr, db.Pool, "acme", first, "", false); err != nil {
			t.Fatalf("import --prune of the %s export: %v\n%s", format, err, &stderr)
		}
		if !strings.Contains(stdout.String(), "removed nothing") {
			t.Fatalf("import --prune of the %s export removed something:\n%s", format, &stdout)
		}
		var second bytes.Buffer
		if err := runDirectoryExport(ctx, &second, &stderr, db.Pool, "acme", format, ""); err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(first)
		if !bytes.Equal(want, second.Bytes()) {
			t.Fatalf("%s export after the round trip differs:\n%s\n---\n%s", format, want, second.Bytes())
		}
		if got := countRows(t, db.Pool, "acme"); got != full {
			t.Fatalf("%s round trip changed the directory: %s, was %s", format, got, full)
		}
		if format == directory.JSON && (!strings.Contains(string(want), "tok-leaver") || !strings.Contains(string(want), "https://push.example/sub/1")) {
			t.Fatalf("the export lacks the devices:\n%s", want)
		}
	}
	wantRemoved := []string{
		"recipients: leaver",
		"devices: leaver https://push.example/sub/1, leaver tok-leaver, staff1 tok-new",
		"groups: restaurant:9",
		"members: restaurant:9 leaver",
		"preferences: leaver ORDER SMS",
		"settings: restaurant:9 * SMS",
	}
	stdout.Reset()
	if err := runDirectoryPrune(ctx, &stdout, &stderr, db.Pool, "acme", acme, "", true); err != nil {
		t.Fatalf("dry run: %v\n%s", err, &stderr)
	}
	for _, w := range wantRemoved {
		if !strings.Contains(stdout.String(), "would remove 1 "+w) && !strings.Contains(stdout.String(), "would remove 3 "+w) {
			t.Errorf("dry run does not list %q:\n%s", w, &stdout)
		}
	}
	if got := countRows(t, db.Pool, "acme"); got != full {
		t.Fatalf("the dry run changed the directory: %s, was %s", got, full)
	}
	stdout.Reset()
	if err := runDirectoryPrune(ctx, &stdout, &stderr, db.Pool, "acme", acme, "", false); err != nil {
		t.Fatalf("prune: %v\n%s", err, &stderr)
	}
	for _, w := range wantRemoved {
		if !strings.Contains(stdout.String(), "removed 1 "+w) && !strings.Contains(stdout.String(), "removed 3 "+w) {
			t.Errorf("prune does not list %q:\n%s", w, &stdout)
		}
	}
	// Now the directory is the file: a fresh tenant importing it has the
	// same rows, and its export is the same.
	if err := runDirectoryImport(ctx, &stdout, &stderr, db.Pool, "fresh", acme, "", false); err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if err := runDirectoryExport(ctx, &a, &stderr, db.Pool, "acme", directory.JSON, ""); err != nil {
		t.Fatal(err)
	}
	if err := runDirectoryExport(ctx, &b, &stderr, db.Pool, "fresh", directory.JSON, ""); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Fatalf("after the prune, acme's export differs from a fresh import of the file:\n%s\n---\n%s", &a, &b)
	}
	// An unknown tenant is refused naming the flag; a bad file prunes nothing.
	if err := runDirectoryExport(ctx, &a, &stderr, db.Pool, "nobody", directory.JSON, ""); exitCode(err) != 1 || !strings.Contains(err.Error(), "--tenant") {
		t.Fatalf("export of an unknown tenant: %v", err)
	}
	bad := filepath.Join(tmp, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"recipients": [{"user_id": "x", "user_type": "T", "time_zone": "Mars/Base"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	before := countRows(t, db.Pool, "acme")
	if err := runDirectoryPrune(ctx, &stdout, &stderr, db.Pool, "acme", bad, "", false); exitCode(err) != 1 ||
		!strings.Contains(stderr.String(), "time_zone") || countRows(t, db.Pool, "acme") != before {
		t.Fatalf("prune with a bad file: %v\n%s", err, &stderr)
	}
}

// TestDirectoryImportPruneFlags: flags that cannot go together are refused
// naming them, before any database is opened.
func TestDirectoryImportPruneFlags(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]string{
		"--tenant a --prune --partial f.json": "--prune with --partial",
		"--tenant a --dry-run f.json":         "--dry-run goes with --prune",
		"--prune f.json":                      "--tenant is required",
	} {
		cmd := newDirectoryImportCmd()
		cmd.SetArgs(strings.Fields(args))
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		if exitCode(err) != 2 || !strings.Contains(err.Error(), want) {
			t.Errorf("import %s: %v, want exit 2 saying %q", args, err, want)
		}
	}
	for args, want := range map[string]string{
		"--user u":                      "--tenant is required",
		"--tenant t":                    "--user is required",
		"--tenant t --user u --batch 0": "--batch must be",
		"--tenant 't t' --user u":       "--tenant",
		"--tenant t --user \x00":        "--user must be valid UTF-8",
	} {
		cmd := newDirectoryEraseCmd()
		cmd.SetArgs(strings.Fields(args))
		if strings.Contains(args, "'t t'") {
			cmd.SetArgs([]string{"--tenant", "t t", "--user", "u"})
		}
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		if exitCode(err) != 2 || !strings.Contains(err.Error(), want) {
			t.Errorf("erase %q: %v, want exit 2 saying %q", args, err, want)
		}
	}
	cmd := newDirectoryExportCmd()
	cmd.SetArgs([]string{"--tenant", "t", "--format", "toml"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	if err := cmd.Execute(); exitCode(err) != 2 || !strings.Contains(err.Error(), "--format") {
		t.Errorf("export --format toml: %v", err)
	}
}

// TestDirectoryEraseCommand: herald directory erase removes the user,
// erases their stored rows and says what it did; run again it exits 1
// naming --user; an unknown tenant exits 1 naming --tenant.
func TestDirectoryEraseCommand(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	dir := &directory.Directory{
		Recipients: []directory.Recipient{{UserID: "guest7", UserType: "CUSTOMER", Active: true, Email: "guest7@example.com", Phone: "+390600000077"}},
		Groups:     []directory.Group{{Key: "restaurant:5", Type: "restaurant"}},
		Members:    []directory.Member{{Group: "restaurant:5", UserID: "guest7"}},
	}
	if err := store.ImportDirectory(ctx, db.Pool, "acme", dir); err != nil {
		t.Fatal(err)
	}
	if err := store.EnsureTenant(ctx, db.Pool, "acme", ""); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := db.Pool.Exec(ctx, `WITH n AS (
				INSERT INTO notifications (tenant_id, event_id, user_id, event_type, title, body)
				VALUES ('acme', 'ev' || $1, 'guest7', 'BOOKED', 'Table for guest7', 'See you, guest7') RETURNING notification_id, created_at)
			INSERT INTO deliveries (tenant_id, notification_id, event_id, event_type, user_id, user_type, channel, status, recipient, content, created_at)
			SELECT 'acme', notification_id, 'ev' || $1, 'BOOKED', 'guest7', 'CUSTOMER', 'SMS', 'SENT', '{"phone": "+390600000077"}', '{"text": "See you, guest7"}', created_at FROM n`,
			strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	if err := runDirectoryErase(ctx, &stdout, &stderr, db.Pool, "acme", "guest7", store.EraseOptions{Batch: 2}); err != nil {
		t.Fatalf("erase: %v\n%s", err, &stderr)
	}
	for _, want := range []string{
		"removed user guest7 from tenant acme's directory: 1 recipient, 0 devices, 1 membership, 0 preferences",
		"erased: 5 notifications, 5 deliveries (0 on their way, now FAILED)",
		"kept rows now carry the pseudonym erased:",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, &stdout)
		}
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM notifications n WHERE n::text LIKE '%guest7%') + (SELECT count(*) FROM deliveries d WHERE d::text LIKE '%guest7%' OR d::text LIKE '%+390600000077%')
		+ (SELECT count(*) FROM recipients WHERE user_id = 'guest7')`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("rows holding guest7's data after the erase: %d (%v)", left, err)
	}
	err := runDirectoryErase(ctx, &stdout, &stderr, db.Pool, "acme", "guest7", store.EraseOptions{})
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "--user") || !strings.Contains(err.Error(), "already erased?") {
		t.Fatalf("erase again: %v", err)
	}
	err = runDirectoryErase(ctx, &stdout, &stderr, db.Pool, "nobody", "guest7", store.EraseOptions{})
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "--tenant") {
		t.Fatalf("erase in an unknown tenant: %v", err)
	}
}
