// Command plugin is a channel plugin built against the Herald SDK as it was
// before SDK v1 (protocol version 1, Outcome SENT = 0), kept here as a
// frozen copy under ../sdk. The pluginhost compatibility test builds it and
// runs it against today's host. Its outcome follows the delivery's body:
// "retry", "rate", "permanent", anything else is sent.
package main

import (
	"context"
	"errors"
	"time"

	"github.com/heraldhq/herald/sdk"
)

type oldPlugin struct{ prefix string }

func (p *oldPlugin) Describe(context.Context) (sdk.Description, error) {
	return sdk.Description{
		ChannelType:   "OLDV1",
		Provider:      "oldsdk",
		PluginVersion: "0.9.0",
		APIVersions:   []int{1},
		MaxBatch:      10,
		Config: []sdk.FieldSpec{
			{Name: "prefix", Type: sdk.FieldString, Required: true, Description: "Prefix of provider message ids."},
		},
	}, nil
}

func (p *oldPlugin) Configure(_ context.Context, req sdk.ConfigureRequest) error {
	prefix, _ := req.Config["prefix"].(string)
	if prefix == "bad" {
		return &sdk.ConfigError{Field: "prefix", Msg: "must not be bad"}
	}
	p.prefix = prefix
	return nil
}

func (p *oldPlugin) Send(_ context.Context, batch []sdk.Delivery) ([]sdk.Result, error) {
	if len(batch) > 0 && batch[0].Content.Body == "batch-error" {
		return nil, sdk.PermanentError(errors.New("old plugin: whole batch refused"), "OLD_BATCH")
	}
	out := make([]sdk.Result, 0, len(batch))
	for _, d := range batch {
		switch d.Content.Body {
		case "retry":
			out = append(out, sdk.Retry(d.DeliveryID, "old plugin: told to retry", 2*time.Second))
		case "rate":
			out = append(out, sdk.RateLimited(d.DeliveryID, "old plugin: told to rate limit", 3*time.Second))
		case "permanent":
			out = append(out, sdk.Permanent(d.DeliveryID, "old plugin: told to fail", "OLD_PERMANENT"))
		default:
			out = append(out, sdk.Sent(d.DeliveryID, p.prefix+d.DeliveryID+"/"+d.IdempotencyKey))
		}
	}
	return out, nil
}

func (p *oldPlugin) Health(context.Context) (sdk.HealthReport, error) {
	return sdk.HealthReport{Healthy: true, Message: "old plugin ok"}, nil
}

func main() { sdk.Serve(func() sdk.Channel { return &oldPlugin{} }) }
