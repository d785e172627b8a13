package pluginhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/secret"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestSecretFieldsRedacted runs sinks whose secret field (token) they log
// in clear and put in a failing health message: the plugin gets the value,
// while the host's log (through the redactor) and Status show none of it.
func TestSecretFieldsRedacted(t *testing.T) {
	t.Parallel()
	const token, leaky = "sink-token-0123456789abcdef", "another-token-fedcba9876543210"
	rec := filepath.Join(t.TempDir(), "rec.jsonl")
	red := secret.NewRedactor()
	var logs *testenv.LogBuffer
	env := startHost(t, []channel.Config{
		sinkChannel("SECRET", map[string]any{"record_file": rec, "token": token, "log_token": true}),
		sinkChannel("LEAKY", map[string]any{"token": leaky, "log_token": true, "fail_health": true}),
	}, func(c *Config) {
		logs = &testenv.LogBuffer{}
		c.Logger = hclog.New(&hclog.LoggerOptions{Output: red.Writer(logs), Level: hclog.Debug})
		c.Redactor = red
	})
	batch := deliveries("s", 2)
	res, _, err := env.h.Send(context.Background(), "SECRET", batch)
	if err != nil {
		t.Fatal(err)
	}
	allSent(t, batch, res)
	sum := sha256.Sum256([]byte(token))
	for _, r := range readRecords(t, rec) {
		if r["token_sha256"] != hex.EncodeToString(sum[:]) {
			t.Fatalf("the plugin did not get the token: record %v", r)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(statusOf(t, env.h, "LEAKY", "sink").LastError, "fail_health")
	}, "LEAKY's health failure in its status")

	st := statusOf(t, env.h, "LEAKY", "sink")
	if strings.Contains(st.LastError, leaky) || !strings.Contains(st.LastError, secret.Redacted) {
		t.Errorf("status last_error not redacted: %q", st.LastError)
	}
	out := logs.String()
	for _, s := range []string{token, leaky} {
		if strings.Contains(out, s) {
			t.Errorf("secret %q in the host log:\n%s", s, out)
		}
	}
	if !strings.Contains(out, "sink token in clear") || !strings.Contains(out, secret.Redacted) {
		t.Errorf("the plugin's leaking log line is missing or not redacted:\n%s", out)
	}
}
