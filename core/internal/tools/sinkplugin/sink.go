package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/sdk"
	"go.opentelemetry.io/otel/trace"
)

// Config field names.
const (
	fieldRecordFile    = "record_file"
	fieldOutcome       = "outcome"
	fieldDelay         = "delay"
	fieldCrashOnceFile = "crash_once_file"
	fieldFailFile      = "fail_file"
	fieldFailHealth    = "fail_health"
	fieldVersion       = "version"
	fieldRecordBrief   = "record_brief"
	fieldHoldFile      = "hold_file"
	fieldEnvFile       = "env_file"
	fieldToken         = "token"
	fieldLogToken      = "log_token"
	fieldReasonBytes   = "reason_bytes"
	fieldLogLines      = "log_lines"
	fieldProbe         = "probe"
)

// Record is one line of the record file.
type Record struct {
	DeliveryID     string       `json:"delivery_id"`
	EventID        string       `json:"event_id"`
	IdempotencyKey string       `json:"idempotency_key,omitempty"`
	Channel        string       `json:"channel,omitempty"`
	User           string       `json:"user,omitempty"`
	Attempt        int          `json:"attempt"`
	Content        *sdk.Content `json:"content,omitempty"`
	PID            int          `json:"pid"`
	Provider       string       `json:"provider,omitempty"`
	Version        string       `json:"version,omitempty"`
	BinaryVersion  string       `json:"binary_version,omitempty"`
	Outcome        string       `json:"outcome"`
	// TokenSHA256 is the SHA-256 (hex) of the token the sink was
	// configured with, so that tests can check which secret it got without
	// the secret itself being written anywhere.
	TokenSHA256 string `json:"token_sha256,omitempty"`
	// At is when the sink answered the batch (Unix nanoseconds): the end
	// of a delivery's trip through Herald, for latency measurements.
	At int64 `json:"at"`
	// TraceID and ParentSpanID are the trace context the Send call's
	// context held (the host's Send span, continued by the sdk): the
	// parent a span the plugin started would have. Empty: none.
	TraceID      string `json:"trace_id,omitempty"`
	ParentSpanID string `json:"parent_span_id,omitempty"`
	// DeliveryTraceParent is the delivery's own trace context
	// (sdk.Delivery.TraceParent).
	DeliveryTraceParent string `json:"delivery_traceparent,omitempty"`
}

// HeldBatch is one line of <hold_file>.held: a batch Send is holding.
type HeldBatch struct {
	PID         int      `json:"pid"`
	DeliveryIDs []string `json:"delivery_ids"`
}

type config struct {
	holdFile      string
	recordFile    string
	outcome       string
	delay         time.Duration
	crashOnceFile string
	failFile      string
	failHealth    bool
	version       string
	provider      string
	recordBrief   bool
	envFile       string
	token         string
	logToken      bool
	reasonBytes   int
	logLines      int
	probe         string
}

// Sink is the recording channel.
type Sink struct {
	mu  sync.Mutex
	cfg config
	seq int
}

var (
	_ sdk.Channel = (*Sink)(nil)
	_ sdk.Closer  = (*Sink)(nil)
)

// declaredClass is the Class the build declares.
func declaredClass() sdk.Class {
	if class == "best-effort" {
		return sdk.BestEffort
	}
	return sdk.Persistent
}

// New returns an unconfigured Sink.
func New() sdk.Channel {
	sdk.Logger().Info("sink plugin starting", "binary_version", version, "pid", os.Getpid())
	return &Sink{}
}

