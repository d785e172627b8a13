package durfmt

import (
	"testing"
	"time"
)

func TestShort(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{500 * time.Millisecond, "500ms"},
		{2 * time.Second, "2s"},
		{10 * time.Minute, "10m"},
		{90 * time.Minute, "1h30m"},
		{2 * time.Hour, "2h"},
		{168 * time.Hour, "168h"},
		{time.Hour + time.Second, "1h0m1s"},
		{-10 * time.Minute, "-10m"},
	} {
		if got := Short(tc.d); got != tc.want {
			t.Errorf("Short(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
