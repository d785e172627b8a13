package devpeer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/relay"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/internal/pushpeer"
	"github.com/heraldhq/herald/sdk"
	sdkhost "github.com/heraldhq/herald/sdk/host"
)

// TestQuickstartPluginsDeliverToThePeers is the quick start without the
// database and the broker: it starts the dev peers as scripts/run.sh does
// (SMTP, HTTP, and TLS with its CA and keys in a directory), sets the
// HERALD_QUICKSTART_* variables from that directory as scripts/run.sh
// exports them, loads the quickstart rules (resolving their env:
// references as herald serve does), directory and event, decides and
// renders the reservation, then
// runs the real plugin binaries configured exactly as the rules file says —
// only the dev peers' ports swapped for free ones — and checks that every
// delivery is SENT and that the peers logged each message: the e-mails,
// the FCM, APNs and Web Push messages (the Web Push stand-in decrypted
// each payload with the subscription's keys from directory.json), the SMS
// and the Slack incoming-webhook posts.
func TestQuickstartPluginsDeliverToThePeers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the plugin binaries")
	}
	root := testenv.RepoRoot(t)
	qs := filepath.Join(root, "examples", "quickstart")
	p, sink := startQuickstartPeers(t)
	// The rules take the SMS auth token, the CA file's path and the dev
	// keys from the environment, as scripts/run.sh exports them.
	for name, val := range quickstartEnv(p.tlsDir, func(name string) string { return p.readTLSFile(t, name) }) {
		t.Setenv(name, val)
	}
	rs, err := rulesfile.Load(filepath.Join(qs, "rules.hcl"))
	if err != nil {
		t.Fatalf("load quickstart rules: %v", err)
	}
	var dir directory.Directory
	readJSON(t, filepath.Join(qs, "directory.json"), &dir)
	var body struct {
		EventID       string          `json:"event_id"`
		Type          string          `json:"type"`
		AggregateType string          `json:"aggregate_type"`
		AggregateID   string          `json:"aggregate_id"`
		Payload       json.RawMessage `json:"payload"`
	}
	readJSON(t, filepath.Join(qs, "reservation.json"), &body)
	if err := rs.ValidatePayload(body.Type, body.Payload); err != nil {
		t.Fatalf("reservation.json payload: %v", err)
	}
	ev := rules.Event{TenantID: "demo", EventID: body.EventID, Type: body.Type, AggregateType: body.AggregateType,
		AggregateID: body.AggregateID, Payload: body.Payload, OccurredAt: time.Now()}
	// 03:00 UTC is inside the default quiet hours: the quick start must
	// deliver anyway.
	at := time.Date(2026, 3, 10, 3, 0, 0, 0, time.UTC)
	dec, err := rs.Decide(ev, &dir, at)
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	// The directory's web push subscriptions are on herald devpeers' TLS
	// peer; the test's listens on a free port.
	tlsBase := "https://" + DefaultTLSAddr + pushpeer.WebPushPath
	for i, rd := range dec.Recipients {
		var devs []directory.Device
		for _, d := range rd.Recipient.Devices {
			if d.Kind == directory.DeviceWebPush {
				id, ok := strings.CutPrefix(d.Endpoint, tlsBase)
				if !ok {
					t.Fatalf("%s: web push endpoint %q, want one on herald devpeers' %s", rd.Recipient.UserID, d.Endpoint, tlsBase)
				}
				d.Endpoint = p.TLSURL() + pushpeer.WebPushPath + id
			}
			devs = append(devs, d)
		}
		dec.Recipients[i].Recipient.Devices = devs
	}

	// What the quick start is meant to show.
	want := map[string][]string{
		"staff1": {"EMAIL", "PUSH", "SMS", "WEBSOCKET"},
		"staff2": {"EMAIL", "PUSH", "WEBSOCKET"}, // SMS: managers only (and switched off)
		"staff3": {"PUSH", "WEBSOCKET"},          // EMAIL off for this event type
	}
	got := map[string][]string{}
	byChannel := map[string][]sdk.Delivery{}
	for _, rd := range dec.Recipients {
		for _, cd := range rd.Channels {
			if cd.Deferred {
				t.Errorf("%s %s deferred", rd.Recipient.UserID, cd.Channel)
			}
			got[rd.Recipient.UserID] = append(got[rd.Recipient.UserID], cd.Channel)
			content, err := rs.Render(ev, rd.Recipient, cd.Channel)
			if err != nil {
				t.Fatalf("render %s %s: %v", rd.Recipient.UserID, cd.Channel, err)
			}
			id := fmt.Sprintf("%s-%s-%s", ev.EventID, rd.Recipient.UserID, cd.Channel)
			byChannel[cd.Channel] = append(byChannel[cd.Channel], sdk.Delivery{
				DeliveryID: id, IdempotencyKey: "idem-" + id, TenantID: ev.TenantID, EventID: ev.EventID,
				EventType: ev.Type, NotificationID: "n-" + rd.Recipient.UserID, Channel: cd.Channel,
				Severity: dec.Severity, Attempt: 1, CreatedAt: at,
				Recipient: relay.PluginRecipient(rd.Recipient),
				Content:   sdk.Content{Subject: content.Subject, Title: content.Title, Body: content.Body, HTML: content.HTML, Data: content.Data},
			})
		}
	}
	// SLACK is the restaurant's place: one post per reservation, not one
	// per staff member.
	if len(dec.Posts) != 1 || dec.Posts[0].Channel != "SLACK" || dec.Posts[0].To != "restaurant:5" || dec.Posts[0].Error != "" {
		t.Fatalf("quick-start posts = %+v, want one SLACK post to restaurant:5", dec.Posts)
	}
	for _, post := range dec.Posts {
		content, err := rs.Render(ev, rs.PlaceRecipient(post.To), post.Channel)
		if err != nil {
			t.Fatalf("render the post to %s: %v", post.To, err)
		}
		id := fmt.Sprintf("%s-%s-%s", ev.EventID, post.To, post.Channel)
		byChannel[post.Channel] = append(byChannel[post.Channel], sdk.Delivery{
			DeliveryID: id, IdempotencyKey: "idem-" + id, TenantID: ev.TenantID, EventID: ev.EventID,
			EventType: ev.Type, NotificationID: "post-" + id, Channel: post.Channel, Severity: dec.Severity, Attempt: 1, CreatedAt: at,
			Recipient: sdk.Recipient{UserID: post.To, Attributes: map[string]string{sdk.AttrPlace: post.To, sdk.AttrDestination: post.Address}},
			Content:   sdk.Content{Subject: content.Subject, Title: content.Title, Body: content.Body, HTML: content.HTML, Data: content.Data},
		})
	}
	for u := range got {
		slices.Sort(got[u])
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("quick-start channels per user = %v, want %v", got, want)
	}

	// The rules file points at `herald devpeers`' default addresses; the
	// test's peers listen on free ports instead.
	const hookPath = "/services/T0HERALDDEV/B0RESERVATIONS/quickstart"
	swap := map[string]map[string]struct{ want, test any }{
		"EMAIL": {"host": {"127.0.0.1", hostOf(p.SMTPAddr())}, "port": {2525, portOf(t, p.SMTPAddr())}, "tls": {"none", "none"}},
		"PUSH": {
			"providers":                 {[]any{"fcm", "webpush", "apns"}, []any{"fcm", "webpush", "apns"}},
			"endpoint":                  {"http://" + DefaultHTTPAddr, p.HTTPURL()},
			"apns_endpoint":             {"https://" + DefaultTLSAddr, p.TLSURL()},
			"webpush_private_endpoints": {true, true},
			// Resolved from the variables set from the TLS peer's files.
			"ca_file":           {filepath.Join(p.tlsDir, FileCA), filepath.Join(p.tlsDir, FileCA)},
			"vapid_public_key":  {p.readTLSFile(t, FileVAPIDPublicKey), p.readTLSFile(t, FileVAPIDPublicKey)},
			"vapid_private_key": {p.readTLSFile(t, FileVAPIDPrivateKey), p.readTLSFile(t, FileVAPIDPrivateKey)},
			"apns_key":          {p.readTLSFile(t, FileAPNsKey), p.readTLSFile(t, FileAPNsKey)},
		},
		"SMS": {"base_url": {"http://" + DefaultHTTPAddr, p.HTTPURL()}},
		"SLACK": {
			"mode":            {"webhook", "webhook"},
			"webhooks":        {map[string]any{"reservations": "http://" + DefaultHTTPAddr + hookPath}, map[string]any{"reservations": p.HTTPURL() + hookPath}},
			"default_webhook": {"reservations", "reservations"},
		},
	}
	plugins := map[string]string{"EMAIL": "email", "PUSH": "push", "SMS": "sms", "SLACK": "slack"}
	binDir := testenv.PluginBinaries(t, slices.Sorted(maps.Values(plugins))...)

	for _, chName := range slices.Sorted(maps.Keys(plugins)) {
		t.Run(chName, func(t *testing.T) {
			ch, ok := rs.Channel(chName)
			if !ok || len(ch.Providers) != 1 {
				t.Fatalf("channel %s: %d providers, want 1", chName, len(ch.Providers))
			}
			prov := ch.Providers[0]
			if prov.Plugin != plugins[chName] {
				t.Fatalf("channel %s uses plugin %q, want %q", chName, prov.Plugin, plugins[chName])
			}
			cfg := maps.Clone(prov.Config)
			for k, v := range swap[chName] {
				if fmt.Sprint(cfg[k]) != fmt.Sprint(v.want) {
					t.Errorf("rules.hcl %s %s = %v, want %v (herald devpeers' default)", chName, k, cfg[k], v.want)
				}
				cfg[k] = v.test
			}
			plug, logs := launchPlugin(t, filepath.Join(binDir, "herald-plugin-"+plugins[chName]))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			descResp, err := plug.Describe(ctx, sdk.DescribeRequest{})
			desc := descResp.Description
			if err != nil {
				t.Fatalf("describe: %v", err)
			}
			if desc.ChannelType != chName {
				t.Fatalf("plugin %s serves %q, want %q", prov.Plugin, desc.ChannelType, chName)
			}
			checked, err := sdk.CheckConfig(desc.Config, cfg)
			if err != nil {
				t.Fatalf("the %s provider config does not fit the plugin's fields: %v", chName, err)
			}
			if _, err := plug.Configure(ctx, sdk.ConfigureRequest{ProviderName: prov.Name, Config: checked}); err != nil {
				t.Fatalf("configure: %v", err)
			}
			h, err := plug.Health(ctx, sdk.HealthRequest{})
			if err != nil || !h.Healthy {
				t.Fatalf("health against the dev peer: %+v %v\nplugin log:\n%s", h, err, logs)
			}
			batch := byChannel[chName]
			resultsResp, err := plug.Send(ctx, sdk.SendRequest{Deliveries: batch})
			results := resultsResp.Results
			if err != nil {
				t.Fatalf("send: %v\nplugin log:\n%s", err, logs)
			}
			if len(results) != len(batch) {
				t.Fatalf("%d results for %d deliveries", len(results), len(batch))
			}
			for _, r := range results {
				if r.Outcome != sdk.OutcomeSent || r.ProviderMessageID == "" {
					t.Errorf("delivery %s: %+v, want SENT with a provider message id\nplugin log:\n%s", r.DeliveryID, r, logs)
				}
			}
		})
	}

	// Every delivery shows up in the peers' log.
	for _, d := range byChannel["EMAIL"] {
		sink.waitLine(t, "smtp", "accepted", "to=<"+d.Recipient.Email+">", fmt.Sprintf("subject=%q", d.Content.Subject))
	}
	pushKinds := map[string]int{}
	for _, d := range byChannel["PUSH"] {
		for _, dev := range d.Recipient.Devices {
			pushKinds[dev.Kind]++
			switch dev.Kind {
			case "", sdk.DeviceFCM:
				sink.waitLine(t, "fcm", "accepted", "project=herald-demo", "token="+clip(dev.Token, 40), "idempotency_key="+d.IdempotencyKey)
			case sdk.DeviceAPNs:
				sink.waitLine(t, "apns", "accepted token="+dev.Token, "topic=example.herald.quickstart", "push_type=alert",
					fmt.Sprintf(`"alert":{"body":%q,"title":%q}`, d.Content.Body, d.Content.Title))
			case sdk.DeviceWebPush:
				// The stand-in decrypted the payload with the keys of the
				// subscription in directory.json.
				_, id, _ := strings.Cut(dev.Endpoint, pushpeer.WebPushPath)
				sink.waitLine(t, "webpush", "accepted subscription="+id, "sub=mailto:quickstart@herald.example",
					fmt.Sprintf(`payload={"title":%q,"body":%q`, d.Content.Title, d.Content.Body),
					`"herald_idempotency_key":"`+d.IdempotencyKey+`"`)
			default:
				t.Errorf("%s: device of kind %q", d.Recipient.UserID, dev.Kind)
			}
		}
	}
	// Every staff member has a phone (FCM), an iPhone (APNs) and a browser
	// (Web Push); staff2 has a tablet too.
	if want := map[string]int{"": 4, sdk.DeviceAPNs: 3, sdk.DeviceWebPush: 3}; !maps.Equal(pushKinds, want) {
		t.Errorf("push devices by kind = %v, want %v", pushKinds, want)
	}
	for _, d := range byChannel["SMS"] {
		sink.waitLine(t, "twilio", "accepted", "to="+d.Recipient.Phone, "idempotency_token="+d.IdempotencyKey)
	}
	for _, d := range byChannel["SLACK"] {
		sink.waitLine(t, "slack", "webhook posted", "hook=T0HERALDDEV/B0RESERVATIONS", d.Content.Body, "idempotency_key="+d.IdempotencyKey)
	}
	if n := countLines(sink, "webhook posted"); n != 1 || len(byChannel["SLACK"]) != 1 {
		t.Errorf("%d Slack webhook posts, want 1 (one per reservation, to the restaurant's channel)", n)
	}
	if n := countLines(sink, "rejected"); n != 0 {
		t.Errorf("the peers rejected %d requests:\n%s", n, strings.Join(sink.lines(), "\n"))
	}
	t.Logf("dev peer log:\n%s", strings.Join(sink.lines(), "\n"))
}