// Describe says the sink serves any channel, persistently (best effort in
// a variant built with -X main.class=best-effort), 100 at a time.
func (s *Sink) Describe(context.Context, sdk.DescribeRequest) (sdk.DescribeResponse, error) {
	return sdk.DescribeResponse{Description: sdk.Description{
		ChannelType:   sdk.AnyChannel,
		Provider:      "sink",
		PluginVersion: version,
		Class:         declaredClass(),
		MaxBatch:      100,
		Capabilities:  []string{"idempotency_key"},
		Config: []sdk.FieldSpec{
			{Name: fieldRecordFile, Type: sdk.FieldString, Description: "append one JSON line per delivery"},
			{Name: fieldOutcome, Type: sdk.FieldString, Default: "sent", Enum: []string{"sent", "retry", "permanent", "rate_limited", "unspecified"}, Description: "outcome of every delivery (unspecified: a result with no outcome, which breaks the contract)"},
			{Name: fieldDelay, Type: sdk.FieldDuration, Default: "0s", Description: "sleep in every Send"},
			{Name: fieldCrashOnceFile, Type: sdk.FieldString, Description: "exit(2) in Send once, when this file exists"},
			{Name: fieldFailFile, Type: sdk.FieldString, Description: "fail every delivery while this file exists"},
			{Name: fieldFailHealth, Type: sdk.FieldBool, Default: "false", Description: "report unhealthy"},
			{Name: fieldVersion, Type: sdk.FieldString, Description: "label logged and recorded"},
			{Name: fieldRecordBrief, Type: sdk.FieldBool, Default: "false", Description: "record ids, attempt and time only (benchmarks)"},
			{Name: fieldHoldFile, Type: sdk.FieldString, Description: "hold every batch while this file exists"},
			{Name: fieldEnvFile, Type: sdk.FieldString, Description: "write the plugin's environment here when configured"},
			{Name: fieldToken, Type: sdk.FieldString, Secret: true, Description: "a credential; its SHA-256 is recorded"},
			{Name: fieldLogToken, Type: sdk.FieldBool, Default: "false", Description: "log the token in clear at Configure, and put it in fail_health's message (tests the host's redaction)"},
			{Name: fieldReasonBytes, Type: sdk.FieldInt, Default: "0", Description: "pad every reason, code and provider message id to this many bytes (tests the host's bounds)"},
			{Name: fieldLogLines, Type: sdk.FieldInt, Default: "0", Description: "log this many extra lines in every Send (tests the host's log bound)"},
			{Name: fieldProbe, Type: sdk.FieldString, Description: "comma-separated files (PPID stands for the parent's pid) Send tries to read; every result is Permanent with a reason naming each file ok or refused"},
		},
	}}, nil
}

// Configure reads the checked config.
func (s *Sink) Configure(_ context.Context, req sdk.ConfigureRequest) (sdk.ConfigureResponse, error) {
	c, err := configFromParsed(req.Config)
	if err != nil {
		return sdk.ConfigureResponse{}, err
	}
	c.provider = req.ProviderName
	if c.envFile != "" {
		// A JSON array of NAME=value strings (values may span lines),
		// then an atomic rename: a reader never sees half of it.
		env, err := json.Marshal(os.Environ())
		if err != nil {
			return sdk.ConfigureResponse{}, fmt.Errorf("sink: env_file: %w", err)
		}
		if err := os.WriteFile(c.envFile+".tmp", env, 0o600); err != nil {
			return sdk.ConfigureResponse{}, fmt.Errorf("sink: env_file: %w", err)
		}
		if err := os.Rename(c.envFile+".tmp", c.envFile); err != nil {
			return sdk.ConfigureResponse{}, fmt.Errorf("sink: env_file: %w", err)
		}
	}
	s.mu.Lock()
	s.cfg = c
	s.mu.Unlock()
	if c.logToken {
		// What a careless plugin does; the host must redact it.
		sdk.Logger().Info("sink token in clear (log_token is set)", "token", c.token, "pid", os.Getpid())
	}
	sdk.Logger().Info("sink configured", "provider", c.provider, "version", c.version, "binary_version", version, "pid", os.Getpid())
	return sdk.ConfigureResponse{}, nil
}

