package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// runHerald runs the command tree with args and returns stdout, stderr and
// the exit code Main would return.
func runHerald(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	root := NewRoot()
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(args)
	err := root.Execute()
	code := 0
	if err != nil {
		code = 1
		var ee *ExitError
		if errors.As(err, &ee) {
			code = ee.Code
			if ee.Err != nil {
				stderr.WriteString(ee.Err.Error() + "\n")
			}
		} else {
			stderr.WriteString(err.Error() + "\n")
		}
	}
	return stdout.String(), stderr.String(), code
}

const examples = "../../../examples/"

func TestRulesCheck(t *testing.T) {
	t.Parallel()
	broken := filepath.Join(t.TempDir(), "broken.hcl")
	if err := os.WriteFile(broken, []byte(`channel "WEBSOCKET" {
  providers = [{ plugin = "websocket" }]
}
event "PING" {
  audience {
    user_type = "ADMIN"
  }
  mandatory = ["WEBSOCKET", "FAX"]
  template "WEBSOCKET" {
    body = "{{ .payload.x "
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	undeclared := filepath.Join(t.TempDir(), "undeclared.hcl")
	if err := os.WriteFile(undeclared, []byte(`channel "WEBSOCKET" {
  providers = [{ plugin = "websocket" }]
}
event "PING" {
  audience {
    user_type = "ADMIN"
  }
  mandatory = ["WEBSOCKET"]
  payload_schema = <<JSON
  {"type": "object", "properties": {"x": {"type": "string"}}}
  JSON
  inbox {
    body = "{{ .payload.x }} {{ .payload.y }}"
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		"a template reads an undeclared payload field: a warning, exit 0": {
			args:       []string{"rules", "check", undeclared},
			wantStdout: "ok: 1 file, 1 event type, 1 channel\n",
			wantStderr: "warning: " + undeclared + `:13: event "PING": inbox.body: reads .payload.y, which payload_schema does not declare` +
				" (it fails to render when the field is absent; declare it, or read it with index)\n",
		},
		"one example": {
			args:       []string{"rules", "check", examples + "rules/herald.hcl"},
			wantStdout: "ok: 1 file, 5 event types, 5 channels\n",
		},
		"both examples, each a rule set": {
			args:       []string{"rules", "check", examples + "rules/herald.hcl", examples + "rules/herald.yaml"},
			wantStdout: "ok: 2 files, 5 event types, 5 channels\n",
		},
		"broken file": {
			args:     []string{"rules", "check", broken},
			wantCode: 1,
			wantStderr: broken + `:8: event "PING": mandatory: channel "FAX" has no channel block (no plugin provides it)
    8 |   mandatory = ["WEBSOCKET", "FAX"]
      |   ^
` + broken + `:10: event "PING": template.WEBSOCKET.body: bad template: template: body:1: unclosed action
   10 |     body = "{{ .payload.x "
      |     ^
2 problems
`,
		},
		"one good and one broken file": {
			args:       []string{"rules", "check", examples + "rules/herald.yaml", broken},
			wantCode:   1,
			wantStderr: "2 problems\n",
		},
		"together: the same rules twice are duplicates": {
			args:       []string{"rules", "check", "--together", examples + "rules/herald.hcl", examples + "rules/herald.yaml"},
			wantCode:   1,
			wantStderr: "11 problems\n",
		},
		"no files": {
			args:     []string{"rules", "check"},
			wantCode: 1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := runHerald(t, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.wantCode, stderr)
			}
			if diff := cmp.Diff(tc.wantStdout, stdout); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if tc.wantStderr != "" && !strings.HasSuffix(stderr, tc.wantStderr) {
				t.Errorf("stderr does not end with:\n%s\ngot:\n%s", tc.wantStderr, stderr)
			}
		})
	}
}

func TestRulesCheckPluginDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, p := range []string{"email", "push", "sms", "slack"} {
		if err := os.WriteFile(filepath.Join(dir, "herald-plugin-"+p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stdout, stderr, code := runHerald(t, "rules", "check", "--plugin-dir", dir, examples+"rules/herald.hcl")
	if code != 1 {
		t.Fatalf("exit %d, want 1 (websocket binary missing); stdout %q", code, stdout)
	}
	// The line of the WEBSOCKET provider in the example (found, so that
	// edits above it do not break the test).
	src, err := os.ReadFile(examples + "rules/herald.hcl")
	if err != nil {
		t.Fatal(err)
	}
	const wsLine = `  providers   = [{ plugin = "websocket" }]`
	before, _, ok := strings.Cut(string(src), wsLine+"\n")
	if !ok {
		t.Fatalf("examples/rules/herald.hcl has no line %q", wsLine)
	}
	n := strings.Count(before, "\n") + 1
	want := fmt.Sprintf(`rules/herald.hcl:%d: channel "WEBSOCKET": providers.0.plugin: plugin binary `, n) + filepath.Join(dir, "herald-plugin-websocket") + ": no such file or directory\n" +
		fmt.Sprintf("%5d | %s\n", n, wsLine) + `      |                    ^
1 problem
`
	if !strings.HasSuffix(stderr, want) {
		t.Errorf("stderr does not end with:\n%s\ngot:\n%s", want, stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "herald-plugin-websocket"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = runHerald(t, "rules", "check", "--plugin-dir", dir, examples+"rules/herald.hcl")
	if code != 0 || stdout != "ok: 1 file, 5 event types, 5 channels\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestRulesExplain(t *testing.T) {
	t.Parallel()
	base := []string{"rules", "explain", "--rules", examples + "rules/herald.hcl",
		"--event", examples + "events/reservation_requested.json", "--directory", examples + "directory/restaurant5.json"}

	t.Run("table at 15:00", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := runHerald(t, append(base, "--at", "2026-03-10T15:00:00+01:00")...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		for _, want := range []string{
			"event RESERVATION_REQUESTED evt-1 at 2026-03-10T15:00:00+01:00 (severity info, shared)\n3 recipients, 0 excluded\n",
			"user staff1  type STAFF  role MANAGER  via group restaurant:5\n" +
				"  local time 2026-03-10 15:00 Tue Europe/Rome; quiet hours 22:00–08:00, the user's own window (explicit)\n" +
				"  EMAIL      kept     optional: group: restaurant:5 setting (explicit); user: preference (explicit)\n" +
				"  PUSH       kept     optional: group: restaurant:5 setting (explicit); user: preference (explicit)\n" +
				"  WEBSOCKET  kept     mandatory\n" +
				"  SMS        dropped  disabled by group restaurant:5 setting (explicit) and disabled by user preference (explicit)\n",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("output lacks:\n%s\ngot:\n%s", want, stdout)
			}
		}
	})

	t.Run("json at 23:00", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := runHerald(t, append(base, "--at", "2026-03-10T23:00:00+01:00", "--json")...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var d rules.Decision
		if err := json.Unmarshal([]byte(stdout), &d); err != nil {
			t.Fatalf("not a Decision: %v\n%s", err, stdout)
		}
		got := map[string][]string{}
		for _, r := range d.Recipients {
			for _, c := range r.Channels {
				got[r.Recipient.UserID] = append(got[r.Recipient.UserID], c.Channel)
			}
		}
		want := map[string][]string{"staff1": {"WEBSOCKET"}, "staff2": {"WEBSOCKET"}, "staff3": {"WEBSOCKET"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("kept channels (-want +got):\n%s", diff)
		}
	})

	t.Run("--user not reached", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := runHerald(t, "rules", "explain", "--rules", examples+"rules/herald.hcl",
			"--event", examples+"events/reservation_requested.json", "--directory", examples+"directory/acme.json",
			"--at", "2026-03-10T15:00:00+01:00", "--user", "agent1")
		want := "event RESERVATION_REQUESTED evt-1 at 2026-03-10T15:00:00+01:00, user agent1\n" +
			"directory: type AGENT, active\n" +
			"not notified: no audience of RESERVATION_REQUESTED reached the user\n\n" +
			"audiences\n" +
			"  group restaurant:5 roles MANAGER, CHEF, WAITER  no  not a member of group restaurant:5\n"
		if code != 0 || stdout != want {
			t.Errorf("exit %d, stderr %q, stdout (-want +got):\n%s", code, stderr, cmp.Diff(want, stdout))
		}
	})

	t.Run("--user as JSON", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := runHerald(t, append(base, "--at", "2026-03-10T23:00:00+01:00", "--json", "--user", "staff2")...)
		var ue rules.UserExplanation
		if code != 0 || json.Unmarshal([]byte(stdout), &ue) != nil {
			t.Fatalf("exit %d, stderr %q, stdout %s", code, stderr, stdout)
		}
		if ue.Decision == nil || len(ue.Audiences) != 1 || !ue.Audiences[0].Reached || ue.Decision.LocalTime != "2026-03-10 23:00 Tue Europe/Rome" {
			t.Errorf("explanation %+v", ue)
		}
	})

	t.Run("strict --directory", func(t *testing.T) {
		t.Parallel()
		bad := filepath.Join(t.TempDir(), "dir.yaml")
		if err := os.WriteFile(bad, []byte("recipients:\n  - {user_id: s1, user_type: STAFF, time_zone: Europe/Roma}\n  - {user_id: s1, user_type: STAFF, active: yes}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := runHerald(t, "rules", "explain", "--rules", examples+"rules/herald.hcl",
			"--event", examples+"events/reservation_requested.json", "--directory", bad)
		for _, want := range []string{
			`dir.yaml:2: recipients[0] (user s1): time_zone: unknown zone "Europe/Roma"`,
			`dir.yaml:3: recipients[1] (user s1): user_id: duplicate: recipients[0] (user s1) (line 2) is the same recipient`,
			"--directory: 3 problems",
		} {
			if code != 1 || !strings.Contains(stderr, want) {
				t.Errorf("exit %d, stderr lacks %q:\n%s", code, want, stderr)
			}
		}
	})

	t.Run("bad --at", func(t *testing.T) {
		t.Parallel()
		_, stderr, code := runHerald(t, append(base, "--at", "23:00")...)
		if code != 2 || !strings.Contains(stderr, "--at") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})

	t.Run("needs a directory source", func(t *testing.T) {
		t.Parallel()
		_, _, code := runHerald(t, "rules", "explain", "--rules", examples+"rules/herald.hcl", "--event", examples+"events/reservation_requested.json")
		if code == 0 {
			t.Error("explain without --directory or --database-url succeeded")
		}
	})

	t.Run("event type without a rule", func(t *testing.T) {
		t.Parallel()
		ev := filepath.Join(t.TempDir(), "ev.json")
		if err := os.WriteFile(ev, []byte(`{"type": "NOPE", "payload": {}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := runHerald(t, "rules", "explain", "--rules", examples+"rules/herald.hcl", "--event", ev, "--directory", examples+"directory/restaurant5.json")
		if code != 1 || !strings.Contains(stderr, `event type "NOPE" has no rule`) {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
}

func TestRulesExplainLiveDirectory(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	var dir directory.Directory
	b, err := os.ReadFile(examples + "directory/restaurant5.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dir); err != nil {
		t.Fatal(err)
	}
	if err := store.ImportDirectory(context.Background(), db.Pool, "acme", &dir); err != nil {
		t.Fatal(err)
	}
	common := []string{"rules", "explain", "--rules", examples + "rules/herald.hcl",
		"--event", examples + "events/reservation_requested.json", "--at", "2026-03-10T23:00:00+01:00"}
	fromFile, stderr, code := runHerald(t, append(common, "--directory", examples+"directory/restaurant5.json")...)
	if code != 0 {
		t.Fatalf("--directory: exit %d: %s", code, stderr)
	}
	fromDB, stderr, code := runHerald(t, append(common, "--database-url", db.URL)...)
	if code != 0 {
		t.Fatalf("--database-url: exit %d: %s", code, stderr)
	}
	if diff := cmp.Diff(fromFile, fromDB); diff != "" {
		t.Errorf("live directory explains differently (-file +database):\n%s", diff)
	}
	// --user loads the user even when no audience reaches them.
	for _, user := range []string{"staff2", "nobody"} {
		fromFile, stderr, code := runHerald(t, append(common, "--directory", examples+"directory/restaurant5.json", "--user", user)...)
		if code != 0 {
			t.Fatalf("--directory --user %s: exit %d: %s", user, code, stderr)
		}
		fromDB, stderr, code := runHerald(t, append(common, "--database-url", db.URL, "--user", user)...)
		if code != 0 {
			t.Fatalf("--database-url --user %s: exit %d: %s", user, code, stderr)
		}
		if diff := cmp.Diff(fromFile, fromDB); diff != "" {
			t.Errorf("--user %s explains differently (-file +database):\n%s", user, diff)
		}
	}
}

func TestRulesSchemaCommand(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runHerald(t, "rules", "schema")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if stdout != string(rulesfile.JSONSchema()) {
		t.Error("rules schema does not print rulesfile.JSONSchema")
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil || doc["$schema"] == nil {
		t.Errorf("not a JSON Schema: %v", err)
	}
}
