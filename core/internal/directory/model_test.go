package directory_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/directory"
)

func TestQuietHoursMinutes(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		qh      directory.QuietHours
		wantErr string
	}{
		"overnight":      {qh: directory.QuietHours{Start: "22:00", End: "08:00"}},
		"midnight start": {qh: directory.QuietHours{Start: "00:00", End: "06:30"}},
		"no colon":       {qh: directory.QuietHours{Start: "2200", End: "08:00"}, wantErr: `start: bad time "2200": want HH:MM`},
		"hour 24":        {qh: directory.QuietHours{Start: "22:00", End: "24:00"}, wantErr: `end: bad time "24:00": want HH:MM between 00:00 and 23:59`},
		"one digit":      {qh: directory.QuietHours{Start: "9:00", End: "10:00"}, wantErr: `start: bad time "9:00": want HH:MM`},
		"empty window":   {qh: directory.QuietHours{Start: "08:00", End: "08:00"}, wantErr: `end: equals start (08:00): the window would be empty`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, _, err := tc.qh.Minutes()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tc.wantErr, got); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
