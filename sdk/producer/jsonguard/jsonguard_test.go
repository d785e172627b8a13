package jsonguard_test

import (
	"strings"
	"testing"

	"github.com/heraldhq/herald/sdk/producer/jsonguard"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		text string
		want string // "" when the text passes
	}{
		"plain":                 {text: `{"a":[1,"b",{"c":null}],"é":"ü"}`},
		"escaped quote":         {text: `{"a":"\"\\u0000"}`},
		"paired surrogates":     {text: `{"a":"\ud83d\ude00"}`},
		"escaped replacement":   {text: `{"a":"\ufffd"}`},
		"nul escape":            {text: `{"a":"x\u0000"}`, want: `the escape \u0000 (NUL) at byte 7`},
		"nul escape in key":     {text: `{"\u0000":1}`, want: `\u0000`},
		"raw nul":               {text: "{\"a\":\"\x00\"}", want: "a NUL byte"},
		"invalid utf-8":         {text: "{\"a\":\"\xff\"}", want: "invalid UTF-8 at byte 6"},
		"invalid utf-8 outside": {text: "{\xc3}", want: "invalid UTF-8"},
		"utf-8 surrogate":       {text: "{\"a\":\"\xed\xa0\x80\"}", want: "invalid UTF-8"},
		"lone high surrogate":   {text: `{"a":"\ud800"}`, want: "unpaired surrogate"},
		"high then other":       {text: `{"a":"\ud800\u0041"}`, want: "unpaired surrogate"},
		"lone low surrogate":    {text: `{"a":"\udc00"}`, want: "unpaired surrogate"},
		"depth at limit":        {text: strings.Repeat("[", 4) + strings.Repeat("]", 4)},
		"too deep":              {text: strings.Repeat("[", 5) + strings.Repeat("]", 5), want: "nested deeper than 4 levels at byte 4"},
		"brackets in strings":   {text: `["[[[[[[[["]`},
		"truncated escape":      {text: `"\u00`},
		"trailing backslash":    {text: `"\`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := jsonguard.Check([]byte(tc.text), 4)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check(%q) = %v, want nil", tc.text, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Check(%q) = %v, want an error with %q", tc.text, err, tc.want)
			}
		})
	}
}
