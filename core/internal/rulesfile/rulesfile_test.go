package rulesfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/rules"
)

func TestExampleRulesHCLAndYAMLAreEqual(t *testing.T) {
	t.Parallel()
	hcl, err := Load("../../../examples/rules/herald.hcl")
	if err != nil {
		t.Fatalf("herald.hcl: %v", err)
	}
	yaml, err := Load("../../../examples/rules/herald.yaml")
	if err != nil {
		t.Fatalf("herald.yaml: %v", err)
	}
	if diff := cmp.Diff(hcl.Spec(), yaml.Spec()); diff != "" {
		t.Errorf("herald.hcl and herald.yaml differ (-hcl +yaml):\n%s", diff)
	}
	if len(hcl.EventTypes()) != 5 || len(hcl.Channels()) != 5 {
		t.Errorf("got %d event types and %d channels, want 5 and 5", len(hcl.EventTypes()), len(hcl.Channels()))
	}
}

func writeRulesFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const pingHCL = `
channel "WEBSOCKET" {
  providers = [{ plugin = "websocket" }]
}
event "PING" {
  audience {
    user_type = "ADMIN"
  }
  mandatory = ["WEBSOCKET"]
}
`

func TestLoadRules(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		files   map[string]string
		paths   []string // relative to the temp dir
		want    []string // event types
		wantErr string   // with the temp dir removed
	}{
		"glob loads several files": {
			files: map[string]string{
				"a.hcl": pingHCL,
				"b.yaml": `
event:
  PONG:
    audience: [{user: "{{ .payload.user }}"}]
    mandatory: [WEBSOCKET]
`,
			},
			paths: []string{"*.hcl", "*.yaml"},
			want:  []string{"PING", "PONG"},
		},
		"the same file twice is read once": {
			files: map[string]string{"a.hcl": pingHCL},
			paths: []string{"a.hcl", "*.hcl"},
			want:  []string{"PING"},
		},
		"payload schema from a file next to the rules": {
			files: map[string]string{
				"rules/a.yaml": `
channel:
  WEBSOCKET: {providers: [{plugin: websocket}]}
event:
  PING:
    audience: [{user_type: ADMIN}]
    mandatory: [WEBSOCKET]
    payload_schema_file: schemas/ping.json
`,
				"rules/schemas/ping.json": `{"type": "object", "required": ["n"]}`,
			},
			paths: []string{"rules/a.yaml"},
			want:  []string{"PING"},
		},
		"missing payload schema file": {
			files: map[string]string{
				"a.yaml": `
channel:
  WEBSOCKET: {providers: [{plugin: websocket}]}
event:
  PING:
    audience: [{user_type: ADMIN}]
    mandatory: [WEBSOCKET]
    payload_schema_file: nope.json
`,
			},
			paths:   []string{"a.yaml"},
			wantErr: `a.yaml:8: event "PING": payload_schema_file: cannot read nope.json: no such file or directory`,
		},
		"glob matching nothing": {
			files:   map[string]string{"a.hcl": pingHCL},
			paths:   []string{"*.yml"},
			wantErr: `*.yml: no rules files match`,
		},
		"missing file": {
			paths:   []string{"gone.hcl"},
			wantErr: `gone.hcl: cannot read: no such file or directory`,
		},
		"unknown extension": {
			files:   map[string]string{"a.toml": "x = 1"},
			paths:   []string{"a.toml"},
			wantErr: `a.toml: unknown rules file type ".toml": use .hcl, .yaml or .yml`,
		},
		"yaml syntax error": {
			files:   map[string]string{"a.yaml": "event:\n  PING: [\n"},
			paths:   []string{"a.yaml"},
			wantErr: "a.yaml:2: syntax error: did not find expected node content",
		},
		"a block given twice in one file": {
			files: map[string]string{"a.hcl": pingHCL + `
event "PING" {
  audience {
    user_type = "STAFF"
  }
  mandatory = ["WEBSOCKET"]
}
`},
			paths:   []string{"a.hcl"},
			wantErr: `a.hcl:12: event "PING": event "PING" given twice in this file`,
		},
		"restricting a mandatory channel": {
			files: map[string]string{"a.hcl": strings.Replace(pingHCL, `mandatory = ["WEBSOCKET"]`, `mandatory = ["WEBSOCKET"]
  restrict "WEBSOCKET" { roles = ["MANAGER"] }`, 1)},
			paths:   []string{"a.hcl"},
			wantErr: `a.hcl:10: event "PING": restrict.WEBSOCKET: channel "WEBSOCKET" is mandatory; a role restriction would drop it (make it optional)`,
		},
		"YAML: an empty value is unset, a null list item is an error": {
			files:   map[string]string{"a.yaml": "channel:\n  WEBSOCKET:\n    providers: [{plugin: websocket}]\n    retry:\nevent:\n  PING:\n    description:\n    audience: [{user_type: ADMIN}]\n    mandatory: [WEBSOCKET, ~]\n"},
			paths:   []string{"a.yaml"},
			wantErr: `a.yaml:9: event "PING": mandatory.1: want a string, got null`,
		},
		"HCL: an unquoted word": {
			files:   map[string]string{"a.hcl": strings.Replace(pingHCL, `mandatory = ["WEBSOCKET"]`, "mandatory = [\"WEBSOCKET\"]\n  severity = critical", 1)},
			paths:   []string{"a.hcl"},
			wantErr: `a.hcl:10: event "PING": severity: critical is not a value: write strings in quotes ("critical"); the bare words are true, false and null`,
		},
		"HCL: a block written as an attribute, an attribute as a block": {
			files: map[string]string{"a.hcl": strings.Replace(pingHCL, `mandatory = ["WEBSOCKET"]`, "mandatory = [\"WEBSOCKET\"]\n  inbox = { title = \"x\" }\n  severity {\n  }", 1)},
			paths: []string{"a.hcl"},
			wantErr: `a.hcl:10: event "PING": inbox: "inbox" is a block: write inbox { ... }, not inbox = ...
a.hcl:11: event "PING": severity: "severity" is an attribute: write severity = value, not a block`,
		},
		"HCL: a literal ${ must be escaped": {
			files:   map[string]string{"a.hcl": strings.Replace(pingHCL, `mandatory = ["WEBSOCKET"]`, "mandatory = [\"WEBSOCKET\"]\n  description = \"costs ${price}\"", 1)},
			paths:   []string{"a.hcl"},
			wantErr: `a.hcl:10: event "PING": description: rules files hold plain values: ${ and %{ start HCL expressions, which are not allowed here; write $${ or %%{ for a literal ${ or %{`,
		},
		"template for a channel the event does not use": {
			files: map[string]string{"a.hcl": strings.Replace(pingHCL, `mandatory = ["WEBSOCKET"]`, `mandatory = ["WEBSOCKET"]
  template "EMAIL" { body = "x" }`, 1)},
			paths:   []string{"a.hcl"},
			wantErr: `a.hcl:10: event "PING": template.EMAIL: channel "EMAIL" is not used by the event`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := writeRulesFiles(t, tc.files)
			var paths []string
			for _, p := range tc.paths {
				paths = append(paths, filepath.Join(dir, p))
			}
			rs, err := Load(paths...)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatal("got no error")
				}
				var errs Errors
				if !errors.As(err, &errs) {
					t.Fatalf("error %T is not Errors", err)
				}
				got := strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")
				if diff := cmp.Diff(tc.wantErr, got); diff != "" {
					t.Errorf("error mismatch (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, rs.EventTypes()); diff != "" {
				t.Errorf("event types (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRulesErrorFields(t *testing.T) {
	t.Parallel()
	dir := writeRulesFiles(t, map[string]string{"a.hcl": strings.Replace(pingHCL, `user_type = "ADMIN"`, `user_typ = "ADMIN"`, 1)})
	_, err := Load(filepath.Join(dir, "a.hcl"))
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("got %v, want Errors", err)
	}
	want := Errors{
		{File: filepath.Join(dir, "a.hcl"), Line: 6, Column: 3, Rule: `event "PING"`, Field: "audience.0", Msg: "set exactly one of group, user, user_type and payload_path",
			Snippet: "    6 |   audience {\n      |   ^"},
		{File: filepath.Join(dir, "a.hcl"), Line: 7, Column: 5, Rule: `event "PING"`, Field: "audience.0.user_typ", Msg: `unknown field "user_typ" (did you mean "user_type"?)`,
			Snippet: "    7 |     user_typ = \"ADMIN\"\n      |     ^"},
	}
	if diff := cmp.Diff(want, errs); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
}

func TestSpecFromProgrammaticRules(t *testing.T) {
	t.Parallel()
	// The pipeline's tests may build a Spec directly: New applies the
	// same defaults the loader does.
	rs, err := rules.New(rules.Spec{
		Channels: []channel.Config{{Name: "EMAIL", Providers: []channel.Provider{{Plugin: "email"}}}},
		Events: []rules.EventSpec{{
			Type: "X", Audiences: []rules.AudienceSpec{{UserType: "ADMIN"}}, Optional: []string{"EMAIL"},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := rs.Event("X")
	email, _ := rs.Channel("EMAIL")
	if ev.Severity != rules.SeverityInfo || ev.QuietHours != rules.QuietDrop || email.Retry != channel.DefaultRetry || email.Providers[0].Name != "email" {
		t.Errorf("defaults not applied: %+v %+v", ev, email)
	}
}