func configFromParsed(m map[string]any) (config, error) {
	var c config
	c.recordFile, _ = m[fieldRecordFile].(string)
	c.outcome, _ = m[fieldOutcome].(string)
	c.delay, _ = m[fieldDelay].(time.Duration)
	c.crashOnceFile, _ = m[fieldCrashOnceFile].(string)
	c.failFile, _ = m[fieldFailFile].(string)
	c.failHealth, _ = m[fieldFailHealth].(bool)
	c.version, _ = m[fieldVersion].(string)
	c.recordBrief, _ = m[fieldRecordBrief].(bool)
	c.holdFile, _ = m[fieldHoldFile].(string)
	c.envFile, _ = m[fieldEnvFile].(string)
	c.token, _ = m[fieldToken].(string)
	c.logToken, _ = m[fieldLogToken].(bool)
	c.reasonBytes, _ = m[fieldReasonBytes].(int)
	c.logLines, _ = m[fieldLogLines].(int)
	c.probe, _ = m[fieldProbe].(string)
	if c.delay < 0 {
		return c, &sdk.ConfigError{Field: fieldDelay, Msg: "must not be negative"}
	}
	return c, nil
}

// Send records the batch and answers with the configured outcome.
func (s *Sink) Send(ctx context.Context, req sdk.SendRequest) (sdk.SendResponse, error) {
	batch := req.Deliveries
	s.mu.Lock()
	c := s.cfg
	s.seq++
	seq := s.seq
	s.mu.Unlock()

	if c.crashOnceFile != "" {
		if err := os.Remove(c.crashOnceFile); err == nil {
			sdk.Logger().Warn("sink crashing on purpose", "batch", len(batch), "pid", os.Getpid())
			os.Exit(2)
		}
	}
	if c.holdFile != "" && exists(c.holdFile) {
		if err := hold(ctx, c.holdFile, batch); err != nil {
			return sdk.SendResponse{}, err
		}
	}
	if c.delay > 0 {
		t := time.NewTimer(c.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return sdk.SendResponse{}, sdk.RetryableError(fmt.Errorf("sink: %w", ctx.Err()), 0)
		}
	}
	outcome := c.outcome
	if c.failFile != "" && exists(c.failFile) {
		outcome = "retry"
	}
	for i := range c.logLines {
		sdk.Logger().Info("sink noise", "line", i, "pid", os.Getpid())
	}
	probed := probe(c.probe)
	results := make([]sdk.Result, len(batch))
	var traceID, parentID string
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		traceID, parentID = sc.TraceID().String(), sc.SpanID().String()
	}
	var buf []byte
	at := time.Now().UnixNano()
	for i, d := range batch {
		switch outcome {
		case "retry":
			results[i] = sdk.Retry(d.DeliveryID, "sink: told to retry", 0)
		case "permanent":
			results[i] = sdk.Permanent(d.DeliveryID, "sink: told to fail", "SINK_PERMANENT")
		case "rate_limited":
			results[i] = sdk.RateLimited(d.DeliveryID, "sink: told to rate limit", time.Second)
		case "unspecified":
			results[i] = sdk.Result{DeliveryID: d.DeliveryID}
		default:
			outcome = "sent"
			results[i] = sdk.Sent(d.DeliveryID, fmt.Sprintf("sink-%d-%d-%d", os.Getpid(), seq, i))
		}
		if c.probe != "" {
			results[i] = sdk.Permanent(d.DeliveryID, probed, "SINK_PROBE")
		}
		if c.reasonBytes > 0 {
			r := &results[i]
			r.Reason, r.Code, r.ProviderMessageID = pad(r.Reason, c.reasonBytes), pad(r.Code, c.reasonBytes), pad(r.ProviderMessageID, c.reasonBytes)
		}
		if c.recordFile == "" {
			continue
		}
		rec := Record{DeliveryID: d.DeliveryID, EventID: d.EventID, Attempt: d.Attempt,
			PID: os.Getpid(), Outcome: outcome, At: at, TraceID: traceID, ParentSpanID: parentID,
			DeliveryTraceParent: d.TraceParent}
		if !c.recordBrief {
			content := d.Content
			rec.IdempotencyKey, rec.Channel, rec.User, rec.Content = d.IdempotencyKey, d.Channel, d.Recipient.UserID, &content
			rec.Provider, rec.Version, rec.BinaryVersion = c.provider, c.version, version
			if c.token != "" {
				sum := sha256.Sum256([]byte(c.token))
				rec.TokenSHA256 = hex.EncodeToString(sum[:])
			}
		}
		line, err := json.Marshal(rec)
		if err != nil {
			return sdk.SendResponse{}, sdk.PermanentError(fmt.Errorf("sink: encode record: %w", err), "")
		}
		buf = append(append(buf, line...), '\n')
	}
	if len(buf) > 0 {
		if err := appendFile(c.recordFile, buf); err != nil {
			return sdk.SendResponse{}, sdk.RetryableError(fmt.Errorf("sink: record: %w", err), 0)
		}
	}
	sdk.Logger().Info("sink batch", "size", len(batch), "outcome", outcome, "provider", c.provider,
		"version", c.version, "binary_version", version, "pid", os.Getpid())
	return sdk.SendResponse{Results: results}, nil
}