func TestQuickstartDirectoryAndEventAreStrictJSON(t *testing.T) {
	qs := filepath.Join(testenv.RepoRoot(t), "examples", "quickstart")
	var dir directory.Directory
	readJSON(t, filepath.Join(qs, "directory.json"), &dir)
	if len(dir.Recipients) != 4 || len(dir.Members) != 3 {
		t.Errorf("directory: %d recipients, %d members; want 4 and 3", len(dir.Recipients), len(dir.Members))
	}
	for _, r := range dir.Recipients {
		if !r.Active || r.TimeZone != "UTC" || r.Email == "" || r.Phone == "" || len(r.DeviceTokens) == 0 {
			t.Errorf("recipient %s: %+v, want active, UTC, with email, phone and device tokens", r.UserID, r)
		}
	}
}

// readJSON decodes a file, refusing unknown fields.
func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// launchPlugin runs a plugin binary the way the host does (go-plugin, gRPC,
// AutoMTLS, versioned plugin set) and returns its channel.
func launchPlugin(t *testing.T, bin string) (sdk.Channel, *testenv.LogBuffer) {
	t.Helper()
	logs := &testenv.LogBuffer{}
	cmd := exec.Command(bin)
	cmd.Env = []string{sdk.EnvHostPID + "=" + fmt.Sprint(os.Getpid()), sdk.EnvLogLevel + "=debug"}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  sdk.Handshake,
		VersionedPlugins: sdkhost.PluginSet(),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           hclog.New(&hclog.LoggerOptions{Name: filepath.Base(bin), Output: logs, Level: hclog.Debug}),
		StartTimeout:     30 * time.Second,
	})
	t.Cleanup(client.Kill)
	rpc, err := client.Client()
	if err != nil {
		t.Fatalf("start %s: %v\n%s", bin, err, logs)
	}
	ch, err := sdkhost.Dispense(rpc)
	if err != nil {
		t.Fatalf("dispense %s: %v", bin, err)
	}
	return ch, logs
}

