package retryafter

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		value string
		want  time.Duration
	}{
		"empty":     {value: "", want: 0},
		"seconds":   {value: "7", want: 7 * time.Second},
		"padded":    {value: " 120 ", want: 2 * time.Minute},
		"zero":      {value: "0", want: 0},
		"negative":  {value: "-3", want: 0},
		"http date": {value: now.Add(90 * time.Second).Format(http.TimeFormat), want: 90 * time.Second},
		"past date": {value: now.Add(-time.Hour).Format(http.TimeFormat), want: 0},
		"nonsense":  {value: "soon", want: 0},
		"fraction":  {value: "1.5", want: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, Parse(tc.value, now)); diff != "" {
				t.Errorf("Parse(%q) (-want +got):\n%s", tc.value, diff)
			}
		})
	}
}

func TestFromDefault(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	if got := From(h, time.Minute); got != time.Minute {
		t.Errorf("From(no header) = %v, want the default 1m", got)
	}
	h.Set("Retry-After", "5")
	if got := From(h, time.Minute); got != 5*time.Second {
		t.Errorf("From(5) = %v, want 5s", got)
	}
}
