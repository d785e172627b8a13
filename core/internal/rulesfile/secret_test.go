package rulesfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const secretRulesHCL = `
channel "EMAIL" {
  providers = [{
    plugin = "email"
    config = {
      host     = "smtp.example.com"
      password = "env:HERALD_RULES_TEST_SMTP"
      username = "file:secrets/user"
      from     = "raw:env:not-a-reference"
      list     = ["env:HERALD_RULES_TEST_SMTP", "x"]
      port     = 587
    }
  }]
}

event "PING" {
  audience {
    user_type = "ADMIN"
  }
  mandatory = ["EMAIL"]
}
`

func TestRulesProviderConfigSecretReferences(t *testing.T) {
	dir := writeRulesFiles(t, map[string]string{
		"rules/a.hcl":         secretRulesHCL,
		"rules/secrets/user":  "smtp-user-from-file\n",
		"rules/b.yaml":        strings.Replace(secretRulesYAML, "EMAIL", "SMS", -1),
		"rules/secrets/token": "token-v1",
	})
	t.Setenv("HERALD_RULES_TEST_SMTP", "smtp-pa55word-from-env")
	rs, _, err := LoadWith(Options{}, filepath.Join(dir, "rules/*.hcl"), filepath.Join(dir, "rules/*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]any{}
	for _, ch := range rs.Channels() {
		got[ch.Name] = ch.Providers[0].Config
	}
	want := map[string]map[string]any{
		"EMAIL": {"host": "smtp.example.com", "password": "smtp-pa55word-from-env", "username": "smtp-user-from-file",
			"from": "env:not-a-reference", "list": []any{"smtp-pa55word-from-env", "x"}, "port": 587},
		"SMS": {"token": "token-v1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("resolved config (-want +got):\n%s", diff)
	}

	// A rotated file is read again by the next load (a rules reload).
	if err := os.WriteFile(filepath.Join(dir, "rules/secrets/token"), []byte("token-v2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err = Load(filepath.Join(dir, "rules/*.hcl"), filepath.Join(dir, "rules/*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range rs.Channels() {
		if ch.Name == "SMS" && ch.Providers[0].Config["token"] != "token-v2" {
			t.Fatalf("rotated secret not read: %v", ch.Providers[0].Config["token"])
		}
	}

	// KeepReferences leaves them as written.
	rs, _, err = LoadWith(Options{KeepReferences: true}, filepath.Join(dir, "rules/a.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if p := rs.Channels()[0].Providers[0].Config["password"]; p != "env:HERALD_RULES_TEST_SMTP" {
		t.Fatalf("KeepReferences: password = %v", p)
	}
}

const secretRulesYAML = `
channel:
  EMAIL:
    providers:
      - plugin: sms
        config:
          token: file:secrets/token
`

func TestRulesProviderConfigSecretReferenceErrors(t *testing.T) {
	t.Setenv("HERALD_RULES_TEST_SMTP", "smtp-pa55word-from-env")
	tests := map[string]struct {
		files   map[string]string
		opts    Options
		wantErr string
	}{
		"env unset": {
			files:   map[string]string{"a.hcl": strings.Replace(secretRulesHCL, "HERALD_RULES_TEST_SMTP\"\n", "HERALD_RULES_TEST_UNSET\"\n", 1), "secrets/user": "u"},
			wantErr: `a.hcl:7: channel "EMAIL": providers.0.config.password: env:HERALD_RULES_TEST_UNSET: environment variable HERALD_RULES_TEST_UNSET is not set`,
		},
		"file missing": {
			files:   map[string]string{"a.hcl": secretRulesHCL},
			wantErr: `a.hcl:8: channel "EMAIL": providers.0.config.username: file:secrets/user: cannot read secrets/user: no such file or directory`,
		},
		"file missing (yaml)": {
			files:   map[string]string{"b.yaml": secretRulesYAML + secretPingYAML},
			wantErr: `b.yaml:7: channel "EMAIL": providers.0.config.token: file:secrets/token: cannot read secrets/token: no such file or directory`,
		},
		"no-resolve checks syntax only": {
			files:   map[string]string{"a.hcl": strings.Replace(secretRulesHCL, "env:HERALD_RULES_TEST_SMTP\"\n", "env:\"\n", 1)},
			opts:    Options{KeepReferences: true},
			wantErr: `a.hcl:7: channel "EMAIL": providers.0.config.password: env:: want env:NAME with NAME an environment variable name (letters, digits, _), or raw:env:... for a literal`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := writeRulesFiles(t, tc.files)
			var paths []string
			for n := range tc.files {
				if strings.HasSuffix(n, ".hcl") || strings.HasSuffix(n, ".yaml") {
					paths = append(paths, filepath.Join(dir, n))
				}
			}
			_, _, err := LoadWith(tc.opts, paths...)
			if err == nil {
				t.Fatal("no error")
			}
			got := strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")
			if diff := cmp.Diff(tc.wantErr, got); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if strings.Contains(got, "pa55word") {
				t.Errorf("the error shows a secret: %s", got)
			}
		})
	}
}

const secretPingYAML = `
event:
  PING:
    audience: [{user_type: ADMIN}]
    mandatory: [EMAIL]
`
