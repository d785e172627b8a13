// Package plugintest is the conformance kit for Herald channel plugins. A
// plugin author builds the plugin binary and runs it from a test:
//
//	func TestConformance(t *testing.T) {
//		bin := buildPlugin(t) // go build -o ... .
//		plugintest.Run(t, bin, plugintest.Features{
//			Config: map[string]any{"url": peer.URL},
//			BadConfigs: []plugintest.BadConfig{
//				{Name: "bad url", Config: map[string]any{"url": "::"}, Field: "url"},
//			},
//		})
//	}
//
// Run launches the real binary the way the Herald host does (go-plugin
// handshake with the magic cookie, protocol version negotiated through
// VersionedPlugins, AutoMTLS, gRPC) and checks, each in its own subtest:
// the handshake; that Describe is sane; that Configure refuses bad config
// with a *sdk.ConfigError naming the field (unknown keys, wrong types,
// missing required fields, values outside an enum, and the author's own
// BadConfigs); that Health passes under a good config; that Send returns
// exactly one result per delivery with matching ids, for a batch and for a
// single delivery; that idempotency keys reach the provider (with
// ProviderSeen); that errors are classified (with FailingConfig); and that
// the plugin shuts down cleanly when the host stops it.
package plugintest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sdk/host"
)

// Features tells Run how to drive the plugin under test.
type Features struct {
	// Config is a valid provider config under which Send delivers with
	// Outcome (for example pointing at a local peer). Required fields must
	// be in it.
	Config map[string]any
	// ChannelType, when set, is the channel type Describe must report.
	ChannelType string
	// Outcome is the outcome every delivery must get under Config
	// (default sdk.OutcomeSent).
	Outcome sdk.Outcome
	// BadConfigs are configs the plugin must refuse in Configure, each with
	// the field its *sdk.ConfigError must name. Run adds its own (unknown
	// key, wrong types, missing required fields, enum).
	BadConfigs []BadConfig
	// Delivery returns the i-th test delivery; Run sets DeliveryID,
	// IdempotencyKey and Attempt. Default: a recipient with every address
	// filled and content with every part filled.
	Delivery func(i int) sdk.Delivery
	// BatchSize is how many deliveries the batch test sends (default 10,
	// capped by Description.MaxBatch).
	BatchSize int
	// ProviderSeen returns, for each delivery id the provider received, the
	// idempotency key it received with it. When nil, the idempotency check
	// only logs that it cannot see the provider.
	ProviderSeen func(t testing.TB) map[string]string
	// FailingConfig is a valid config under which the provider fails (for
	// example a peer that answers 503). Send must then classify every
	// failure. When nil, the classification check only logs.
	FailingConfig map[string]any
	// Timeout bounds each call to the plugin (default 30s).
	Timeout time.Duration
}

// BadConfig is a config the plugin must refuse.
type BadConfig struct {
	// Name labels the subtest.
	Name string
	// Config is merged over Features.Config (a nil value removes the key).
	Config map[string]any
	// Field is the field the *sdk.ConfigError must name.
	Field string
}

