package devpeer

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk"
)

// TestSlackWebhookExampleRoutesAdminAlerts is examples/slack-webhook
// without the database and the broker: the admin alert of alert.json, with
// the rules and directory as written, is posted to the ops team's Slack
// place once (the admins get the inbox row) — through
// the real slack plugin binary in webhook mode and the webhook stand-in —
// on the "alerts" webhook (team:ops's SLACK destination), or on "oncall" when the
// alert pages (the template's data.webhook), with its Block Kit blocks.
func TestSlackWebhookExampleRoutesAdminAlerts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the slack plugin binary")
	}
	root := testenv.RepoRoot(t)
	ex := filepath.Join(root, "examples", "slack-webhook")
	p, sink := startPeers(t)
	t.Setenv("HERALD_SLACK_ALERTS_WEBHOOK", p.HTTPURL()+"/services/T0HERALDDEV/B0ALERTS/demo")
	t.Setenv("HERALD_SLACK_ONCALL_WEBHOOK", p.HTTPURL()+"/services/T0HERALDDEV/B0ONCALL/demo")
	rs, err := rulesfile.Load(filepath.Join(ex, "rules.hcl"))
	if err != nil {
		t.Fatalf("load rules: %v", err)
	}
	var dir directory.Directory
	readJSON(t, filepath.Join(ex, "directory.json"), &dir)
	var body struct {
		EventID       string          `json:"event_id"`
		Type          string          `json:"type"`
		AggregateType string          `json:"aggregate_type"`
		AggregateID   string          `json:"aggregate_id"`
		Payload       json.RawMessage `json:"payload"`
	}
	readJSON(t, filepath.Join(ex, "alert.json"), &body)
	paged := strings.Replace(string(body.Payload), `"level": "warning"`, `"level": "page"`, 1)
	if paged == string(body.Payload) {
		t.Fatal(`alert.json has no "level": "warning" to turn into a page`)
	}

	ch, ok := rs.Channel("SLACK")
	if !ok || len(ch.Providers) != 1 || ch.Providers[0].Plugin != "slack" {
		t.Fatalf("SLACK channel = %+v, want one slack provider", ch)
	}
	binDir := testenv.PluginBinaries(t, "slack")
	plug, logs := launchPlugin(t, filepath.Join(binDir, "herald-plugin-slack"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	desc, err := plug.Describe(ctx, sdk.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	checked, err := sdk.CheckConfig(desc.Description.Config, maps.Clone(ch.Providers[0].Config))
	if err != nil {
		t.Fatalf("the provider config does not fit the plugin's fields: %v", err)
	}
	if _, err := plug.Configure(ctx, sdk.ConfigureRequest{ProviderName: ch.Providers[0].Name, Config: checked}); err != nil {
		t.Fatalf("configure: %v", err)
	}
	if h, err := plug.Health(ctx, sdk.HealthRequest{}); err != nil || !h.Healthy {
		t.Fatalf("health against the webhook stand-in: %+v %v\nplugin log:\n%s", h, err, logs)
	}

	for _, tc := range []struct {
		name, payload, hook string
	}{
		{"warning", string(body.Payload), "B0ALERTS"},
		{"page", paged, "B0ONCALL"},
	} {
		ev := rules.Event{TenantID: "demo", EventID: body.EventID + "-" + tc.name, Type: body.Type, AggregateType: body.AggregateType,
			AggregateID: body.AggregateID, Payload: json.RawMessage(tc.payload), OccurredAt: time.Now()}
		if err := rs.ValidatePayload(ev.Type, ev.Payload); err != nil {
			t.Fatalf("%s payload: %v", tc.name, err)
		}
		dec, err := rs.Decide(ev, &dir, time.Date(2026, 3, 10, 3, 0, 0, 0, time.UTC))
		if err != nil {
			t.Fatal(err)
		}
		// One Slack post per alert, to the place (team:ops), not to each
		// admin: the admins get the inbox row only.
		for _, rd := range dec.Recipients {
			if len(rd.Channels) != 0 {
				t.Fatalf("%s: %s has channels %+v, want the inbox only", tc.name, rd.Recipient.UserID, rd.Channels)
			}
		}
		if len(dec.Posts) != 1 || dec.Posts[0].Channel != "SLACK" || dec.Posts[0].To != "team:ops" || dec.Posts[0].Error != "" {
			t.Fatalf("%s: posts %+v, want one SLACK post to team:ops", tc.name, dec.Posts)
		}
		post := dec.Posts[0]
		content, err := rs.Render(ev, rs.PlaceRecipient(post.To), post.Channel)
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		id := fmt.Sprintf("%s-%s", ev.EventID, "ops-room")
		batch := []sdk.Delivery{{DeliveryID: id, IdempotencyKey: "idem-" + id, TenantID: "demo",
			EventID: ev.EventID, EventType: ev.Type, Channel: post.Channel, Attempt: 1,
			Recipient: sdk.Recipient{UserID: post.To, Attributes: map[string]string{sdk.AttrPlace: post.To, sdk.AttrDestination: post.Address}},
			Content:   sdk.Content{Title: content.Title, Body: content.Body, Data: content.Data}}}
		resp, err := plug.Send(ctx, sdk.SendRequest{Deliveries: batch})
		if err != nil {
			t.Fatal(err)
		}
		r := resp.Results[0]
		if r.Outcome != sdk.OutcomeSent || r.ProviderMessageID == "" {
			t.Fatalf("%s: %+v, want SENT\nplugin log:\n%s", tc.name, r, logs)
		}
		sink.waitLine(t, "slack", "webhook posted", "hook=T0HERALDDEV/"+tc.hook,
			`text="*:rotating_light: Disk almost full on db1*`, "blocks=3", "idempotency_key=idem-"+ev.EventID+"-ops-room")
	}
	if n := countLines(sink, "webhook rejected"); n != 0 {
		t.Errorf("the stand-in rejected %d requests:\n%s", n, strings.Join(sink.lines(), "\n"))
	}
	t.Logf("dev peer log:\n%s", strings.Join(sink.lines(), "\n"))
}
