package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// emailSubjects returns the subjects of the EMAIL deliveries of an event.
func (e *env) emailSubjects(eventID string) []string {
	e.t.Helper()
	rows, err := e.db.Pool.Query(context.Background(),
		`SELECT content FROM deliveries WHERE event_id = $1 AND channel = 'EMAIL' ORDER BY user_id`, eventID)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			e.t.Fatal(err)
		}
		var c struct{ Subject string }
		if err := json.Unmarshal(raw, &c); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, c.Subject)
	}
	return out
}

func TestRulesHotReloadUnderServe(t *testing.T) {
	e := newEnv(t, "sent")
	d := e.start()
	ctx := context.Background()
	good := fmt.Sprintf(sinkRules, e.record, "sent")

	if _, _, err := e.client().Emit(ctx, reservation("r-1")); err != nil {
		t.Fatal(err)
	}
	e.waitAllSent(deliveriesPerEvent, 30*time.Second)
	if got := e.emailSubjects("r-1"); len(got) != 3 || got[0] != "New reservation: Rossi" {
		t.Fatalf("subjects before the edit: %q", got)
	}

	// 1. An edited file takes effect without a restart.
	edited := strings.Replace(good, `subject = "New reservation: {{ .payload.customer_name }}"`,
		`subject = "Table request from {{ .payload.customer_name }}"`, 1)
	if edited == good {
		t.Fatal("the edit did not change the rules")
	}
	e.writeRules(edited)
	testenv.Eventually(t, 30*time.Second, func() bool { return strings.Contains(d.Log(), "rules reloaded") },
		"the daemon logs the reload")
	if _, _, err := e.client().Emit(ctx, reservation("r-2")); err != nil {
		t.Fatal(err)
	}
	e.waitAllSent(2*deliveriesPerEvent, 30*time.Second)
	if got := e.emailSubjects("r-2"); len(got) != 3 || got[0] != "Table request from Rossi" {
		t.Fatalf("subjects after the edit: %q", got)
	}

	// 2. A broken edit is refused, its errors logged, and the last good rules keep serving.
	broken := strings.Replace(edited, `optional    = ["EMAIL", "PUSH"]`, `optional    = ["EMAIL", "PUSH", "FAX"]`, 1)
	e.writeRules(broken)
	testenv.Eventually(t, 30*time.Second, func() bool { return strings.Contains(d.Log(), "FAX") },
		"the daemon logs the broken file's error naming the bad channel")
	if _, _, err := e.client().Emit(ctx, reservation("r-3")); err != nil {
		t.Fatal(err)
	}
	e.waitAllSent(3*deliveriesPerEvent, 30*time.Second)
	if got := e.emailSubjects("r-3"); len(got) != 3 || got[0] != "Table request from Rossi" {
		t.Fatalf("subjects after the broken edit: %q", got)
	}
	// The admin readiness says the rules are stale, and why; the daemon stays ready.
	testenv.Eventually(t, 10*time.Second, func() bool {
		code, st := e.adminReady()
		return code == http.StatusOK && st.Rules != nil && st.Rules.State == "stale" &&
			len(st.Rules.Problems) > 0 && strings.Contains(st.Rules.Problems[0], `channel "FAX"`)
	}, "admin readiness shows the stale rules and the FAX problem")

	// 2b. A file truncated to nothing is refused the same way.
	rejected := strings.Count(d.Log(), "rules reload rejected")
	e.writeRules("")
	testenv.Eventually(t, 30*time.Second, func() bool { return strings.Count(d.Log(), "rules reload rejected") > rejected },
		"the daemon rejects the emptied file")
	if !strings.Contains(d.Log(), "empty rules file") {
		t.Error("the log does not say the file is empty")
	}
	if code, st := e.adminReady(); code != http.StatusOK || st.Rules == nil || st.Rules.State != "stale" ||
		len(st.Rules.Problems) == 0 || !strings.Contains(st.Rules.Problems[0], "empty rules file") {
		t.Errorf("admin readiness after the emptied file: %d %+v", code, st.Rules)
	}

	// 3. SIGHUP reloads too: fix the file, signal, and the fix serves.
	before := strings.Count(d.Log(), "rules reloaded")
	fixed := strings.Replace(edited, `Table request from`, `Booking from`, 1)
	if err := os.WriteFile(e.rulesDir+"/rules.hcl", []byte(fixed), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return strings.Count(d.Log(), "rules reloaded") > before },
		"the daemon reloads after SIGHUP")
	if _, _, err := e.client().Emit(ctx, reservation("r-4")); err != nil {
		t.Fatal(err)
	}
	e.waitAllSent(4*deliveriesPerEvent, 30*time.Second)
	if got := e.emailSubjects("r-4"); len(got) != 3 || got[0] != "Booking from Rossi" {
		t.Fatalf("subjects after SIGHUP: %q", got)
	}
	if code, st := e.adminReady(); code != http.StatusOK || st.Rules == nil || st.Rules.State != "current" || len(st.Rules.Problems) != 0 {
		t.Errorf("admin readiness after the fix: %d %+v", code, st.Rules)
	}
}

// adminReady GETs the admin listener's readiness with the admin token.
func (e *env) adminReady() (int, server.ReadyStatus) {
	e.t.Helper()
	token, err := os.ReadFile(e.adminTokenFile)
	if err != nil {
		e.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, e.admin+server.AdminReadyPath, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, server.ReadyStatus{}
	}
	defer resp.Body.Close()
	var st server.ReadyStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		e.t.Fatalf("admin ready body: %v", err)
	}
	return resp.StatusCode, st
}
