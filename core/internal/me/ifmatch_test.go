package me

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestIfMatch(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		header []string
		want   int64
		ok     bool
	}{
		"absent":        {nil, 0, true},
		"any":           {[]string{"*"}, 0, true},
		"an ETag":       {[]string{`"12"`}, 12, true},
		"weak":          {[]string{`W/"12"`}, 0, false},
		"unquoted":      {[]string{`12`}, 0, false},
		"zero":          {[]string{`"0"`}, 0, false},
		"negative":      {[]string{`"-3"`}, 0, false},
		"two values":    {[]string{`"1"`, `"2"`}, 0, false},
		"a list":        {[]string{`"1", "2"`}, 0, false},
		"empty quotes":  {[]string{`""`}, 0, false},
		"too large":     {[]string{`"99999999999999999999"`}, 0, false},
		"text":          {[]string{`"abc"`}, 0, false},
		"lone quote":    {[]string{`"`}, 0, false},
		"any in a list": {[]string{"*", `"1"`}, 0, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("PUT", "/v1/me/preferences", nil)
			for _, v := range tc.header {
				r.Header.Add("If-Match", v)
			}
			w := httptest.NewRecorder()
			got, ok := ifMatch(w, r)
			if got != tc.want || ok != tc.ok {
				t.Errorf("ifMatch(%q) = %d, %v; want %d, %v", tc.header, got, ok, tc.want, tc.ok)
			}
			if !ok && w.Code != http.StatusBadRequest {
				t.Errorf("refused with %d, want 400", w.Code)
			}
		})
	}
}

// FuzzIfMatch: any header is either taken (a positive version, or none)
// or refused with 400; a version taken is one etag writes exactly as the
// header (around optional whitespace) says it.
func FuzzIfMatch(f *testing.F) {
	for _, s := range []string{`"1"`, "*", `W/"1"`, `""`, `"-1"`, "\x00", `"1`, `1"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r := httptest.NewRequest("PUT", "/v1/me/preferences", nil)
		r.Header["If-Match"] = []string{h}
		w := httptest.NewRecorder()
		n, ok := ifMatch(w, r)
		switch {
		case !ok && w.Code != http.StatusBadRequest:
			t.Fatalf("%q refused with %d", h, w.Code)
		case ok && n < 0:
			t.Fatalf("%q: version %d", h, n)
		case ok && n > 0 && etag(n) != strings.TrimSpace(h):
			t.Fatalf("%q taken as version %d", h, n)
		}
	})
}
