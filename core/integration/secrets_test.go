package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk/producer"
)

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestSecretsFromEnvAndFilesNeverShown runs a real herald serve whose
// database password comes from a file (file:), whose broker password comes
// from the environment (env:), and whose sink providers take a secret
// field from a file and from the environment — sinks that log their
// secret in clear. It delivers an event (each plugin got the resolved
// value), lists the plugins, checks and explains the rules, rotates the
// secret file and reloads (the new value takes effect), breaks the file
// and reloads (refused, naming file, line, rule and field; the old value
// keeps serving), and finally finds none of the secret values in the
// daemon's whole log, the CLI's outputs or the admin API's answers.
func TestSecretsFromEnvAndFilesNeverShown(t *testing.T) {
	e := newEnv(t, "sent")
	ctx := context.Background()
	var (
		pgPass     = testenv.RandomName("pgpass-")
		mqPass     = testenv.RandomName("mqpass-")
		fileToken1 = testenv.RandomName("file-token-one-")
		fileToken2 = testenv.RandomName("file-token-two-")
		envToken   = testenv.RandomName("env-token-")
	)
	secrets := map[string]string{"database password": pgPass, "broker password": mqPass,
		"file token": fileToken1, "rotated file token": fileToken2, "env token": envToken}

	// A login role of the database's own, with a password, that runs
	// each part of the daemon as its group role.
	role := testenv.RandomName("herald_sec_")
	if _, err := e.db.Pool.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s' IN ROLE herald_api, herald_worker, herald_admin`, role, pgPass)); err != nil {
		t.Fatalf("create login role: %v", err)
	}
	t.Cleanup(func() {
		if _, err := e.db.Pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role); err != nil {
			t.Logf("drop role %s: %v", role, err)
		}
	})
	dbURL, err := url.Parse(e.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	dbURL.User = url.UserPassword(role, pgPass)

	// A broker user of the test's own, with a password.
	mqUser := testenv.RandomName("herald-sec-")
	if out, err := testenv.Rabbitmqctl("add_user", mqUser, mqPass); err != nil {
		t.Fatalf("add broker user: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := testenv.Rabbitmqctl("delete_user", mqUser); err != nil {
			t.Logf("delete broker user %s: %v: %s", mqUser, err, out)
		}
	})
	if out, err := testenv.Rabbitmqctl("set_permissions", "-p", e.broker.VHost, mqUser, ".*", ".*", ".*"); err != nil {
		t.Fatalf("broker permissions: %v: %s", err, out)
	}
	mqURL, err := url.Parse(e.broker.URL)
	if err != nil {
		t.Fatal(err)
	}
	mqURL.User = url.UserPassword(mqUser, mqPass)

	secretsDir := filepath.Join(e.dir, "secrets")
	tokenFile := filepath.Join(secretsDir, "sink-token")
	writeSecret := func(path, v string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeSecret(filepath.Join(secretsDir, "database-url"), dbURL.String())
	writeSecret(tokenFile, fileToken1)

	// The daemon config names the secrets; the rules too (file: paths are
	// relative to the file that names them).
	e.cfgDatabaseURL = "file:secrets/database-url"
	e.cfgAMQPURL = "env:HERALD_TEST_AMQP_URL"
	e.extraEnv = []string{"HERALD_TEST_AMQP_URL=" + mqURL.String(), "HERALD_TEST_SINK_TOKEN=" + envToken}
	e.writeConfig()
	rulesText := fmt.Sprintf(sinkRules, e.record, "sent")
	sinkLine := fmt.Sprintf(`config = { record_file = %q, outcome = "sent" }`, e.record)
	for _, cfg := range []string{
		`token = "file:../secrets/sink-token", log_token = true`,   // EMAIL
		`token = "env:HERALD_TEST_SINK_TOKEN", log_token = true`,   // PUSH
		`version = "raw:env:NOT_A_REFERENCE", token = "raw:short"`, // WEBSOCKET
	} {
		next := strings.Replace(rulesText, sinkLine, strings.Replace(sinkLine, `outcome = "sent"`, `outcome = "sent", `+cfg, 1), 1)
		if next == rulesText {
			t.Fatal("the rules template changed: no provider line to give a secret")
		}
		rulesText = next
	}
	e.writeRules(rulesText)
	rulesFile := filepath.Join(e.rulesDir, "rules.hcl")

	d := e.start()
	var outputs []string // everything the CLI and the admin API said
	if _, _, err := e.client().Emit(ctx, reservation("s-1")); err != nil {
		t.Fatal(err)
	}
	e.waitAllSent(deliveriesPerEvent, 60*time.Second)
	tokens := func(eventID string) map[string]map[string]bool {
		got := map[string]map[string]bool{}
		for _, r := range e.records() {
			if r.EventID != eventID {
				continue
			}
			if got[r.Channel] == nil {
				got[r.Channel] = map[string]bool{}
			}
			got[r.Channel][r.TokenSHA256+" "+r.Version] = true
		}
		return got
	}
	want := map[string]map[string]bool{
		"EMAIL":     {sha256Hex(fileToken1) + " ": true},
		"PUSH":      {sha256Hex(envToken) + " ": true},
		"WEBSOCKET": {sha256Hex("short") + " env:NOT_A_REFERENCE": true},
	}
	if got := tokens("s-1"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("what the plugins were configured with (token sha256, version):\n got %v\nwant %v", got, want)
	}

	// plugins ls, as a table and as JSON.
	for _, args := range [][]string{{"plugins", "ls"}, {"plugins", "ls", "--json"}} {
		out, err := e.cli(args...)
		if err != nil {
			t.Fatalf("herald %v: %v\n%s", args, err, out)
		}
		outputs = append(outputs, out)
	}

	// rules check resolves like serve; --no-resolve only checks syntax;
	// an unset variable is named with its file, line, rule and field.
	out, err := e.cli("rules", "check", rulesFile)
	if err != nil || !strings.Contains(out, "ok:") {
		t.Fatalf("rules check: %v\n%s", err, out)
	}
	outputs = append(outputs, out)
	unset := e.extraEnv
	e.extraEnv = []string{"HERALD_TEST_SINK_TOKEN_X=1"}
	out, err = e.cli("rules", "check", rulesFile)
	if err == nil || !strings.Contains(out, rulesFile+`:`) ||
		!strings.Contains(out, `channel "PUSH": providers.0.config.token: env:HERALD_TEST_SINK_TOKEN: environment variable HERALD_TEST_SINK_TOKEN is not set`) {
		t.Fatalf("rules check without the variable: want a refusal naming file, rule and field, got %v:\n%s", err, out)
	}
	outputs = append(outputs, out)
	if out, err = e.cli("rules", "check", "--no-resolve", rulesFile); err != nil {
		t.Fatalf("rules check --no-resolve: %v\n%s", err, out)
	}
	outputs = append(outputs, out)
	e.extraEnv = unset

	// rules explain needs no secret at all.
	evFile, dirFile := filepath.Join(e.dir, "event.json"), filepath.Join(e.dir, "directory.json")
	writeJSONFile(t, evFile, map[string]any{"tenant_id": e.tenant, "event_id": "x", "type": "RESERVATION_REQUESTED",
		"payload": map[string]any{"restaurant_id": 5, "customer_name": "Rossi", "pax": 4}})
	writeJSONFile(t, dirFile, staff)
	for _, args := range [][]string{
		{"rules", "explain", "--rules", rulesFile, "--event", evFile, "--directory", dirFile},
		{"rules", "explain", "--rules", rulesFile, "--event", evFile, "--directory", dirFile, "--json"},
	} {
		out, err := e.cli(args...)
		if err != nil || !strings.Contains(out, "staff1") {
			t.Fatalf("herald %v: %v\n%s", args, err, out)
		}
		outputs = append(outputs, out)
	}

	// Rotate the file and reload: the next deliveries use the new value.
	writeSecret(tokenFile, fileToken2)
	status, body := e.reloadRules()
	outputs = append(outputs, body)
	if status != http.StatusOK {
		t.Fatalf("reload after rotating the secret: %d %s", status, body)
	}
	if _, _, err := e.client().Emit(ctx, reservation("s-2")); err != nil {
		t.Fatal(err)
	}
	e.waitAllSent(2*deliveriesPerEvent, 60*time.Second)
	if got := tokens("s-2")["EMAIL"]; !got[sha256Hex(fileToken2)+" "] || len(got) != 1 {
		t.Fatalf("EMAIL after the rotation got token %v, want the new one", got)
	}

	// A secret file that is gone refuses the reload, naming where it was
	// asked for; the last good rules (and secret) keep serving.
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	status, body = e.reloadRules()
	outputs = append(outputs, body)
	if status != http.StatusUnprocessableEntity || !strings.Contains(body, rulesFile+":") ||
		!strings.Contains(body, `channel "EMAIL": providers.0.config.token: file:../secrets/sink-token: cannot read `+tokenFile+`: no such file or directory`) {
		t.Fatalf("reload with the secret file gone: want 422 naming file, rule, field and path, got %d %s", status, body)
	}
	if _, _, err := e.client().Emit(ctx, reservation("s-3")); err != nil {
		t.Fatal(err)
	}
	e.waitAllSent(3*deliveriesPerEvent, 60*time.Second)
	if got := tokens("s-3")["EMAIL"]; !got[sha256Hex(fileToken2)+" "] {
		t.Fatalf("EMAIL after the refused reload got token %v, want the last good one", got)
	}
	for _, s := range e.plugins() {
		b, _ := json.Marshal(s)
		outputs = append(outputs, string(b))
	}

	d.stop(syscall.SIGTERM)
	log := d.Log()
	if !strings.Contains(log, "sink token in clear") || !strings.Contains(log, "[redacted]") {
		t.Fatalf("the sinks' leaking log lines are missing or not redacted:\n%s", tail(log, 100))
	}
	for what, v := range secrets {
		if strings.Contains(log, v) {
			t.Errorf("the %s is in the daemon's log", what)
			for _, line := range strings.Split(log, "\n") {
				if strings.Contains(line, v) {
					t.Logf("  %s", line)
				}
			}
		}
		for _, out := range outputs {
			if strings.Contains(out, v) {
				t.Errorf("the %s is in a CLI or admin API output:\n%s", what, out)
			}
		}
	}
}

// reloadRules asks the daemon to reload its rules through the admin API;
// it returns the status and the problem's detail (the body when it is no
// problem document).
func (e *env) reloadRules() (int, string) {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.admin+"/admin/v1/rules/reload", nil)
	req.Header.Set("Authorization", "Bearer "+e.adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("rules reload: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var p producer.Problem
	if resp.Header.Get("Content-Type") == "application/problem+json" && json.Unmarshal(b, &p) == nil {
		return resp.StatusCode, p.Detail
	}
	return resp.StatusCode, string(b)
}

func writeJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
