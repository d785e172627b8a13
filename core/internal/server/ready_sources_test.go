package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/heraldhq/herald/core/internal/source"
)

// A source down is listed in /admin/v1/ready with its fixed-word reason,
// and the daemon stays ready: its API, pipeline and other sources work.
func TestReadySourceDownDegradesOnly(t *testing.T) {
	sources := func() []source.Status {
		return []source.Status{{Name: "billing", State: "down", Reason: "unreachable", Error: "dial tcp 10.1.2.3:5432: refused"},
			{Name: "orders", State: "up", Backlog: 3}}
	}
	h := ReadyHandler(func(context.Context) []string { return nil }, nil, sources)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, AdminReadyPath, nil))
	var st ReadyStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusOK || st.Status != "ready" || len(st.Sources) != 2 || st.Sources[0].Reason != "unreachable" ||
		st.Sources[0].Error != "" || st.Sources[1].Backlog != 3 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if strings.Contains(rec.Body.String(), "10.1.2.3") {
		t.Fatalf("the ready answer names the source's host: %s", rec.Body)
	}
}
