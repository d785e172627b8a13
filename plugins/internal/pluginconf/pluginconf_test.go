package pluginconf

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/sdk"
)

var specs = []sdk.FieldSpec{
	{Name: "host", Type: sdk.FieldString, Required: true},
	{Name: "port", Type: sdk.FieldInt, Default: "25"},
	{Name: "timeout", Type: sdk.FieldDuration, Default: "5s"},
	{Name: "tags", Type: sdk.FieldList},
}

type conf struct {
	Host    string        `mapstructure:"host"`
	Port    int           `mapstructure:"port"`
	Timeout time.Duration `mapstructure:"timeout"`
	Tags    []string      `mapstructure:"tags"`
}

func TestDecode(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		raw       map[string]any
		want      conf
		wantField string
	}{
		"defaults":     {raw: map[string]any{"host": "h"}, want: conf{Host: "h", Port: 25, Timeout: 5 * time.Second}},
		"loader types": {raw: map[string]any{"host": "h", "port": float64(587), "timeout": "1m", "tags": []any{"a"}}, want: conf{Host: "h", Port: 587, Timeout: time.Minute, Tags: []string{"a"}}},
		"unknown key":  {raw: map[string]any{"host": "h", "hots": "x"}, wantField: "hots"},
		"wrong type":   {raw: map[string]any{"host": "h", "port": "smtp"}, wantField: "port"},
		"missing":      {raw: map[string]any{}, wantField: "host"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var got conf
			err := Decode(tc.raw, specs, &got)
			if tc.wantField != "" {
				var ce *sdk.ConfigError
				if !errors.As(err, &ce) || ce.Field != tc.wantField {
					t.Fatalf("Decode error = %v, want a ConfigError naming %q", err, tc.wantField)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decoded (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeStructMismatchIsAPluginBug(t *testing.T) {
	t.Parallel()
	var bad struct {
		Host int `mapstructure:"host"`
	}
	err := Decode(map[string]any{"host": "h"}, specs[:1], &bad)
	var ce *sdk.ConfigError
	if !errors.As(err, &ce) || ce.Field != "host" {
		t.Errorf("Decode error = %v, want a ConfigError naming host", err)
	}
}