// quickstartEnv is the environment scripts/run.sh exports for the
// quickstart rules, given the TLS peer's directory and a reader of its
// files.
func quickstartEnv(tlsDir string, read func(name string) string) map[string]string {
	return map[string]string{
		"HERALD_QUICKSTART_SMS_AUTH_TOKEN":    "devpeer-dummy-auth-token",
		"HERALD_QUICKSTART_CA_FILE":           filepath.Join(tlsDir, FileCA),
		"HERALD_QUICKSTART_VAPID_PUBLIC_KEY":  read(FileVAPIDPublicKey),
		"HERALD_QUICKSTART_VAPID_PRIVATE_KEY": read(FileVAPIDPrivateKey),
		"HERALD_QUICKSTART_APNS_KEY":          read(FileAPNsKey),
		// The websocket plugin's broker, the daemon's amqp.url.
		"HERALD_AMQP_URL": "amqp://guest:guest@127.0.0.1:5672/",
	}
}

// TestRunScriptExportsTheQuickstartEnvironment: every env: reference of
// the quickstart rules is a variable quickstartEnv sets (so the test
// above resolves them all) and scripts/run.sh exports, from the file of
// herald devpeers' --tls-dir that quickstartEnv reads.
func TestRunScriptExportsTheQuickstartEnvironment(t *testing.T) {
	root := testenv.RepoRoot(t)
	rulesSrc, err := os.ReadFile(filepath.Join(root, "examples", "quickstart", "rules.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(root, "scripts", "run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	run := string(script)
	if !strings.Contains(run, "--tls 127.0.0.1:4443 --tls-dir \"$tls_dir\"") {
		t.Errorf("scripts/run.sh does not start herald devpeers with --tls %s --tls-dir \"$tls_dir\"", DefaultTLSAddr)
	}
	// run.sh waits for the line herald devpeers prints once its files are
	// written and its servers listen.
	cli, err := os.ReadFile(filepath.Join(root, "core", "internal", "cli", "devpeers.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(run, "grep -q '^waiting for messages'") || !strings.Contains(string(cli), `fmt.Fprintln(out, "waiting for messages`) {
		t.Error("scripts/run.sh and herald devpeers disagree on the line that says the peers are up (\"waiting for messages\")")
	}
	env := quickstartEnv("TLSDIR", func(name string) string { return "<" + name + ">" })
	// The variables run.sh writes to the env file a second terminal
	// sources: the for loop over their names.
	loop := regexp.MustCompile(`(?s)for name in (HERALD_CONFIG .*?); do`).FindStringSubmatch(run)
	if loop == nil {
		t.Fatal("scripts/run.sh has no `for name in HERALD_CONFIG ...; do` loop writing the env file")
	}
	envFileNames := strings.Fields(strings.ReplaceAll(loop[1], "\\", " "))
	refs := regexp.MustCompile(`(?m)^\s*[a-z_]+\s*=\s*"env:([A-Z0-9_]+)"`).FindAllStringSubmatch(string(rulesSrc), -1)
	if len(refs) != len(env) {
		t.Errorf("the quickstart rules hold %d env: references, quickstartEnv sets %d", len(refs), len(env))
	}
	for _, m := range refs {
		name := m[1]
		val, ok := env[name]
		if !ok {
			t.Errorf("rules.hcl reads env:%s, which the quickstart test does not set", name)
			continue
		}
		exported := regexp.MustCompile(`(?m)^export( [A-Z0-9_]+)*( ` + name + `)( |$)|^export ` + name + `=`).MatchString(run)
		if !exported {
			t.Errorf("scripts/run.sh does not export %s", name)
		}
		if !slices.Contains(envFileNames, name) {
			t.Errorf("scripts/run.sh does not write %s to .herald/quickstart.env (a second terminal's CLI could not resolve env:%s)", name, name)
		}
		switch {
		case strings.HasPrefix(val, "<"):
			file := strings.Trim(val, "<>")
			if !strings.Contains(run, name+`=$(cat "$tls_dir/`+file+`")`) {
				t.Errorf("scripts/run.sh does not set %s from $tls_dir/%s", name, file)
			}
		case strings.HasPrefix(val, "TLSDIR/"):
			if !strings.Contains(run, name+"=$tls_dir/"+strings.TrimPrefix(val, "TLSDIR/")) {
				t.Errorf("scripts/run.sh does not set %s to $tls_dir/%s", name, strings.TrimPrefix(val, "TLSDIR/"))
			}
		}
	}
}

// quickstartPeers are the dev peers as scripts/run.sh starts them, on free
// ports, with the TLS peer's files in tlsDir (a ".devpeers" directory).
type quickstartPeers struct {
	*Peers
	tlsDir string
}

func startQuickstartPeers(t *testing.T) (*quickstartPeers, *logSink) {
	t.Helper()
	sink := newLogSink()
	tlsDir := filepath.Join(t.TempDir(), ".devpeers")
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Start(ctx, Config{SMTPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", TLSAddr: "127.0.0.1:0", TLSDir: tlsDir, Log: sink})
	if err != nil {
		cancel()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &quickstartPeers{Peers: p, tlsDir: tlsDir}, sink
}

// readTLSFile is a file the TLS peer wrote, as a "file:" reference reads
// it (without one trailing newline).
func (p *quickstartPeers) readTLSFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.tlsDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(string(b), "\n")
}

func hostOf(addr string) string {
	h, _, _ := strings.Cut(addr, ":")
	return h
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, _ := strings.Cut(addr, ":")
	var n int
	if _, err := fmt.Sscan(p, &n); err != nil {
		t.Fatalf("port of %q: %v", addr, err)
	}
	return n
}

// TestReadmeIsAMap keeps README.md a map (issue 23): what Herald is, the
// quick start, the walk-through and links, in at most 250 lines; the rest
// belongs under docs/.
func TestReadmeIsAMap(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const most = 250
	if n := strings.Count(string(readme), "\n"); n > most {
		t.Errorf("README.md has %d lines, at most %d: move the detail to a page under docs/ and link it", n, most)
	}
}

// TestReadmeMalformedEventNamesPax checks the README walk-through's step 4:
// its event must fail the quickstart rules' payload schema at /pax (the
// field the README promises, "payload/pax"), not at a missing field.
func TestReadmeMalformedEventNamesPax(t *testing.T) {
	root := testenv.RepoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, step, ok := strings.Cut(string(readme), "# 4. A malformed event")
	if !ok {
		t.Fatal("README.md: no walk-through step 4")
	}
	step, _, _ = strings.Cut(step, "# 5.")
	m := regexp.MustCompile(`--data '([^']+)'`).FindStringSubmatch(step)
	if m == nil {
		t.Fatalf("README.md step 4: no --data '...':\n%s", step)
	}
	var body struct {
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal([]byte(m[1]), &body); err != nil {
		t.Fatalf("README.md step 4 body: %v", err)
	}
	// The schema check needs no secret: keep the references as written
	// (the TLS keys exist only once herald devpeers has run).
	rs, _, err := rulesfile.LoadWith(rulesfile.Options{KeepReferences: true}, filepath.Join(root, "examples", "quickstart", "rules.hcl"))
	if err != nil {
		t.Fatalf("load quickstart rules: %v", err)
	}
	var pe *rules.PayloadError
	if err := rs.ValidatePayload(body.Type, body.Payload); !errors.As(err, &pe) || pe.Path != "/pax" {
		t.Fatalf("README.md step 4 payload: error %v, want a payload error at /pax", err)
	}
	// The answer's field and detail, as the README quotes them (the API
	// names the field "payload" + the path, and the detail is the error).
	for _, want := range []string{`"field": "payload/pax"`, fmt.Sprintf("%q", "detail") + `: "` + pe.Error() + `"`} {
		if !strings.Contains(step, want) {
			t.Errorf("README.md step 4 does not quote %s:\n%s", want, step)
		}
	}
}
