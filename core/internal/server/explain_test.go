package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/api/openapitest"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/relay"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/sdk/producer"
)

// TestExplainStoredEvent: the admin listener explains a processed event,
// recomputed against today's directory at the time it was processed (and
// says so), beside the stored deliveries; ?user= explains one user, even
// one no audience reached; ?format=text is the rules explain table; an
// unknown event, or another tenant's, is 404.
func TestExplainStoredEvent(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	rs, _, err := rulesfile.LoadWith(rulesfile.Options{KeepReferences: true}, "../../../examples/rules/herald.hcl")
	if err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open("../../../examples/directory/acme.json")
	if err != nil {
		t.Fatal(err)
	}
	res, err := directory.Parse(fh, "acme.json", directory.Options{})
	fh.Close()
	if err != nil || !res.OK() {
		t.Fatalf("acme.json: %v %v", err, res)
	}
	if err := store.ImportDirectory(ctx, w.db.Pool, "a", &res.Directory); err != nil {
		t.Fatal(err)
	}
	ev := producer.Event{TenantID: "a", EventID: "evt-x", Type: "RESERVATION_REQUESTED",
		Payload: json.RawMessage(`{"reservation_id": 1, "restaurant_id": 5, "customer_name": "Ann", "pax": 2, "time": "13:00"}`)}
	if err := producer.Enqueue(ctx, w.db.Pool, ev); err != nil {
		t.Fatal(err)
	}
	current := func() *rules.RuleSet { return rs }
	rl := relay.New(w.db.Pool, current, nil, hclog.NewNullLogger(), relay.Config{BatchSize: 10, MaxAttempts: 3})
	if n, err := rl.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("relay: %d events, %v", n, err)
	}
	mux := http.NewServeMux()
	mux.Handle(server.AdminExplainPattern, server.ExplainHandler(w.pools.Worker, current))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	openapitest.Watch(t, srv.URL)
	get := func(path string) (int, []byte) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}

	code, body := get("/admin/v1/events/a/evt-x/explain")
	var out server.ExplainResponse
	if err := json.Unmarshal(body, &out); code != 200 || err != nil {
		t.Fatalf("%d %v: %s", code, err, body)
	}
	if !out.Recomputed || out.Note != server.RecomputedNote || out.Status != "PROCESSED" || out.Decision == nil || len(out.Deliveries) == 0 {
		t.Fatalf("explanation %s", body)
	}
	// The recomputed decision agrees with what was stored (the directory
	// has not changed): every kept channel has a delivery.
	stored := map[string]bool{}
	for _, d := range out.Deliveries {
		stored[d.UserID+" "+d.Channel] = true
	}
	kept := map[string]bool{}
	for _, r := range out.Decision.Recipients {
		for _, c := range r.Channels {
			kept[r.Recipient.UserID+" "+c.Channel] = true
		}
	}
	if len(kept) != len(stored) {
		t.Errorf("recomputed %v, stored %v", kept, stored)
	}
	for k := range kept {
		if !stored[k] {
			t.Errorf("recomputed %s, not stored", k)
		}
	}

	code, body = get("/admin/v1/events/a/evt-x/explain?user=agent1&format=text")
	for _, want := range []string{
		"note: recomputed now against today's directory",
		"not notified: no audience of RESERVATION_REQUESTED reached the user",
		"group restaurant:5 roles MANAGER, CHEF, WAITER  no  not a member of group restaurant:5",
		"stored deliveries",
	} {
		if code != 200 || !strings.Contains(string(body), want) {
			t.Errorf("?user=agent1&format=text: %d, body lacks %q:\n%s", code, want, body)
		}
	}
	if code, body = get("/admin/v1/events/b/evt-x/explain"); code != 404 {
		t.Errorf("another tenant's event: %d %s", code, body)
	}
	if code, body = get("/admin/v1/events/a/nope/explain"); code != 404 {
		t.Errorf("unknown event: %d %s", code, body)
	}
	if code, body = get("/admin/v1/events/a%2Fb/evt-x/explain"); code != 400 {
		t.Errorf("bad tenant: %d %s", code, body)
	}
	// Invalid UTF-8 and NUL never reach PostgreSQL (which would refuse
	// them with a 5xx): 400 naming the field.
	for _, path := range []string{
		"/admin/v1/events/a/evt%ff/explain",
		"/admin/v1/events/a/evt%00x/explain",
		"/admin/v1/events/a/evt-x/explain?user=%ff",
		"/admin/v1/events/a/evt-x/explain?user=a%00b",
	} {
		if code, body = get(path); code != 400 {
			t.Errorf("%s: %d %s, want 400", path, code, body)
		}
	}
}