// Health is healthy unless told otherwise.
func (s *Sink) Health(context.Context, sdk.HealthRequest) (sdk.HealthResponse, error) {
	s.mu.Lock()
	c := s.cfg
	s.mu.Unlock()
	switch {
	case brokenHealth == "true":
		return sdk.HealthResponse{Message: "sink: built broken (brokenHealth=true), version " + version}, nil
	case c.failHealth && c.logToken:
		// A careless plugin's error message; the host must redact it.
		return sdk.HealthResponse{Message: "sink: fail_health is set, token " + c.token}, nil
	case c.failHealth:
		return sdk.HealthResponse{Message: "sink: fail_health is set"}, nil
	case c.failFile != "" && exists(c.failFile):
		return sdk.HealthResponse{Message: "sink: fail_file exists"}, nil
	}
	return sdk.HealthResponse{Healthy: true, Message: "sink " + version}, nil
}

// Close logs the shutdown.
func (s *Sink) Close() error {
	sdk.Logger().Info("sink plugin stopping", "binary_version", version, "pid", os.Getpid())
	return nil
}

// hold announces batch in <file>.held and waits until file is gone or ctx
// ends; a batch whose call ended is not sent.
func hold(ctx context.Context, file string, batch []sdk.Delivery) error {
	held := HeldBatch{PID: os.Getpid()}
	for _, d := range batch {
		held.DeliveryIDs = append(held.DeliveryIDs, d.DeliveryID)
	}
	line, err := json.Marshal(held)
	if err != nil {
		return sdk.PermanentError(fmt.Errorf("sink: encode held batch: %w", err), "")
	}
	// The log line goes first: once the held file names the batch, a test
	// may SIGKILL this process, and the line must be in the pipe to the
	// host by then (the host drains the pipe after the exit).
	sdk.Logger().Info("sink holding batch", "size", len(batch), "pid", os.Getpid())
	if err := appendFile(file+".held", append(line, '\n')); err != nil {
		return sdk.RetryableError(fmt.Errorf("sink: announce held batch: %w", err), 0)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for exists(file) {
		select {
		case <-ctx.Done():
			return sdk.RetryableError(fmt.Errorf("sink: held: %w", ctx.Err()), 0)
		case <-tick.C:
		}
	}
	return nil
}

// pad repeats s (or "x") to n bytes, ending in "é" so that a cut at a
// byte count can split a rune.
func pad(s string, n int) string {
	if s == "" {
		s = "x"
	}
	b := make([]byte, 0, n+len(s))
	for len(b) < n {
		b = append(b, s...)
		b = append(b, " é"...)
	}
	return string(b)
}

// probe tries to read each of the comma-separated files and says for each
// "PATH=ok" (it read at least one byte) or "PATH=refused".
func probe(list string) string {
	if list == "" {
		return ""
	}
	var out []string
	for _, p := range strings.Split(list, ",") {
		p = strings.ReplaceAll(strings.TrimSpace(p), "PPID", strconv.Itoa(os.Getppid()))
		b, err := os.ReadFile(p)
		if err == nil && len(b) > 0 {
			out = append(out, p+"=ok")
		} else {
			out = append(out, p+"=refused")
		}
	}
	return strings.Join(out, " ")
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

func appendFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