// Run runs the conformance checks against the plugin binary at binaryPath.
func Run(t *testing.T, binaryPath string, f Features) {
	t.Helper()
	if f.Timeout <= 0 {
		f.Timeout = 30 * time.Second
	}
	if f.BatchSize <= 0 {
		f.BatchSize = 10
	}
	if f.Outcome == sdk.OutcomeUnspecified {
		f.Outcome = sdk.OutcomeSent
	}
	logs := &syncBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Name: "plugintest", Output: logs, Level: hclog.Debug})
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  sdk.Handshake,
		VersionedPlugins: host.PluginSet(),
		Cmd:              exec.Command(binaryPath),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           logger,
		StartTimeout:     f.Timeout,
	})
	t.Cleanup(func() {
		client.Kill()
		if t.Failed() {
			t.Logf("plugin log:\n%s", logs.String())
		}
	})
	ctx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), f.Timeout)
	}

	var ch host.Client
	if !t.Run("handshake", func(t *testing.T) {
		rpc, err := client.Client()
		if err != nil {
			t.Fatalf("launch %s: %v", binaryPath, err)
		}
		if v := client.NegotiatedVersion(); v != sdk.ProtocolVersion {
			t.Fatalf("negotiated protocol version %d, want %d", v, sdk.ProtocolVersion)
		}
		if err := rpc.Ping(); err != nil {
			t.Fatalf("ping: %v", err)
		}
		if ch, err = host.Dispense(rpc); err != nil {
			t.Fatal(err)
		}
	}) {
		t.FailNow()
	}

	var desc sdk.Description
	if !t.Run("describe", func(t *testing.T) {
		c, cancel := ctx()
		defer cancel()
		resp, err := ch.Describe(c, sdk.DescribeRequest{})
		if err != nil {
			t.Fatalf("describe: %v", err)
		}
		desc = resp.Description
		for _, p := range CheckDescription(desc, f) {
			t.Error(p)
		}
	}) {
		t.FailNow()
	}

	configure := func(cfg map[string]any) error {
		c, cancel := ctx()
		defer cancel()
		_, err := ch.Configure(c, sdk.ConfigureRequest{ProviderName: "plugintest", Config: cfg,
			HostCapabilities: []string{sdk.HostCapabilitySkipped}})
		return err
	}

	t.Run("configure refuses bad config naming the field", func(t *testing.T) {
		for _, bc := range append(generatedBadConfigs(desc.Config, f.Config), f.BadConfigs...) {
			t.Run(bc.Name, func(t *testing.T) {
				err := configure(merge(f.Config, bc.Config))
				var ce *sdk.ConfigError
				switch {
				case err == nil:
					t.Errorf("config %v accepted, want a *sdk.ConfigError naming %q", merge(f.Config, bc.Config), bc.Field)
				case !errors.As(err, &ce):
					t.Errorf("refused with %v (%T), want a *sdk.ConfigError naming %q", err, err, bc.Field)
				case ce.Field != bc.Field:
					t.Errorf("ConfigError names field %q (%s), want %q", ce.Field, ce.Msg, bc.Field)
				}
			})
		}
	})

	if !t.Run("configure", func(t *testing.T) {
		if err := configure(f.Config); err != nil {
			t.Fatalf("good config %v refused: %v", f.Config, err)
		}
	}) {
		t.FailNow()
	}

	t.Run("health", func(t *testing.T) {
		c, cancel := ctx()
		defer cancel()
		rep, err := ch.Health(c, sdk.HealthRequest{})
		if err != nil {
			t.Fatalf("health: %v", err)
		}
		if !rep.Healthy {
			t.Errorf("unhealthy under the good config: %s", rep.Message)
		}
	})

	var sent []sdk.Delivery
	send := func(t *testing.T, batch []sdk.Delivery) []sdk.Result {
		t.Helper()
		c, cancel := ctx()
		defer cancel()
		resp, err := ch.Send(c, sdk.SendRequest{Deliveries: batch})
		if err != nil {
			t.Fatalf("send of %d: %v", len(batch), err)
		}
		results := resp.Results
		for _, p := range CheckResults(batch, results) {
			t.Error(p)
		}
		for _, r := range results {
			if r.Outcome != f.Outcome {
				t.Errorf("delivery %s: outcome %s (%s), want %s", r.DeliveryID, r.Outcome, r.Reason, f.Outcome)
			}
		}
		sent = append(sent, batch...)
		return results
	}
	n := min(f.BatchSize, max(desc.MaxBatch, 1))
	t.Run("send batch: one result per delivery", func(t *testing.T) {
		send(t, testDeliveries(f, "batch", n))
	})
	t.Run("send one", func(t *testing.T) {
		send(t, testDeliveries(f, "single", 1))
	})
	t.Run("send empty batch", func(t *testing.T) {
		c, cancel := ctx()
		defer cancel()
		resp, err := ch.Send(c, sdk.SendRequest{})
		if err != nil || len(resp.Results) != 0 {
			t.Errorf("empty batch: %d results, error %v; want none and nil", len(resp.Results), err)
		}
	})

	t.Run("idempotency keys reach the provider", func(t *testing.T) {
		if f.ProviderSeen == nil {
			t.Log("Features.ProviderSeen is nil: cannot see what the provider received")
			return
		}
		seen := f.ProviderSeen(t)
		for _, d := range sent {
			got, ok := seen[d.DeliveryID]
			if !ok {
				t.Errorf("provider never received delivery %s", d.DeliveryID)
				continue
			}
			if got != d.IdempotencyKey {
				t.Errorf("delivery %s reached the provider with idempotency key %q, want %q", d.DeliveryID, got, d.IdempotencyKey)
			}
		}
	})

	t.Run("errors are classified", func(t *testing.T) {
		if f.FailingConfig == nil {
			t.Log("Features.FailingConfig is nil: no failure to classify")
			return
		}
		if err := configure(f.FailingConfig); err != nil {
			t.Fatalf("failing config refused: %v", err)
		}
		defer func() {
			if err := configure(f.Config); err != nil {
				t.Errorf("re-configure good config: %v", err)
			}
		}()
		batch := testDeliveries(f, "failing", min(3, max(desc.MaxBatch, 1)))
		c, cancel := ctx()
		defer cancel()
		resp, err := ch.Send(c, sdk.SendRequest{Deliveries: batch})
		results := resp.Results
		if err != nil {
			if _, classified := sdk.Classify(err); !classified {
				t.Errorf("send failed with an unclassified error (wrap it with sdk.RetryableError, RateLimitedError or PermanentError): %v", err)
			}
			return
		}
		for _, p := range CheckResults(batch, results) {
			t.Error(p)
		}
		for _, r := range results {
			if r.Outcome == sdk.OutcomeSent {
				t.Errorf("delivery %s sent under the failing config", r.DeliveryID)
			}
		}
	})

	t.Run("clean shutdown", func(t *testing.T) {
		start := time.Now()
		client.Kill()
		if !client.Exited() {
			t.Errorf("plugin still running after Kill")
		}
		if strings.Contains(logs.String(), "plugin failed to exit gracefully") {
			t.Errorf("plugin did not exit when the host closed it and was killed after %s", time.Since(start).Round(time.Millisecond))
		}
	})
}

