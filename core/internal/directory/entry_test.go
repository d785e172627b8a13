package directory_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/directory"
)

// TestDecodeEntry: one entry decodes with the file's checks, and every
// problem names its field path.
func TestDecodeEntry(t *testing.T) {
	t.Parallel()
	var r directory.Recipient
	if ps := directory.DecodeEntry([]byte(`{"user_id":"u1","user_type":"STAFF","quiet_hours":{"start":"22:00","end":"07:00"}}`), &r, "body", directory.Limits{}); len(ps) != 0 {
		t.Fatalf("good recipient: %v", ps)
	}
	if !r.Active || r.QuietHours == nil || r.QuietHours.End != "07:00" {
		t.Fatalf("decoded %+v (active defaults to true)", r)
	}
	tests := map[string]struct {
		in     string
		entry  func() any
		fields []string
	}{
		"unknown and wrong type": {`{"user_id":"u","user_type":1,"x":2}`, func() any { return &directory.Recipient{} }, []string{"user_type", "x"}},
		"device keys":            {`{"kind":"webpush","endpoint":"ftp://x","p256dh":"AA","auth":"AA"}`, func() any { return &directory.Device{} }, []string{"endpoint", "p256dh", "auth"}},
		"duplicate switch":       {`{"channels":[{"channel":"SMS","enabled":true},{"channel":"SMS","enabled":true},{"channel":"SMS","enabled":false}]}`, func() any { return &directory.UserPreferences{} }, []string{"channels[1]", "channels[2]"}},
		"settings roles":         {`{"channels":[{"channel":"SMS","enabled":true,"roles":["A","A\u0001"]}]}`, func() any { return &directory.GroupSettings{} }, []string{"channels[0].roles[1]"}},
		"zone and window":        {`{"time_zone":"Local","quiet_hours":{"start":"9:00","end":"10:00"}}`, func() any { return &directory.UserPreferences{} }, []string{"time_zone", "quiet_hours.start"}},
		"not an object":          {`[]`, func() any { return &directory.Group{} }, []string{""}},
		"syntax":                 {`{"key":`, func() any { return &directory.Group{} }, []string{""}},
		"depth":                  {strings.Repeat(`{"a":`, 20) + "1" + strings.Repeat("}", 20), func() any { return &directory.Group{} }, []string{""}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var ps directory.Problems
			switch v := tc.entry().(type) {
			case *directory.Recipient:
				ps = directory.DecodeEntry([]byte(tc.in), v, "body", directory.Limits{})
			case *directory.Device:
				ps = directory.DecodeEntry([]byte(tc.in), v, "body", directory.Limits{})
			case *directory.UserPreferences:
				ps = directory.DecodeEntry([]byte(tc.in), v, "body", directory.Limits{})
			case *directory.GroupSettings:
				ps = directory.DecodeEntry([]byte(tc.in), v, "body", directory.Limits{})
			case *directory.Group:
				ps = directory.DecodeEntry([]byte(tc.in), v, "body", directory.Limits{MaxDepth: 8})
			}
			var got []string
			for _, p := range ps {
				got = append(got, p.Field)
			}
			if diff := cmp.Diff(tc.fields, got); diff != "" {
				t.Fatalf("fields (-want +got):\n%s\n%v", diff, ps)
			}
		})
	}
}

// TestMergePatch: RFC 7396's examples that apply to objects.
func TestMergePatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ doc, patch, want string }{
		{`{"a":"b"}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"b"}`, `{"b":"c"}`, `{"a":"b","b":"c"}`},
		{`{"a":"b"}`, `{"a":null}`, `{}`},
		{`{"a":{"b":"c"}}`, `{"a":{"b":"d","c":null}}`, `{"a":{"b":"d"}}`},
		{`{"a":[{"b":"c"}]}`, `{"a":[1]}`, `{"a":[1]}`},
		{`{"n":1}`, `{"m":12345678901234567890}`, `{"m":12345678901234567890,"n":1}`},
	} {
		got, ps := directory.MergePatch([]byte(tc.doc), []byte(tc.patch), "body", directory.Limits{})
		if len(ps) > 0 || string(got) != tc.want {
			t.Errorf("MergePatch(%s, %s) = %s %v, want %s", tc.doc, tc.patch, got, ps, tc.want)
		}
	}
	for _, bad := range []string{`[1]`, `"x"`, `{"a":`, "{\"a\":\"\xff\"}", `{"a":1,"a":2}`} {
		if _, ps := directory.MergePatch([]byte(`{}`), []byte(bad), "body", directory.Limits{}); len(ps) != 1 {
			t.Errorf("MergePatch of %q: %v, want one problem", bad, ps)
		}
	}
}

// FuzzDecodeEntry: no input panics DecodeEntry or MergePatch; a recipient
// that decodes re-encodes to JSON that decodes to the same recipient, and
// every problem's field and message are valid UTF-8.
func FuzzDecodeEntry(f *testing.F) {
	for _, s := range []string{
		`{"user_id":"u","user_type":"T","devices":[{"kind":"apns","token":"zz"}],"quiet_hours":{"start":"22:00","end":"07:00"}}`,
		`{"user_type":"T","attributes":{"a":"b"},"active":false,"time_zone":"Europe/Rome"}`,
		`{"locale":null,"phone":"+390600000001"}`,
		"{\"user_type\":\"\xff\"}",
		`{"user_type":"T\u0000"}`,
		`[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]`,
	} {
		f.Add([]byte(s), []byte(`{"locale":"it","email":null}`))
	}
	f.Fuzz(func(t *testing.T, data, patch []byte) {
		lim := directory.Limits{MaxDepth: 8}
		var r directory.Recipient
		ps := directory.DecodeEntry(data, &r, "body", lim)
		for _, p := range ps {
			if !utf8.ValidString(p.Field) || !utf8.ValidString(p.Msg) {
				t.Fatalf("problem not UTF-8: %q %q", p.Field, p.Msg)
			}
		}
		if len(ps) == 0 {
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			var again directory.Recipient
			if ps := directory.DecodeEntry(b, &again, "body", lim); len(ps) > 0 {
				t.Fatalf("re-encoded %s: %v", b, ps)
			}
			if diff := cmp.Diff(r, again); diff != "" {
				t.Fatalf("round trip (-first +again):\n%s", diff)
			}
			merged, mps := directory.MergePatch(b, patch, "body", lim)
			if len(mps) == 0 {
				var m directory.Recipient
				_ = directory.DecodeEntry(merged, &m, "body", lim)
			}
		}
		var p directory.UserPreferences
		_ = directory.DecodeEntry(data, &p, "body", lim)
		var d directory.Device
		_ = directory.DecodeEntry(data, &d, "body", lim)
	})
}
