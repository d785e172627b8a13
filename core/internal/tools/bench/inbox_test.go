package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestRunInboxSmall runs the inbox benchmark at 20,000 rows of 200 users
// for a couple of seconds: every endpoint of every phase is measured and
// answered as expected, the answers hold notifications, the writes leave
// the counters exactly right, and the report judges every target.
func TestRunInboxSmall(t *testing.T) {
	db := testenv.Postgres(t) // fails (or skips with -short) when PostgreSQL does not answer
	db.Pool.Close()
	adminURL := testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL)
	res, err := RunInbox(context.Background(), Env{AdminDatabaseURL: adminURL, Log: t.Logf}, InboxScenario{
		Rows: 20000, Users: 200, Baseline: 20, Readers: 8, Warmup: 200 * time.Millisecond, ReadFor: 2 * time.Second,
		Writers: 4, WriteFor: time.Second, MaxWrites: 2000, ActionShare: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Scenario.Tenants != 10 || res.Scenario.Sharers != 5 || res.SharedRows != 40*5 || res.TableBytes <= 0 || res.Load <= 0 {
		t.Errorf("scenario %+v, %d shared rows, %d bytes, load %s", res.Scenario, res.SharedRows, res.TableBytes, res.Load)
	}
	names := []string{"unread-count", "bell", "list"}
	for phase, eps := range map[string][]EndpointResult{"alone": res.Baseline, "readers": res.Reads} {
		if len(eps) != len(names) {
			t.Fatalf("%s: %d endpoints, want %d: %+v", phase, len(eps), len(names), eps)
		}
		for i, e := range eps {
			if e.Name != names[i] || e.Latency.Count == 0 || e.Items == 0 || e.Failed != 0 || e.Latency.P99 <= 0 {
				t.Errorf("%s: endpoint %d: %q, %d requests, %d items, %d failed (%s), p99 %.2f ms", phase, i, e.Name,
					e.Latency.Count, e.Items, e.Failed, e.Detail, e.Latency.P99)
			}
		}
	}
	if res.Baseline[0].Latency.Count != 20 {
		t.Errorf("the lone reader sent %d rounds, want 20", res.Baseline[0].Latency.Count)
	}
	if res.ReadsPerSec <= 0 || res.WritesPerSec <= 0 || res.Failed != 0 {
		t.Errorf("%.0f reads/s, %.0f writes/s, %d failed", res.ReadsPerSec, res.WritesPerSec, res.Failed)
	}
	if len(res.Writes) != 2 || res.Writes[0].Name != "read" || res.Writes[1].Name != "action" {
		t.Fatalf("writes: %+v", res.Writes)
	}
	if rd := res.Writes[0]; rd.Latency.Count == 0 || rd.Failed != 0 {
		t.Errorf("read: %d answered, %d failed (%s)", rd.Latency.Count, rd.Failed, rd.Detail)
	}
	if act := res.Writes[1]; act.Items == 0 || act.Failed != 0 || act.Latency.Count != int(act.Items)+act.Conflicts {
		t.Errorf("action: %d answered, %d won, %d conflicts, %d failed (%s)", act.Latency.Count, act.Items, act.Conflicts, act.Failed, act.Detail)
	}
	c := res.Check
	if !c.OK || c.Drift != 0 || c.Counters == 0 || c.Won == 0 || c.Actions != c.Won || !strings.HasPrefix(c.Detail, "exactly right") {
		t.Errorf("check: %+v", c)
	}

	rep := Report{Inbox: &res}
	rep.Evaluate()
	judged := 0
	for _, tg := range rep.Targets {
		if strings.HasPrefix(tg.Name, "inbox ") {
			judged++
		}
	}
	if judged != len(names)+1 {
		t.Errorf("%d inbox targets, want %d: %+v", judged, len(names)+1, rep.Targets)
	}
	if err := rep.Err(); err != nil {
		t.Errorf("report: %v", err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	for _, s := range []string{"GET /v1/inbox/unread-count", "GET /v1/inbox/bell", "GET /v1/inbox?limit=20", "POST /v1/inbox/{id}/read",
		"POST /v1/inbox/{id}/actions", "every read", "every write", "inbox counters: exactly right"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("printed report lacks %q:\n%s", s, out.String())
		}
	}
	t.Logf("\n%s", out.String())
}

// TestInboxScenarioValidate checks the scenario's limits after defaults.
func TestInboxScenarioValidate(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		sc   InboxScenario
		want string
	}{
		"defaults":             {InboxScenario{}, ""},
		"users not a multiple": {InboxScenario{Users: 105}, "multiple"},
		"too many sharers":     {InboxScenario{Users: 20, Sharers: 3}, "sharers"},
		"shared beyond rows":   {InboxScenario{Rows: 100, SharedEvents: 20}, "fewer than the rows"},
		"tokens expire":        {InboxScenario{ReadFor: 11 * time.Minute}, "tokens expire"},
		"action share":         {InboxScenario{ActionShare: 1.5}, "action share"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sc := tc.sc
			sc.setDefaults()
			err := sc.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}