// CheckDescription returns what is wrong with a Description.
func CheckDescription(d sdk.Description, f Features) []string {
	var p []string
	switch {
	case d.ChannelType == "":
		p = append(p, "Description.ChannelType is empty")
	case f.ChannelType != "" && d.ChannelType != f.ChannelType:
		p = append(p, fmt.Sprintf("Description.ChannelType is %q, want %q", d.ChannelType, f.ChannelType))
	}
	if d.Provider == "" {
		p = append(p, "Description.Provider is empty")
	}
	if d.PluginVersion == "" {
		p = append(p, "Description.PluginVersion is empty")
	}
	if !slices.Contains(d.APIVersions, sdk.ProtocolVersion) {
		p = append(p, fmt.Sprintf("Description.APIVersions %v lacks protocol version %d", d.APIVersions, sdk.ProtocolVersion))
	}
	if d.MaxBatch < 0 {
		p = append(p, fmt.Sprintf("Description.MaxBatch is %d", d.MaxBatch))
	}
	if d.Class != sdk.Persistent && d.Class != sdk.BestEffort {
		p = append(p, fmt.Sprintf("Description.Class is %d", d.Class))
	}
	names := map[string]bool{}
	for _, s := range d.Config {
		switch {
		case s.Name == "":
			p = append(p, "a config field has no name")
		case names[s.Name]:
			p = append(p, fmt.Sprintf("config field %q is declared twice", s.Name))
		}
		names[s.Name] = true
		if !slices.Contains([]sdk.FieldType{sdk.FieldString, sdk.FieldInt, sdk.FieldBool, sdk.FieldDuration, sdk.FieldList, sdk.FieldMap}, s.Type) {
			p = append(p, fmt.Sprintf("config field %q has unknown type %q", s.Name, s.Type))
			continue
		}
		if s.Required && s.Default != "" {
			p = append(p, fmt.Sprintf("config field %q is required and has a default", s.Name))
		}
		if s.Default != "" {
			if _, err := sdk.CheckConfig([]sdk.FieldSpec{s}, nil); err != nil {
				p = append(p, fmt.Sprintf("config field %q: default does not pass its own spec: %v", s.Name, err))
			}
		}
	}
	return p
}

// CheckResults returns how results break the contract for batch: exactly
// one result per delivery, keyed by DeliveryID, every outcome set, none
// unclassified, retry hints only on retryable or rate-limited outcomes,
// and GoneDevices naming only the delivery's own devices.
func CheckResults(batch []sdk.Delivery, results []sdk.Result) []string {
	var p []string
	if len(results) != len(batch) {
		p = append(p, fmt.Sprintf("%d results for %d deliveries", len(results), len(batch)))
	}
	want := map[string]bool{}
	devices := map[string]map[string]bool{}
	for _, d := range batch {
		want[d.DeliveryID] = true
		own := map[string]bool{}
		for _, dev := range d.Recipient.DevicesOf() {
			own[dev.Token] = true
		}
		devices[d.DeliveryID] = own
	}
	got := map[string]bool{}
	for _, r := range results {
		switch {
		case !want[r.DeliveryID]:
			p = append(p, fmt.Sprintf("result for unknown delivery %q", r.DeliveryID))
		case got[r.DeliveryID]:
			p = append(p, fmt.Sprintf("more than one result for delivery %q", r.DeliveryID))
		}
		got[r.DeliveryID] = true
		if r.Outcome == sdk.OutcomeUnspecified {
			p = append(p, fmt.Sprintf("delivery %s: result with no outcome (OutcomeUnspecified); build results with sdk.Sent, Retry, RateLimited, Permanent, Skipped or ErrorResult", r.DeliveryID))
		}
		if r.Unclassified {
			p = append(p, fmt.Sprintf("delivery %s failed with an unclassified error (wrap it with sdk.RetryableError, RateLimitedError or PermanentError): %s", r.DeliveryID, r.Reason))
		}
		if r.RetryAfter < 0 {
			p = append(p, fmt.Sprintf("delivery %s: negative RetryAfter %s", r.DeliveryID, r.RetryAfter))
		}
		for _, g := range r.GoneDevices {
			if !devices[r.DeliveryID][g] {
				p = append(p, fmt.Sprintf("delivery %s: GoneDevices lists %q, which is not one of the recipient's devices", r.DeliveryID, g))
			}
		}
		if r.Outcome == sdk.OutcomeSkipped && r.Reason == "" {
			p = append(p, fmt.Sprintf("delivery %s: skipped with no reason (say why, e.g. sdk.Skipped(id, \"offline\"))", r.DeliveryID))
		}
		if r.Outcome == sdk.OutcomeSent && (r.Reason != "" || r.Code != "") {
			p = append(p, fmt.Sprintf("delivery %s: sent with a failure reason %q / code %q", r.DeliveryID, r.Reason, r.Code))
		}
	}
	for _, d := range batch {
		if !got[d.DeliveryID] {
			p = append(p, fmt.Sprintf("no result for delivery %q", d.DeliveryID))
		}
	}
	return p
}

