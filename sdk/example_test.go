package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/heraldhq/herald/sdk"
)

// Config is an example plugin's provider config: the SDK derives the field
// specs from its tags and decodes the operator's config into it.
type Config struct {
	// URL is where deliveries are posted.
	URL string `config:"url,required" help:"Receiver URL (http or https)."`
	// Token authenticates the plugin to the receiver.
	Token string `config:"token,secret" help:"Bearer token."`
	// Timeout bounds one request.
	Timeout time.Duration `config:"timeout" default:"10s" help:"Timeout of one request."`
	// Mode is how bodies are encoded.
	Mode string `config:"mode" default:"json" enum:"json,form" help:"Body encoding."`

	// url is URL, parsed by Validate.
	url *url.URL
}

// Validate checks what the types cannot say; DecodeConfig calls it.
func (c *Config) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return &sdk.ConfigError{Field: "url", Msg: "must be an http or https URL"}
	}
	c.url = u
	return nil
}

// Echo is an example channel: it "delivers" by printing.
type Echo struct{ cfg Config }

var _ sdk.Channel = (*Echo)(nil)

func (e *Echo) Describe(context.Context, sdk.DescribeRequest) (sdk.DescribeResponse, error) {
	return sdk.DescribeResponse{Description: sdk.Description{
		ChannelType:   "ECHO",
		Provider:      "stdout",
		PluginVersion: "0.1.0",
		Class:         sdk.Persistent,
		MaxBatch:      10,
		Config:        sdk.MustConfigFields(Config{}),
	}}, nil
}

func (e *Echo) Configure(_ context.Context, req sdk.ConfigureRequest) (sdk.ConfigureResponse, error) {
	var c Config
	if err := sdk.DecodeConfig(req.Config, &c); err != nil {
		return sdk.ConfigureResponse{}, err // a *sdk.ConfigError naming the field
	}
	e.cfg = c
	return sdk.ConfigureResponse{}, nil
}

func (e *Echo) Send(ctx context.Context, req sdk.SendRequest) (sdk.SendResponse, error) {
	return sdk.SendEach(func(_ context.Context, d sdk.Delivery) (string, error) {
		if d.Recipient.Email == "" {
			return "", sdk.PermanentError(errors.New("no email address"), "no_address")
		}
		fmt.Printf("to %s: %s\n", d.Recipient.Email, d.Content.Body)
		return "echo-" + d.DeliveryID, nil
	})(ctx, req)
}

func (e *Echo) Health(context.Context, sdk.HealthRequest) (sdk.HealthResponse, error) {
	return sdk.HealthResponse{Healthy: true, Message: "echo ready for " + e.cfg.url.Host}, nil
}

// Example walks a channel through the host's lifecycle in process. A real
// plugin's main is one line, sdk.Serve(func() sdk.Channel { return &Echo{} }),
// and sdk/plugintest drives the built binary the way the host does.
func Example() {
	ctx := context.Background()
	var ch sdk.Channel = &Echo{}

	desc, _ := ch.Describe(ctx, sdk.DescribeRequest{})
	fmt.Println("channel:", desc.Description.ChannelType)

	_, err := ch.Configure(ctx, sdk.ConfigureRequest{Config: map[string]any{"url": "ftp://nope"}})
	fmt.Println("refused:", err)
	_, err = ch.Configure(ctx, sdk.ConfigureRequest{Config: map[string]any{"url": "https://hooks.example.test/in"}})
	fmt.Println("configured:", err == nil)

	health, _ := ch.Health(ctx, sdk.HealthRequest{})
	fmt.Println("health:", health.Healthy, health.Message)

	resp, _ := ch.Send(ctx, sdk.SendRequest{Deliveries: []sdk.Delivery{
		{DeliveryID: "d1", Recipient: sdk.Recipient{Email: "ada@example.test"}, Content: sdk.Content{Body: "hello"}},
		{DeliveryID: "d2", Content: sdk.Content{Body: "nobody"}},
	}})
	for _, r := range resp.Results {
		fmt.Printf("%s %s %q %q\n", r.DeliveryID, r.Outcome, r.ProviderMessageID, r.Code)
	}
	// Output:
	// channel: ECHO
	// refused: config field "url": must be an http or https URL
	// configured: true
	// health: true echo ready for hooks.example.test
	// to ada@example.test: hello
	// d1 sent "echo-d1" ""
	// d2 permanent "" "no_address"
}

// ExampleConfigFields shows the field specs a config struct declares: what
// the host checks the operator's config against and `herald plugins ls -v`
// shows.
func ExampleConfigFields() {
	specs, err := sdk.ConfigFields(Config{})
	if err != nil {
		panic(err)
	}
	for _, s := range specs {
		fmt.Printf("%s %s required=%v secret=%v default=%q enum=%v\n", s.Name, s.Type, s.Required, s.Secret, s.Default, s.Enum)
	}
	// Output:
	// url string required=true secret=false default="" enum=[]
	// token string required=false secret=true default="" enum=[]
	// timeout duration required=false secret=false default="10s" enum=[]
	// mode string required=false secret=false default="json" enum=[json form]
}

