package sdk

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCheckConfig(t *testing.T) {
	t.Parallel()
	specs := []FieldSpec{
		{Name: "host", Type: FieldString, Required: true},
		{Name: "port", Type: FieldInt, Default: "587"},
		{Name: "tls", Type: FieldBool, Default: "true"},
		{Name: "timeout", Type: FieldDuration, Default: "10s"},
		{Name: "mode", Type: FieldString, Enum: []string{"starttls", "tls", "plain"}},
		{Name: "tags", Type: FieldList},
		{Name: "scopes", Type: FieldList, Default: "a, b", Enum: []string{"a", "b", "c"}},
	}
	base := func(extra map[string]any) map[string]any {
		m := map[string]any{"host": "smtp.local"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	defaults := map[string]any{"host": "smtp.local", "port": 587, "tls": true, "timeout": 10 * time.Second, "scopes": []string{"a", "b"}}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for k, v := range defaults {
			m[k] = v
		}
		m[k] = v
		return m
	}
	tests := map[string]struct {
		specs   []FieldSpec
		cfg     map[string]any
		want    map[string]any
		wantErr *ConfigError
	}{
		"defaults":               {cfg: base(nil), want: defaults},
		"nil value means absent": {cfg: base(map[string]any{"port": nil}), want: defaults},
		"int from float64":       {cfg: base(map[string]any{"port": float64(25)}), want: with("port", 25)},
		"int from string":        {cfg: base(map[string]any{"port": "25"}), want: with("port", 25)},
		"int from json.Number":   {cfg: base(map[string]any{"port": json.Number("25")}), want: with("port", 25)},
		"int64":                  {cfg: base(map[string]any{"port": int64(25)}), want: with("port", 25)},
		"bool from string":       {cfg: base(map[string]any{"tls": "false"}), want: with("tls", false)},
		"duration string":        {cfg: base(map[string]any{"timeout": "1m"}), want: with("timeout", time.Minute)},
		"duration typed":         {cfg: base(map[string]any{"timeout": time.Second}), want: with("timeout", time.Second)},
		"enum ok":                {cfg: base(map[string]any{"mode": "tls"}), want: with("mode", "tls")},
		"list any":               {cfg: base(map[string]any{"tags": []any{"x", "y"}}), want: with("tags", []string{"x", "y"})},
		"empty list":             {cfg: base(map[string]any{"tags": []any{}}), want: with("tags", []string{})},
		"empty config no specs":  {specs: []FieldSpec{}, cfg: nil, want: map[string]any{}},
		"unknown key": {cfg: base(map[string]any{"hots": "x"}),
			wantErr: &ConfigError{Field: "hots", Msg: "unknown field (known: host, port, tls, timeout, mode, tags, scopes)"}},
		"unknown key no specs": {specs: []FieldSpec{}, cfg: map[string]any{"x": 1},
			wantErr: &ConfigError{Field: "x", Msg: "unknown field (the plugin takes no config)"}},
		"missing required":      {cfg: map[string]any{}, wantErr: &ConfigError{Field: "host", Msg: "required"}},
		"nil required":          {cfg: map[string]any{"host": nil}, wantErr: &ConfigError{Field: "host", Msg: "required"}},
		"empty required string": {cfg: map[string]any{"host": ""}, wantErr: &ConfigError{Field: "host", Msg: "required, must not be empty"}},
		"string wrong type":     {cfg: map[string]any{"host": 1}, wantErr: &ConfigError{Field: "host", Msg: "must be a string, got int"}},
		"int wrong type":        {cfg: base(map[string]any{"port": "abc"}), wantErr: &ConfigError{Field: "port", Msg: `must be an int, got "abc"`}},
		"int fraction":          {cfg: base(map[string]any{"port": 1.5}), wantErr: &ConfigError{Field: "port", Msg: "must be an int, got 1.5"}},
		"bool wrong type":       {cfg: base(map[string]any{"tls": 1}), wantErr: &ConfigError{Field: "tls", Msg: "must be a bool, got int"}},
		"duration number":       {cfg: base(map[string]any{"timeout": 5}), wantErr: &ConfigError{Field: "timeout", Msg: `must be a duration such as "5s", got int`}},
		"duration bad string":   {cfg: base(map[string]any{"timeout": "5 parsecs"}), wantErr: &ConfigError{Field: "timeout", Msg: `must be a duration such as "5s", got "5 parsecs"`}},
		"enum refused":          {cfg: base(map[string]any{"mode": "ssl"}), wantErr: &ConfigError{Field: "mode", Msg: `"ssl" is not one of starttls, tls, plain`}},
		"list item enum":        {cfg: base(map[string]any{"scopes": []string{"a", "z"}}), wantErr: &ConfigError{Field: "scopes", Msg: `"z" is not one of a, b, c`}},
		"list wrong item":       {cfg: base(map[string]any{"tags": []any{"a", 2}}), wantErr: &ConfigError{Field: "tags", Msg: "item 1 must be a string, got int"}},
		"list from string":      {cfg: base(map[string]any{"tags": "a,b"}), wantErr: &ConfigError{Field: "tags", Msg: "must be a list of strings, got string"}},
		"bad default": {specs: []FieldSpec{{Name: "n", Type: FieldInt, Default: "many"}}, cfg: nil,
			wantErr: &ConfigError{Field: "n", Msg: `bad default "many" (plugin bug): must be an int, got "many"`}},
		"unknown type": {specs: []FieldSpec{{Name: "n", Type: "float"}}, cfg: map[string]any{"n": 1},
			wantErr: &ConfigError{Field: "n", Msg: `unknown field type "float" (plugin bug)`}},
		"secret enum refused, value not shown": {specs: []FieldSpec{{Name: "key", Type: FieldString, Secret: true, Enum: []string{"a", "b"}}},
			cfg:     map[string]any{"key": "hunter2-secret"},
			wantErr: &ConfigError{Field: "key", Msg: "must be a string (one of a, b); the value is secret and not shown"}},
		"secret int refused, value not shown": {specs: []FieldSpec{{Name: "pin", Type: FieldInt, Secret: true}},
			cfg:     map[string]any{"pin": "hunter2-secret"},
			wantErr: &ConfigError{Field: "pin", Msg: "must be an int; the value is secret and not shown"}},
		"secret required empty": {specs: []FieldSpec{{Name: "token", Type: FieldString, Secret: true, Required: true}},
			cfg:     map[string]any{"token": ""},
			wantErr: &ConfigError{Field: "token", Msg: "must be a non-empty string; the value is secret and not shown"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := specs
			if tc.specs != nil {
				s = tc.specs
			}
			got, err := CheckConfig(s, tc.cfg)
			if tc.wantErr != nil {
				var ce *ConfigError
				if !errors.As(err, &ce) {
					t.Fatalf("error = %v, want *ConfigError", err)
				}
				if diff := cmp.Diff(tc.wantErr, ce); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			// Checked config passes again unchanged (the plugin re-checks it).
			again, err := CheckConfig(s, got)
			if err != nil {
				t.Fatalf("re-check: %v", err)
			}
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("re-check changed the config (-first +second):\n%s", diff)
			}
		})
	}
}

func TestConfigErrorMessage(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		err  *ConfigError
		want string
	}{
		"field":    {err: &ConfigError{Field: "port", Msg: "out of range"}, want: `config field "port": out of range`},
		"no field": {err: &ConfigError{Msg: "bad"}, want: "config: bad"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCheckConfigMap covers map fields: string values only, cloned, and
// errors that never repeat a secret map's values.
func TestCheckConfigMap(t *testing.T) {
	t.Parallel()
	specs := []FieldSpec{{Name: "hooks", Type: FieldMap}, {Name: "keys", Type: FieldMap, Secret: true}}
	tests := map[string]struct {
		cfg     map[string]any
		want    map[string]any
		wantErr *ConfigError
	}{
		"absent":     {cfg: map[string]any{}, want: map[string]any{}},
		"any map":    {cfg: map[string]any{"hooks": map[string]any{"ops": "https://x"}}, want: map[string]any{"hooks": map[string]string{"ops": "https://x"}}},
		"string map": {cfg: map[string]any{"hooks": map[string]string{"ops": "y"}}, want: map[string]any{"hooks": map[string]string{"ops": "y"}}},
		"empty map":  {cfg: map[string]any{"hooks": map[string]any{}}, want: map[string]any{"hooks": map[string]string{}}},
		"not a map":  {cfg: map[string]any{"hooks": "ops"}, wantErr: &ConfigError{Field: "hooks", Msg: "must be a map of strings, got string"}},
		"list":       {cfg: map[string]any{"hooks": []any{"ops"}}, wantErr: &ConfigError{Field: "hooks", Msg: "must be a map of strings, got list"}},
		"int entry":  {cfg: map[string]any{"hooks": map[string]any{"ops": 1}}, wantErr: &ConfigError{Field: "hooks", Msg: `entry "ops" must be a string, got int`}},
		"secret bad": {cfg: map[string]any{"keys": map[string]any{"ops": 1, "dev": "hunter2hunter2"}}, wantErr: &ConfigError{Field: "keys", Msg: "must be a map of strings; the value is secret and not shown"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := CheckConfig(specs, tc.cfg)
			if tc.wantErr != nil {
				var ce *ConfigError
				if !errors.As(err, &ce) {
					t.Fatalf("error = %v, want %v", err, tc.wantErr)
				}
				if diff := cmp.Diff(tc.wantErr, ce); diff != "" {
					t.Errorf("ConfigError (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
