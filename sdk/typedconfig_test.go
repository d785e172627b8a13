package sdk

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type testConfig struct {
	URL     string        `config:"url,required" help:"Receiver URL."`
	Token   string        `config:"token,secret" help:"Bearer token."`
	Port    int           `config:"port" default:"587"`
	Verbose bool          `config:"verbose"`
	Timeout time.Duration `config:"timeout" default:"10s"`
	Tags    []string      `config:"tags" default:"a,b"`
	Mode    string        `config:"mode" default:"json" enum:"json,form"`
	Skipped string        `config:"-"`

	derived string
}

func (c *testConfig) Validate() error {
	if strings.HasPrefix(c.URL, "ftp:") {
		return &ConfigError{Field: "url", Msg: "must be http or https"}
	}
	c.derived = "checked " + c.URL
	return nil
}

func TestConfigFields(t *testing.T) {
	t.Parallel()
	got, err := ConfigFields(testConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := []FieldSpec{
		{Name: "url", Type: FieldString, Required: true, Description: "Receiver URL."},
		{Name: "token", Type: FieldString, Secret: true, Description: "Bearer token."},
		{Name: "port", Type: FieldInt, Default: "587"},
		{Name: "verbose", Type: FieldBool},
		{Name: "timeout", Type: FieldDuration, Default: "10s"},
		{Name: "tags", Type: FieldList, Default: "a,b"},
		{Name: "mode", Type: FieldString, Default: "json", Enum: []string{"json", "form"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if p, err := ConfigFields(&testConfig{}); err != nil || !cmp.Equal(p, got) {
		t.Errorf("pointer: %v, %v", p, err)
	}
}

func TestConfigFieldsRefusesBadStructs(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		v    any
		want string
	}{
		"not a struct": {v: 5, want: "wants a struct, got int"},
		"no tag":       {v: struct{ A string }{}, want: `field A has no "config" tag`},
		"bad type": {v: struct {
			F float64 `config:"f"`
		}{}, want: "field F has type float64"},
		"twice": {v: struct {
			A, B string `config:"x"`
		}{}, want: `name "x" used twice`},
		"required default": {v: struct {
			A string `config:"a,required" default:"x"`
		}{}, want: "required and has a default"},
		"bad default": {v: struct {
			A int `config:"a" default:"many"`
		}{}, want: `bad default "many"`},
		"default not enum": {v: struct {
			A string `config:"a" default:"x" enum:"y,z"`
		}{}, want: `"x" is not one of y, z`},
		"unknown option": {v: struct {
			A string `config:"a,requird"`
		}{}, want: `unknown option "requird"`},
		"empty name": {v: struct {
			A string `config:",secret"`
		}{}, want: "empty name"},
		"map default": {v: struct {
			A map[string]string `config:"a" default:"x"`
		}{}, want: "a map field takes no default"},
		"nil":               {v: nil, want: "wants a struct, got <nil>"},
		"pointer to nonstr": {v: new(int), want: "wants a struct, got *int"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := ConfigFields(tc.v)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestDecodeConfig(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		raw     map[string]any
		want    testConfig
		wantErr *ConfigError
	}{
		"defaults": {
			raw:  map[string]any{"url": "https://x"},
			want: testConfig{URL: "https://x", Port: 587, Timeout: 10 * time.Second, Tags: []string{"a", "b"}, Mode: "json", derived: "checked https://x"},
		},
		"every type from loader shapes": {
			raw: map[string]any{"url": "http://y", "token": "t0k3n", "port": "2525", "verbose": "true",
				"timeout": "1m", "tags": []any{"x"}, "mode": "form"},
			want: testConfig{URL: "http://y", Token: "t0k3n", Port: 2525, Verbose: true, Timeout: time.Minute,
				Tags: []string{"x"}, Mode: "form", derived: "checked http://y"},
		},
		"unknown key": {
			raw:     map[string]any{"url": "http://y", "Skipped": "no"},
			wantErr: &ConfigError{Field: "Skipped", Msg: "unknown field (known: url, token, port, verbose, timeout, tags, mode)"},
		},
		"missing required": {raw: map[string]any{}, wantErr: &ConfigError{Field: "url", Msg: "required"}},
		"wrong type":       {raw: map[string]any{"url": "u", "port": true}, wantErr: &ConfigError{Field: "port", Msg: "must be an int, got bool"}},
		"secret not shown": {raw: map[string]any{"url": "u", "token": 12345}, wantErr: &ConfigError{Field: "token", Msg: "must be a string; the value is secret and not shown"}},
		"enum":             {raw: map[string]any{"url": "u", "mode": "xml"}, wantErr: &ConfigError{Field: "mode", Msg: `"xml" is not one of json, form`}},
		"validate names":   {raw: map[string]any{"url": "ftp://z"}, wantErr: &ConfigError{Field: "url", Msg: "must be http or https"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var got testConfig
			err := DecodeConfig(tc.raw, &got)
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
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(testConfig{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeConfigKeepsPresetValuesOfAbsentFields(t *testing.T) {
	t.Parallel()
	got := testConfig{Verbose: true, Token: "preset"}
	if err := DecodeConfig(map[string]any{"url": "http://a"}, &got); err != nil {
		t.Fatal(err)
	}
	if !got.Verbose || got.Token != "preset" {
		t.Errorf("absent fields changed: %+v", got)
	}
}

type plainError struct {
	URL string `config:"url"`
}

func (plainError) Validate() error { return errors.New("nope") }

func TestDecodeConfigWrapsPlainValidateErrors(t *testing.T) {
	t.Parallel()
	err := DecodeConfig(nil, &plainError{})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "" || ce.Msg != "nope" {
		t.Errorf("error = %#v, want a *ConfigError without a field", err)
	}
}

func TestDecodeConfigRefusesNonPointers(t *testing.T) {
	t.Parallel()
	for _, v := range []any{testConfig{}, (*testConfig)(nil), new(int), nil} {
		if err := DecodeConfig(nil, v); err == nil || !strings.Contains(err.Error(), "non-nil pointer to a struct") {
			t.Errorf("DecodeConfig(%T): %v", v, err)
		}
	}
}