// ExampleDecodeConfig decodes an operator's config strictly: defaults from
// the tags, values converted from the shapes config files produce, and
// every refusal a *sdk.ConfigError naming the field.
func ExampleDecodeConfig() {
	var c Config
	err := sdk.DecodeConfig(map[string]any{"url": "https://x.test", "timeout": "3s"}, &c)
	fmt.Println(err, c.URL, c.Timeout, c.Mode)

	for _, raw := range []map[string]any{
		{"url": "https://x.test", "tiemout": "3s"},
		{"url": "https://x.test", "token": 42},
		{"url": "https://x.test", "mode": "xml"},
		{},
	} {
		err := sdk.DecodeConfig(raw, &Config{})
		var ce *sdk.ConfigError
		if errors.As(err, &ce) {
			fmt.Printf("%s: %s\n", ce.Field, ce.Msg)
		}
	}
	// Output:
	// <nil> https://x.test 3s json
	// tiemout: unknown field (known: url, token, timeout, mode)
	// token: must be a string; the value is secret and not shown
	// mode: "xml" is not one of json, form
	// url: required
}

// ExampleSendEach adapts a provider that sends one message per call: the
// SDK keeps one result per delivery, classifies errors, and stops the batch
// when the provider rate limits.
func ExampleSendEach() {
	send := sdk.SendEach(func(_ context.Context, d sdk.Delivery) (string, error) {
		switch d.Content.Body {
		case "flaky":
			return "", sdk.RetryableError(errors.New("503 from provider"), 30*time.Second)
		case "slow down":
			return "", sdk.RateLimitedError(errors.New("429 from provider"), time.Minute)
		}
		return "msg-" + d.DeliveryID, nil
	})
	var batch []sdk.Delivery
	for i, body := range []string{"hi", "flaky", "slow down", "never tried"} {
		batch = append(batch, sdk.Delivery{DeliveryID: fmt.Sprint("d", i), Content: sdk.Content{Body: body}})
	}
	resp, _ := send(context.Background(), sdk.SendRequest{Deliveries: batch})
	for _, r := range resp.Results {
		fmt.Printf("%s %s %s %q\n", r.DeliveryID, r.Outcome, r.RetryAfter, r.Reason)
	}
	// Output:
	// d0 sent 0s ""
	// d1 retryable 30s "503 from provider"
	// d2 rate_limited 1m0s "429 from provider"
	// d3 rate_limited 1m0s "not attempted: provider rate limited"
}

// ExampleClassify shows how the host reads an error: classified by the
// SDK's constructors or by behaviour methods (Retryable, RateLimited,
// Permanent, RetryAfter, Code) on any error type, through wrapping.
func ExampleClassify() {
	for _, err := range []error{
		sdk.PermanentError(errors.New("mailbox unavailable"), "550"),
		fmt.Errorf("send: %w", sdk.RateLimitedError(errors.New("429"), time.Minute)),
		context.DeadlineExceeded,
		errors.New("something odd"),
	} {
		outcome, classified := sdk.Classify(err)
		fmt.Printf("%s %v %s %q\n", outcome, classified, sdk.RetryAfter(err), sdk.ErrorCode(err))
	}
	// Output:
	// permanent true 0s "550"
	// rate_limited true 1m0s ""
	// retryable true 0s ""
	// retryable false 0s ""
}

// ExampleResult shows the constructors a plugin builds results with. The
// zero Outcome is OutcomeUnspecified: the host retries such a result and
// logs a contract violation.
func ExampleResult() {
	for _, r := range []sdk.Result{
		sdk.Sent("d1", "provider-id-1"),
		sdk.Retry("d2", "connection reset", 0),
		sdk.RateLimited("d3", "429", 10*time.Second),
		sdk.Permanent("d4", "no such user", "user_unknown"),
		{DeliveryID: "d5"},
	} {
		fmt.Println(r.DeliveryID, r.Outcome)
	}
	// Output:
	// d1 sent
	// d2 retryable
	// d3 rate_limited
	// d4 permanent
	// d5 unspecified
}

// ExampleCheckConfig runs the check the host runs before Configure, on a
// hand-written field spec.
func ExampleCheckConfig() {
	specs := []sdk.FieldSpec{
		{Name: "port", Type: sdk.FieldInt, Default: "587"},
		{Name: "hosts", Type: sdk.FieldList, Required: true},
	}
	cfg, err := sdk.CheckConfig(specs, map[string]any{"hosts": []any{"a", "b"}})
	fmt.Println(cfg["port"], strings.Join(cfg["hosts"].([]string), "+"), err)
	_, err = sdk.CheckConfig(specs, map[string]any{"hosts": "a", "port": "x"})
	fmt.Println(err)
	// Output:
	// 587 a+b <nil>
	// config field "port": must be an int, got "x"
}
