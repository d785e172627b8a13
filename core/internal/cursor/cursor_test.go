package cursor

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRoundTripAndTampering(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	p := Position{At: time.Date(2026, 11, 22, 10, 0, 0, 123456000, time.UTC), ID: "0190d0a0-0000-7000-8000-000000000001", Scope: "tenant=a"}
	c := Encode(key, p)
	got, err := Decode(key, c, "tenant=a")
	if err != nil || !got.At.Equal(p.At) || got.ID != p.ID {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	cases := map[string]struct{ cursor, scope string }{
		"other scope":   {c, "tenant=b"},
		"flipped char":  {flip(c, 3), "tenant=a"},
		"flipped mac":   {flip(c, len(c)-2), "tenant=a"},
		"truncated":     {c[:len(c)-4], "tenant=a"},
		"empty":         {"", "tenant=a"},
		"not base64":    {"!!!", "tenant=a"},
		"too long":      {strings.Repeat("A", MaxLen+1), "tenant=a"},
		"other key":     {Encode([]byte("another key"), p), "tenant=a"},
		"mac only":      {c[len(c)-20:], "tenant=a"},
		"unsigned json": {"eyJ0IjoiMjAyNi0xMS0yMlQxMDowMDowMFoiLCJpIjoieCJ9", "tenant=a"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := Decode(key, tc.cursor, tc.scope); !errors.Is(err, ErrInvalid) {
				t.Fatalf("want ErrInvalid, got %v", err)
			}
		})
	}
}

func flip(s string, i int) string {
	b := []byte(s)
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

func FuzzDecode(f *testing.F) {
	key := []byte("k")
	f.Add(Encode(key, Position{At: time.Unix(1, 0), ID: "x"}))
	f.Add("")
	f.Add("%%%")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Decode(key, s, "")
		if err == nil && p.ID == "" {
			t.Fatalf("accepted a cursor without a position: %q", s)
		}
	})
}
