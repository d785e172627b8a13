package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/heraldhq/herald/core/internal/api/openapitest"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/store"
)

// TestCountersRepairEndpoint: the admin listener's repair recomputes a
// drifted counter and answers what it fixed; a bad tenant is 400.
func TestCountersRepairEndpoint(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	if _, err := w.db.Pool.Exec(ctx, `INSERT INTO notifications (tenant_id, event_id, user_id, event_type) VALUES ('a', 'e1', 'alice', 'T');
		INSERT INTO notification_counters (tenant_id, user_id, unread) VALUES ('a', 'alice', 5), ('b', 'bob', 2)`); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /admin/v1/counters/repair", server.CountersRepairHandler(w.pools.Worker))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	openapitest.Watch(t, srv.URL)
	resp, err := http.Post(srv.URL+"/admin/v1/counters/repair?tenant=a", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Fixed int           `json:"fixed"`
		Drift []store.Drift `json:"drift"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != 200 || out.Fixed != 1 || out.Drift[0].UserID != "alice" || out.Drift[0].Was != 5 || out.Drift[0].Is != 1 {
		t.Fatalf("repair of tenant a: %d %+v", resp.StatusCode, out)
	}
	var bob int
	if err := w.db.Pool.QueryRow(ctx, `SELECT unread FROM notification_counters WHERE user_id = 'bob'`).Scan(&bob); err != nil || bob != 2 {
		t.Fatalf("tenant b was repaired too: %d %v", bob, err)
	}
	resp, err = http.Post(srv.URL+"/admin/v1/counters/repair?tenant=a%2Fb", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("bad tenant: %d", resp.StatusCode)
	}
}
