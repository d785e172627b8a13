package rulesfile

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRulesChannelBreaker(t *testing.T) {
	t.Parallel()
	const event = `
event "PING" {
  audience {
    user_type = "ADMIN"
  }
  mandatory = ["WEBSOCKET"]
}
`
	tests := map[string]struct {
		file    string
		body    string
		want    time.Duration
		wantErr string
	}{
		"HCL block": {
			file: "a.hcl",
			body: `
channel "WEBSOCKET" {
  providers = [{ plugin = "websocket" }]
  breaker {
    cooldown = "750ms"
  }
}
` + event,
			want: 750 * time.Millisecond,
		},
		"YAML mapping": {
			file: "a.yaml",
			body: `
channel:
  WEBSOCKET:
    providers: [{plugin: websocket}]
    breaker: {cooldown: 2s}
event:
  PING:
    audience: [{user_type: ADMIN}]
    mandatory: [WEBSOCKET]
`,
			want: 2 * time.Second,
		},
		"no breaker block: the host's default": {
			file: "a.hcl",
			body: `
channel "WEBSOCKET" {
  providers = [{ plugin = "websocket" }]
}
` + event,
			want: 0,
		},
		"bad duration": {
			file: "a.hcl",
			body: `
channel "WEBSOCKET" {
  providers = [{ plugin = "websocket" }]
  breaker {
    cooldown = "ten seconds"
  }
}
` + event,
			wantErr: `a.hcl:5: channel "WEBSOCKET": breaker.cooldown: bad duration "ten seconds": want a Go duration such as 2s or 10m`,
		},
		"negative": {
			file: "a.yaml",
			body: `
channel:
  WEBSOCKET:
    providers: [{plugin: websocket}]
    breaker:
      cooldown: -1s
event:
  PING:
    audience: [{user_type: ADMIN}]
    mandatory: [WEBSOCKET]
`,
			wantErr: `a.yaml:6: channel "WEBSOCKET": breaker.cooldown: must not be negative, got -1s`,
		},
		"unknown field": {
			file: "a.hcl",
			body: `
channel "WEBSOCKET" {
  providers = [{ plugin = "websocket" }]
  breaker {
    cooldwn = "1s"
  }
}
` + event,
			wantErr: `a.hcl:5: channel "WEBSOCKET": breaker.cooldwn: unknown field "cooldwn" (did you mean "cooldown"?)`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := writeRulesFiles(t, map[string]string{tc.file: tc.body})
			rs, err := Load(filepath.Join(dir, tc.file))
			if tc.wantErr != "" {
				var errs Errors
				if !errors.As(err, &errs) {
					t.Fatalf("error %v (%T), want Errors", err, err)
				}
				got := strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")
				if diff := cmp.Diff(tc.wantErr, got); diff != "" {
					t.Errorf("error mismatch (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ch, ok := rs.Channel("WEBSOCKET")
			if !ok {
				t.Fatal("no WEBSOCKET channel")
			}
			if ch.Breaker.Cooldown != tc.want {
				t.Errorf("breaker cooldown = %s, want %s", ch.Breaker.Cooldown, tc.want)
			}
		})
	}
}
