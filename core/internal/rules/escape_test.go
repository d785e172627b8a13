package rules_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
)

const slackRules = `
channel "SLACK" {
  providers = [{ plugin = "slack" }]
}
channel "OPS" {
  text_format = "plain"
  providers   = [{ plugin = "slack" }]
}
channel "EMAIL" {
  providers = [{ plugin = "email" }]
}
channel "ALERTS" {
  providers = [{ plugin = "slack" }]
}
event "ALERT" {
  audience { user = "u1" }
  mandatory = ["SLACK", "OPS", "EMAIL", "ALERTS"]
  inbox {
    title = "Alert for {{ .payload.who }}"
    body  = "{{ .payload.msg }} ({{ .recipient.attributes.team }}) <!here>"
  }
  template "SLACK" {
    body = "{{ .payload.msg }} [{{ range .payload.tags }}{{ . }},{{ end }}] {{ if eq .payload.who \"<b>\" }}bold{{ end }} <!here|ops>"
  }
}
`

// TestSlackEscapesInterpolatedValues renders a payload that tries to
// mention everyone and forge a link: on a Slack channel its values come out
// as text, while the operator's own markup in the template stays.
func TestSlackEscapesInterpolatedValues(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "rules.hcl")
	if err := os.WriteFile(p, []byte(slackRules), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := rulesfile.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	ev := rules.Event{EventID: "e", Type: "ALERT", Payload: json.RawMessage(
		`{"who": "<b>", "msg": "<!channel> & <https://evil.example|your bank>", "tags": ["<@U123>", "ok"]}`)}
	r := directory.Recipient{UserID: "u1", Attributes: map[string]string{"team": "<!subteam^S1>"}}
	cases := map[string]struct {
		channel     string
		title, body string
	}{
		"slack template": {channel: "SLACK", title: "Alert for &lt;b&gt;",
			body: "&lt;!channel&gt; &amp; &lt;https://evil.example|your bank&gt; [&lt;@U123&gt;,ok,]  <!here|ops>"},
		"slack channel using the inbox text": {channel: "ALERTS", title: "Alert for &lt;b&gt;",
			body: "&lt;!channel&gt; &amp; &lt;https://evil.example|your bank&gt; (&lt;!subteam^S1&gt;) <!here>"},
		"text_format plain on a slack channel": {channel: "OPS", title: "Alert for <b>",
			body: "<!channel> & <https://evil.example|your bank> (<!subteam^S1>) <!here>"},
		"email is not slack": {channel: "EMAIL", title: "Alert for <b>",
			body: "<!channel> & <https://evil.example|your bank> (<!subteam^S1>) <!here>"},
		"inbox": {channel: "", title: "Alert for <b>",
			body: "<!channel> & <https://evil.example|your bank> (<!subteam^S1>) <!here>"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, err := rs.Render(ev, r, tc.channel)
			if err != nil {
				t.Fatal(err)
			}
			if out.Title != tc.title || out.Body != tc.body {
				t.Fatalf("got title %q body %q\nwant title %q body %q", out.Title, out.Body, tc.title, tc.body)
			}
		})
	}
	if ch, _ := rs.Channel("SLACK"); ch.TextFormat != channel.TextSlack {
		t.Fatalf("a channel of the slack plugin defaults to %q", ch.TextFormat)
	}
}