// generatedBadConfigs derives configs every plugin must refuse from its
// field specs.
func generatedBadConfigs(specs []sdk.FieldSpec, good map[string]any) []BadConfig {
	out := []BadConfig{{Name: "unknown key", Config: map[string]any{"plugintest_unknown_key": "x"}, Field: "plugintest_unknown_key"}}
	wrong := map[sdk.FieldType]any{
		sdk.FieldString:   12345,
		sdk.FieldInt:      "not-a-number",
		sdk.FieldBool:     "maybe",
		sdk.FieldDuration: "forever",
		sdk.FieldList:     42,
		sdk.FieldMap:      []string{"not", "a", "map"},
	}
	for _, s := range specs {
		if v, ok := wrong[s.Type]; ok {
			out = append(out, BadConfig{Name: "wrong type " + s.Name, Config: map[string]any{s.Name: v}, Field: s.Name})
		}
		if s.Required {
			out = append(out, BadConfig{Name: "missing required " + s.Name, Config: map[string]any{s.Name: nil}, Field: s.Name})
		}
		if len(s.Enum) > 0 && (s.Type == sdk.FieldString || s.Type == sdk.FieldList) {
			var v any = "plugintest-not-in-enum"
			if s.Type == sdk.FieldList {
				v = []string{"plugintest-not-in-enum"}
			}
			out = append(out, BadConfig{Name: "outside enum " + s.Name, Config: map[string]any{s.Name: v}, Field: s.Name})
		}
	}
	return out
}

// merge returns base with over applied; a nil value in over deletes.
func merge(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if v == nil {
			delete(out, k)
			continue
		}
		out[k] = v
	}
	return out
}

var runSeq struct {
	mu sync.Mutex
	n  int
}

func testDeliveries(f Features, prefix string, n int) []sdk.Delivery {
	runSeq.mu.Lock()
	runSeq.n++
	seq := runSeq.n
	runSeq.mu.Unlock()
	out := make([]sdk.Delivery, n)
	for i := range out {
		var d sdk.Delivery
		if f.Delivery != nil {
			d = f.Delivery(i)
		} else {
			d = DefaultDelivery(i)
		}
		d.DeliveryID = fmt.Sprintf("plugintest-%s-%d-%d", prefix, seq, i)
		d.IdempotencyKey = fmt.Sprintf("idem-%s-%d-%d", prefix, seq, i)
		if d.Attempt == 0 {
			d.Attempt = 1
		}
		out[i] = d
	}
	return out
}

// DefaultDelivery is the i-th delivery Run sends when Features.Delivery is
// nil: every recipient address and every content part is filled.
func DefaultDelivery(i int) sdk.Delivery {
	return sdk.Delivery{
		TenantID:       "plugintest-tenant",
		EventID:        fmt.Sprintf("event-%d", i),
		EventType:      "PLUGINTEST",
		NotificationID: fmt.Sprintf("notification-%d", i),
		Channel:        "PLUGINTEST",
		Severity:       "info",
		Recipient: sdk.Recipient{
			UserID:       fmt.Sprintf("user-%d", i),
			UserType:     "customer",
			Email:        fmt.Sprintf("user%d@example.test", i),
			Phone:        fmt.Sprintf("+1555000%04d", i),
			Locale:       "en-US",
			TimeZone:     "UTC",
			DeviceTokens: []string{fmt.Sprintf("device-token-%d", i)},
			Attributes:   map[string]string{"slack_user_id": fmt.Sprintf("U%06d", i)},
		},
		Content: sdk.Content{
			Subject: "plugintest subject",
			Title:   "plugintest title",
			Body:    fmt.Sprintf("plugintest body %d", i),
			HTML:    fmt.Sprintf("<p>plugintest body %d</p>", i),
			Data:    []byte(fmt.Sprintf(`{"i":%d}`, i)),
		},
		CreatedAt: time.Now().UTC().Truncate(time.Second),
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
