package api

import (
	"net/url"
	"reflect"
	"testing"
)

func TestParseQueryNamesTheParameter(t *testing.T) {
	cases := []struct{ raw, field string }{
		{"severity=%zz", "severity"},
		{"q=%", "q"},
		{"limit=%2", "limit"},
		{"%zz=1", "query"},
		{"a=1;b=2", "a"},
		{"other=1", "other"},
		{"=1", "query"},
	}
	for _, c := range cases {
		if _, f, d := ParseQuery(c.raw, "severity", "q", "limit", "a"); f != c.field || d == "" {
			t.Errorf("%q: field %q detail %q, want field %q", c.raw, f, d, c.field)
		}
	}
	q, f, d := ParseQuery("q=a%20b&q=%C3%A9&limit=&&severity=x+y", "severity", "q", "limit")
	if d != "" || !reflect.DeepEqual(q, url.Values{"q": {"a b", "é"}, "limit": {""}, "severity": {"x y"}}) {
		t.Fatalf("%v %q %q", q, f, d)
	}
}

// FuzzParseQuery: the strict parser never panics, and whatever it accepts
// url.ParseQuery reads the same way.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"a=1&b=2", "a=%zz", "%", "a=1;b", "a&&b=", "a=%C3%A9+x", "=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, field, detail := parseQuery(raw, false, nil)
		if detail != "" {
			if field == "" {
				t.Fatalf("%q refused without naming a parameter", raw)
			}
			return
		}
		want, err := url.ParseQuery(raw)
		if err != nil {
			t.Fatalf("%q: accepted, but url.ParseQuery refuses it: %v", raw, err)
		}
		if len(want) == 0 && len(q) == 0 {
			return
		}
		if !reflect.DeepEqual(q, want) {
			t.Fatalf("%q: %v, url.ParseQuery %v", raw, q, want)
		}
	})
}
